"""Writing and reading moetune's files so that a crash, a kill or a second moetune never
leaves half of one: the one atomic write (profiles, bench results, the hub cache,
``export --out``), the lock of a read-merge-write, and JSON that is too deep for Python
read as bad JSON.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from moetune.errors import BadValueError, FolderNotFoundError, denied

# a folder or file of moetune's own that it may not read, list or write
DENIED_HINT = "check its owner and mode, or set MOETUNE_HOME to a folder of yours"


def _temp_beside(path: Path) -> tuple[Path, int]:
    """A new file ``.NAME.XXXXXXXX.tmp`` in ``path``'s folder, opened for writing (its mode
    the umask's, as a plain new file would have)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; Windows has no handle on a folder)."""
    if os.name == "nt":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file in the same folder, written, flushed,
    fsynced and renamed over it, then the folder fsynced; the old file or the new one, never
    half of either. An existing file keeps its permission bits; the temporary file is removed
    on failure. OSError when it cannot be done."""
    try:
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = None
    tmp, fd = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            tmp.chmod(mode)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_folder(path.parent)


def save_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically, creating its folders (moetune's own files:
    profiles, bench results; a link: the file it points to); BadValueError naming the file
    when it cannot be written."""
    try:
        real = Path(os.path.realpath(path))
        real.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(real, text.encode("utf-8"))
    except PermissionError as exc:
        raise denied(path, exc, doing="cannot write", hint=DENIED_HINT) from None
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for a read-merge-write of ``path``, held on ``.NAME.lock`` beside it
    (a lock on ``path`` itself would not serialize: the rename replaces that file). The lock
    file stays: removing it would let a waiting process lock a file nobody else sees."""
    fd = os.open(path.with_name(f".{path.name[:200]}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _lock(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


if sys.platform == "win32":  # pragma: no cover - this module's tests run on Linux
    import msvcrt

    def _lock(fd: int) -> None:
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)  # retries for 10 s, then OSError
                return
            except OSError:
                continue

else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)


def _check_target(path: Path) -> Path:
    """The file a user asked moetune to write (a link: the file it points to), or one clear
    error: a folder, a folder that does not exist, not a regular file, not writable."""
    real = Path(os.path.realpath(path))
    if real.is_dir():
        raise BadValueError(f"cannot write {path}: it is a folder", hint="give a file name")
    if not real.parent.is_dir():
        raise FolderNotFoundError(
            f"cannot write {path}: no folder {real.parent}", hint="create the folder first"
        )
    try:
        info = real.stat()
    except FileNotFoundError:
        return real
    if not stat.S_ISREG(info.st_mode):
        raise BadValueError(f"cannot write {path}: not a regular file")
    fd = os.open(real, os.O_WRONLY | os.O_APPEND)  # may it be written (immutable, read-only)?
    os.close(fd)
    return real


def check_writable(path: Path) -> None:
    """Refuse at once a file moetune could not write (``export --out``, before any work):
    a folder, a missing folder, not a regular file, not writable; one clear error."""
    try:
        _check_target(path)
    except PermissionError as exc:
        raise denied(path, exc, doing="cannot write") from None
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror or exc}") from None


def update_text(path: Path, merge: Callable[[str | None], str]) -> None:
    """Under :func:`locked`: read ``path`` (None when there is none yet), write
    ``merge(old)`` atomically. Concurrent updates serialize, so none loses another's text.
    A folder, a missing folder, a file moetune may not write or cannot read as UTF-8: one
    clear error, and the file as it was."""
    try:
        real = _check_target(path)
        with locked(real):
            try:
                old: str | None = real.read_text(encoding="utf-8")
            except FileNotFoundError:
                old = None
            except UnicodeDecodeError:
                raise BadValueError(
                    f"{path} is not UTF-8 text: moetune leaves it as it is",
                    hint="give another file, or convert this one to UTF-8",
                ) from None
            write_atomic(real, merge(old).encode("utf-8"))
    except PermissionError as exc:
        raise denied(path, exc, doing="cannot write") from None
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror or exc}") from None


HEAD_BYTES = 4096  # what ``read_text``'s ``check`` sees of a file


def read_text(path: Path, check: Callable[[bytes, int], None] | None = None) -> str:
    """A stored file's UTF-8 text. A FIFO, a device or a folder is an OSError, found without
    waiting (a FIFO opened for reading would wait for a writer); so is a link to nothing or
    a loop of links. Not UTF-8: UnicodeDecodeError. ``check`` sees the file's first
    ``HEAD_BYTES`` bytes and its size before the rest is read, and raises to refuse it (a
    model passed for a text file, a file too large to be one)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if check is None:
            return file.read().decode("utf-8")
        head = file.read(HEAD_BYTES)
        check(head, info.st_size)
        return (head + file.read()).decode("utf-8")


def json_files(folder: Path) -> list[Path]:
    """The ``*.json`` files in one of moetune's folders, in name order, hidden ones (a
    temporary ``.NAME.tmp``) left out; none where there is no such folder. A folder moetune
    may not list is a PermissionDeniedError naming it (never an empty list)."""
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.endswith(".json")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except PermissionError as exc:
        raise denied(folder, exc, hint=DENIED_HINT) from None
    return [folder / name for name in sorted(names) if not name.startswith(".")]


def parse_json(text: str) -> Any:
    """``json.loads``; nesting too deep for Python is a ValueError like any other bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
