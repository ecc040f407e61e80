"""Header-only GGUF reader.

Reads magic, version, metadata and tensor infos of one GGUF file without touching tensor
data, and without decoding the arrays a plan never needs (vocabulary tokens, merges, scores,
token types): those are recorded as :class:`SkippedArray` (element type and length) and
walked past. Opening a 150k-token header takes milliseconds instead of seconds.

Every count read from the file is checked against the bytes that remain before anything is
allocated or looped over, so a corrupt or hostile header ends in :class:`GGUFFormatError`,
never in a huge allocation or an endless loop.

:func:`read_header_prefix` parses the first bytes of a longer file (a remote header fetched
with HTTP ranges): the sanity checks use the FILE's size, and a buffer that ends before the
header does raises :class:`TruncatedHeaderError` with the number of bytes to fetch next.
"""

from __future__ import annotations

import difflib
import mmap
import os
import stat
import struct
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple, Union

from moetune.errors import (
    GGUFFormatError,
    ModelFileError,
    TruncatedHeaderError,
    UnsupportedModelError,
    denied,
)
from moetune.gguf import keys
from moetune.gguf.types import (
    ARRAY,
    SCALAR_FORMATS,
    STRING,
    GgmlType,
    ggml_type,
    tensor_nbytes,
    value_type_name,
)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
# Arrays longer than this, and every array under "tokenizer.", are skipped, not decoded.
MAX_DECODED_ARRAY = 4096
SKIPPED_PREFIXES = ("tokenizer.",)
MAX_ARRAY_DEPTH = 8
MAX_STRING = 1 << 24  # no key, value or tensor name in a real file comes near 16 MiB

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_UNPACK_U64 = _U64.unpack_from
Skip = tuple[int, int, int]  # a walked string array: its first string's offset, count, end


class SkippedArray(NamedTuple):
    """An array the reader walked past: its element type name and length."""

    item_type: str
    length: int


MetaValue = Union[int, float, bool, str, list["MetaValue"], SkippedArray]  # noqa: UP007


class TensorInfo(NamedTuple):
    """One tensor as the header describes it; ``nbytes`` is None for an unknown ggml type."""

    name: str
    shape: tuple[int, ...]
    ggml_type: GgmlType
    offset: int  # relative to the start of the data region
    nbytes: int | None
    shard: int = 0  # index of the shard file holding it (0 for single-file models)

    @property
    def type_name(self) -> str:
        return self.ggml_type.name


class GGUFHeader(NamedTuple):
    """What one GGUF file says about itself."""

    path: Path
    version: int
    metadata: dict[str, MetaValue]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int  # absolute file offset of the (aligned) data region
    file_bytes: int
    # the string arrays walked past (the vocabulary, the merges): where each one's strings
    # begin, how many, where they end; handed back to a later parse of the same bytes (the
    # hub's cache of headers), it jumps over them instead of walking every string again
    skips: tuple[Skip, ...] = ()

    @property
    def data_end(self) -> int:
        """Absolute offset one past the last tensor's bytes (what a complete file needs)."""
        ends = [t.offset + t.nbytes for t in self.tensors if t.nbytes is not None]
        return self.data_offset + max(ends, default=0)

    @property
    def has_tensor_data(self) -> bool:
        """False for a header-only file: the data region the tensors need is not in the file."""
        return self.file_bytes >= self.data_end


class _Cursor:
    """Bounds-checked little-endian reads over a read-only buffer.

    ``size`` is the buffer's length, ``file_size`` the length of the file it begins (the
    same for a local file; more for a prefix of a remote one). Reading past ``size`` but not
    past ``file_size`` raises :class:`TruncatedHeaderError`; past ``file_size``,
    :class:`GGUFFormatError`.
    """

    __slots__ = ("buf", "file_size", "jumps", "pos", "size", "walked")

    def __init__(
        self, buf: bytes | mmap.mmap, file_size: int | None = None, skips: Sequence[Skip] = ()
    ) -> None:
        self.buf = buf
        self.pos = 0
        self.size = len(buf)
        self.file_size = self.size if file_size is None else max(file_size, self.size)
        self.jumps = {start: (n, end) for start, n, end in skips}
        self.walked: list[Skip] = []

    def need(self, n_bytes: int, what: str) -> None:
        if n_bytes < 0:
            raise GGUFFormatError(f"corrupt GGUF header: {what} has a negative size")
        if self.pos + n_bytes > self.size:
            self.truncated(self.pos + n_bytes, what, n_bytes)

    def truncated(self, end: int, what: str, n_bytes: int | None = None) -> None:
        """The buffer ends before ``end``: ask for more, or refuse what the file cannot hold."""
        if 0 <= end <= self.file_size and self.size < self.file_size:
            raise TruncatedHeaderError(end, f"GGUF header continues past byte {self.size}")
        if n_bytes is None:
            raise GGUFFormatError(f"truncated GGUF header inside {what}")
        raise GGUFFormatError(
            f"truncated GGUF header: {what} needs {n_bytes} bytes at offset {self.pos}, "
            f"file has {self.file_size - self.pos} left"
        )

    def scalar(self, fmt: struct.Struct, what: str) -> int | float | bool:
        self.need(fmt.size, what)
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value  # type: ignore[no-any-return]

    def u32(self, what: str) -> int:
        return int(self.scalar(_U32, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(_U64, what))

    def string(self, what: str) -> str:
        length = self.u64(f"{what} length")
        if length > MAX_STRING:
            raise GGUFFormatError(f"implausible {what} length {length} at offset {self.pos - 8}")
        self.need(length, what)
        raw = self.buf[self.pos : self.pos + length]
        self.pos += length
        return bytes(raw).decode("utf-8", errors="replace")

    def count(self, what: str, min_item_bytes: int) -> int:
        """A u64 element count, refused if the rest of the FILE cannot possibly hold it."""
        start = self.pos
        n = self.u64(what)
        if n * min_item_bytes > self.file_size - self.pos:
            raise GGUFFormatError(
                f"corrupt GGUF header: {what} of {n} at offset {start} exceeds the file"
            )
        return n

    def skip_strings(self, n: int, what: str) -> None:
        """Walk past n strings (u64 length + bytes each) without decoding them (jump, where
        an earlier parse of the same bytes walked these)."""
        buf, start, size, unpack = self.buf, self.pos, self.size, _UNPACK_U64
        jump = self.jumps.get(start)
        if jump is not None and jump[0] == n and start + 8 * n <= jump[1] <= size:
            self.pos = jump[1]
            self.walked.append((start, n, jump[1]))
            return
        pos, walked = start, 0
        try:
            for walked in range(n):  # noqa: B007 (how far the walk got is used below)
                pos += 8 + unpack(buf, pos)[0]
            walked = n
        except (struct.error, OverflowError):
            pass
        if pos > size or walked < n:
            # Where the array probably ends: the strings walked so far, on average.
            average = (pos - start) / walked if walked else 16.0
            self.truncated(pos + int((n - walked) * max(average, 8.0)), what)
        self.pos = pos
        self.walked.append((start, n, pos))


def _near(path: Path) -> str | None:
    """What the user may have meant by a missing ``path``: its header-only copy beside it
    (``X.header.gguf``, what moetune ships for the examples: everything plan reads), else a
    GGUF file of its folder with a close name."""
    if path.suffix == ".gguf" and not path.name.endswith(".header.gguf"):
        header = path.with_name(path.stem + ".header.gguf")
        if header.is_file():
            return f"plan and inspect read its header-only copy, {header}"
    try:
        names = [p.name for p in path.parent.glob("*.gguf")] if path.parent.is_dir() else []
    except OSError:
        return None
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.8)
    return f"did you mean {path.with_name(close[0])}?" if close else None


def _open_buffer(path: Path) -> tuple[mmap.mmap | bytes, int]:
    """Map the file read-only; refuse what is not a readable regular file.

    Opened non-blocking so that a FIFO or device given by mistake is refused, not waited on.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as exc:
        raise ModelFileError(f"no such file: {path}", hint=_near(path)) from exc
    except IsADirectoryError as exc:
        raise ModelFileError(f"{path} is a directory, not a GGUF file") from exc
    except PermissionError as exc:
        raise denied(path, exc, doing="cannot read") from exc
    except OSError as exc:
        raise ModelFileError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ModelFileError(f"{path} is a directory, not a GGUF file")
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(f"{path} is not a regular file")
        if info.st_size == 0:
            return b"", 0
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ), info.st_size
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read one GGUF file's header (metadata and tensor infos); never reads tensor data."""
    file_path = Path(path)
    buf, size = _open_buffer(file_path)
    try:
        return _parse(file_path, buf, size)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def read_header_bytes(data: bytes, name: str = "<bytes>") -> GGUFHeader:
    """Parse a header held in memory (``file_bytes`` is the length of ``data``)."""
    return _parse(Path(name), data, len(data))


def read_header_prefix(
    data: bytes, file_bytes: int, name: str | os.PathLike[str], skips: Sequence[Skip] = ()
) -> GGUFHeader:
    """Parse a header from the first ``len(data)`` bytes of a file of ``file_bytes`` bytes
    (a remote file read with HTTP ranges; ``name`` becomes the header's ``path``); ``skips``:
    the header's own ``skips`` from an earlier parse of the same bytes.

    Raises :class:`TruncatedHeaderError` when ``data`` ends before the header does: its
    ``needed_bytes`` is the prefix length to try next (exact, or an estimate from the average
    string length when the buffer ends inside a skipped array). Counts are checked against
    ``file_bytes``, so a prefix of a valid file is never called corrupt for being short.
    """
    return _parse(Path(name), data, max(file_bytes, len(data)), skips)


def _parse(path: Path, buf: mmap.mmap | bytes, size: int, skips: Sequence[Skip] = ()) -> GGUFHeader:
    cur = _Cursor(buf, size, skips)
    if size == 0:
        raise GGUFFormatError(f"{path.name} is empty, not a GGUF file")
    if len(buf) < 4 and size >= 4:
        raise TruncatedHeaderError(4, "GGUF header continues past byte 0")
    if size < 4 or bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFFormatError(f"{path.name} is not a GGUF file (bad magic)")
    cur.pos = 4
    version = _read_version(cur)
    n_tensors = cur.count("tensor count", min_item_bytes=8 + 4 + 4 + 8)
    n_kv = cur.count("metadata count", min_item_bytes=8 + 4)
    metadata: dict[str, MetaValue] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        value_type = cur.u32(f"type of {key}")
        metadata[key] = _read_value(cur, value_type, key)
    alignment = _alignment(metadata)
    tensors = tuple(_read_tensor_info(cur) for _ in range(n_tensors))
    data_offset = -(-cur.pos // alignment) * alignment
    _check_tensor_offsets(tensors, alignment)
    header = GGUFHeader(
        path, version, metadata, tensors, alignment, data_offset, size, tuple(cur.walked)
    )
    _check_in_file(header)
    return header


def read_string_array(path: str | os.PathLike[str], key: str) -> list[bytes] | None:
    """The raw strings of one metadata array that ``read_header`` walks past (the vocabulary,
    ``tokenizer.ggml.tokens``); None when the file has no such array of strings."""
    file_path = Path(path)
    buf, size = _open_buffer(file_path)
    try:
        cur = _Cursor(buf)
        if size < 4 or bytes(buf[:4]) != GGUF_MAGIC:
            raise GGUFFormatError(f"{file_path.name} is not a GGUF file (bad magic)")
        cur.pos = 4
        _read_version(cur)
        cur.count("tensor count", min_item_bytes=8 + 4 + 4 + 8)
        n_kv = cur.count("metadata count", min_item_bytes=8 + 4)
        for _ in range(n_kv):
            name = cur.string("metadata key")
            value_type = cur.u32(f"type of {name}")
            if name != key:
                _read_value(cur, value_type, name)
                continue
            if value_type != ARRAY or cur.u32(f"element type of {key}") != STRING:
                return None
            n = cur.count(f"length of {key}", 8)
            found = []
            for _ in range(n):
                length = cur.u64(f"{key} item length")
                cur.need(length, key)
                found.append(bytes(buf[cur.pos : cur.pos + length]))
                cur.pos += length
            return found
        return None
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _read_version(cur: _Cursor) -> int:
    version = cur.u32("version")
    if version in SUPPORTED_VERSIONS:
        return version
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    if swapped in (1, 2, 3):
        raise UnsupportedModelError(
            "big-endian GGUF files are not supported",
            hint="use the little-endian file (llama.cpp on x86/ARM needs it too)",
        )
    if version == 1:
        raise UnsupportedModelError("GGUF version 1 is not supported; re-convert the model")
    raise GGUFFormatError(f"unknown GGUF version {version}")


def _read_value(cur: _Cursor, value_type: int, key: str) -> MetaValue:
    fmt = SCALAR_FORMATS.get(value_type)
    if fmt is not None:
        return cur.scalar(fmt, key)
    if value_type == STRING:
        return cur.string(key)
    if value_type == ARRAY:
        return _read_array(cur, key, depth=0)
    raise GGUFFormatError(f"metadata {key!r} has unknown value type {value_type}")


def _read_array(cur: _Cursor, key: str, depth: int) -> MetaValue:
    if depth > MAX_ARRAY_DEPTH:
        raise GGUFFormatError(f"metadata {key!r} nests arrays deeper than {MAX_ARRAY_DEPTH}")
    item_type = cur.u32(f"element type of {key}")
    fmt = SCALAR_FORMATS.get(item_type)
    min_item = fmt.size if fmt is not None else (8 if item_type in (STRING, ARRAY) else 0)
    if min_item == 0:
        raise GGUFFormatError(f"metadata {key!r} is an array of unknown type {item_type}")
    n = cur.count(f"length of {key}", min_item)
    if n > MAX_DECODED_ARRAY or key.startswith(SKIPPED_PREFIXES):
        _skip_items(cur, item_type, n, key, depth)
        return SkippedArray(value_type_name(item_type), n)
    if fmt is not None:
        return [cur.scalar(fmt, key) for _ in range(n)]
    reader: Callable[[], MetaValue] = (
        (lambda: cur.string(key))
        if item_type == STRING
        else (lambda: _read_array(cur, key, depth + 1))
    )
    return [reader() for _ in range(n)]


def _skip_items(cur: _Cursor, item_type: int, n: int, key: str, depth: int) -> None:
    fmt = SCALAR_FORMATS.get(item_type)
    if fmt is not None:
        cur.need(n * fmt.size, key)
        cur.pos += n * fmt.size
    elif item_type == STRING:
        cur.skip_strings(n, key)
    else:
        for _ in range(n):
            _read_array(cur, key, depth + 1)


def _alignment(metadata: dict[str, MetaValue]) -> int:
    value = metadata.get(keys.ALIGNMENT, DEFAULT_ALIGNMENT)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value & (value - 1):
        raise GGUFFormatError(f"general.alignment must be a power of two, got {value!r}")
    return value


def _read_tensor_info(cur: _Cursor) -> TensorInfo:
    name = cur.string("tensor name")
    n_dims = cur.u32(f"dimension count of {name}")
    if not 1 <= n_dims <= GGML_MAX_DIMS:
        raise GGUFFormatError(f"tensor {name!r} has {n_dims} dimensions (1..4 allowed)")
    shape = tuple(cur.u64(f"shape of {name}") for _ in range(n_dims))
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    if n_elements >= 1 << 62:
        raise GGUFFormatError(f"tensor {name!r} has an implausible shape {list(shape)}")
    kind = ggml_type(cur.u32(f"type of {name}"))
    offset = cur.u64(f"offset of {name}")
    if kind.block_size is not None and shape[0] % kind.block_size != 0:
        raise GGUFFormatError(
            f"tensor {name!r}: row of {shape[0]} is not a multiple of the "
            f"{kind.name} block size {kind.block_size}"
        )
    return TensorInfo(name, shape, kind, offset, tensor_nbytes(kind, shape))


def _check_tensor_offsets(tensors: tuple[TensorInfo, ...], alignment: int) -> None:
    """Names unique, offsets aligned, and no tensor's bytes overlapping the next one's."""
    seen: set[str] = set()
    for tensor in tensors:
        if tensor.name in seen:
            raise GGUFFormatError(f"duplicate tensor name {tensor.name!r}")
        seen.add(tensor.name)
        if tensor.offset % alignment:
            raise GGUFFormatError(
                f"tensor {tensor.name!r} offset {tensor.offset} is not aligned to {alignment}"
            )
    placed = sorted((t for t in tensors if t.nbytes is not None), key=lambda t: t.offset)
    for before, after in pairwise(placed):
        if before.offset + (before.nbytes or 0) > after.offset:
            raise GGUFFormatError(
                f"tensors {before.name!r} (bytes {before.offset} to "
                f"{before.offset + (before.nbytes or 0)}) and {after.name!r} (from "
                f"{after.offset}) overlap"
            )


def _check_in_file(header: GGUFHeader) -> None:
    """A file that holds tensor data holds all of it (llama.cpp: "tensor data is not within
    the file bounds"); one that ends where the data would begin is header-only."""
    if header.file_bytes <= header.data_offset or header.has_tensor_data:
        return
    past = next(
        t
        for t in header.tensors
        if t.nbytes is not None and header.data_offset + t.offset + t.nbytes > header.file_bytes
    )
    end = header.data_offset + past.offset + (past.nbytes or 0)
    raise GGUFFormatError(
        f"{header.path.name} is truncated: tensor {past.name!r} ends at byte {end}, "
        f"the file has {header.file_bytes}",
        hint="download the file again (a header-only file ends before the tensor data)",
    )
