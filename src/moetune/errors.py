"""One error hierarchy; cli/base.py turns each into one line on stderr and a named exit code.
``named_error`` is the one place where an exception that is not a MoetuneError but that a
user can cause (an unusable path, a file that is not text, a dropped connection) gets its
code; anything else is a bug of moetune's."""

from __future__ import annotations

import errno
from collections.abc import Callable
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Process exit codes. Stable: scripts may depend on them."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    BAD_MODEL = 3
    FILE_NOT_FOUND = 4
    BAD_VALUE = 5
    DOES_NOT_FIT = 6
    NO_GPU = 7
    SERVER_NOT_FOUND = 8
    SERVER_FAILED = 9
    OUT_OF_MEMORY = 10
    PORT_IN_USE = 11
    CHECK_FAILED = 12
    NETWORK = 13
    HUB_AUTH = 14
    PERMISSION_DENIED = 15
    INTERRUPTED = 130


class MoetuneError(Exception):
    """Base of every error a user can cause. Carries a one-line message and an optional hint."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ModelFileError(MoetuneError):
    """The model path cannot be opened: missing, a directory, unreadable, a shard missing."""

    exit_code = ExitCode.FILE_NOT_FOUND


class GGUFFormatError(MoetuneError):
    """The file is not a valid GGUF file (bad magic, truncated, absurd counts, ...)."""

    exit_code = ExitCode.BAD_MODEL


class UnsupportedModelError(GGUFFormatError):
    """A valid file that moetune deliberately refuses (big-endian, GGUF v1)."""


class TruncatedHeaderError(GGUFFormatError):
    """A header parsed from a prefix of a longer file (a remote one read with HTTP ranges)
    runs past the prefix: ``needed_bytes`` is the prefix length to fetch and parse next.
    Never reaches the user from a complete file (that is a plain GGUFFormatError)."""

    def __init__(self, needed_bytes: int, message: str = "GGUF header continues") -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes


class ProjectorError(GGUFFormatError):
    """A file given as a multimodal projector (--mmproj) is not one llama.cpp can use with the
    model: a text model, an unknown projector type, or an embedding width that differs."""


class DraftModelError(GGUFFormatError):
    """A draft model (--draft) llama.cpp would refuse beside its target: another vocabulary."""


class BadValueError(MoetuneError):
    """A value given on the command line is malformed (size string, context, cache type)."""

    exit_code = ExitCode.BAD_VALUE


class DoesNotFitError(MoetuneError):
    """The model cannot fit the GPU budget (or host RAM) with any placement."""

    exit_code = ExitCode.DOES_NOT_FIT


class NoGpuError(MoetuneError):
    """No GPU was found and none was described with --vram."""

    exit_code = ExitCode.NO_GPU


class ServerNotFoundError(MoetuneError):
    """llama-server cannot be found, or the path given for it is not an executable file."""

    exit_code = ExitCode.SERVER_NOT_FOUND


class ServerFailedError(MoetuneError):
    """llama-server failed: it exited, did not become ready in time, or answered with an error."""

    exit_code = ExitCode.SERVER_FAILED


class OutOfMemoryError(ServerFailedError):
    """llama-server could not allocate a buffer (device or host memory ran out), or moetune
    itself ran out of memory."""

    exit_code = ExitCode.OUT_OF_MEMORY


class PortInUseError(MoetuneError):
    """The TCP port asked for llama-server is already taken."""

    exit_code = ExitCode.PORT_IN_USE


class CheckFailedError(MoetuneError):
    """`moetune doctor` found a check that fails (its report is printed first)."""

    exit_code = ExitCode.CHECK_FAILED


class TooNoisyError(CheckFailedError):
    """`moetune calibrate --measure`'s measurements disagree beyond core/noise.py's bounds
    (every test's samples, or the fit's leave-one-out error): nothing was kept."""


class InterruptedByUser(MoetuneError):
    """Ctrl-C, SIGTERM or SIGHUP (llama.cpp's servers stopped on the way out)."""

    exit_code = ExitCode.INTERRUPTED


class PermissionDeniedError(MoetuneError):
    """A file or folder moetune may not read, list or write (its owner or mode, as root a
    dropped capability): a model, a profile, a folder of MOETUNE_HOME's, ``export --out``."""

    exit_code = ExitCode.PERMISSION_DENIED


class FolderNotFoundError(MoetuneError):
    """A file is to be written into a folder that does not exist (``export --out``)."""

    exit_code = ExitCode.FILE_NOT_FOUND


class ProfileError(BadValueError):
    """A profile file cannot be used: not TOML/JSON, or a field is missing, unknown or wrong.
    ``path``: the stored file, where it is one."""

    path: str | None = None


class ProfileNotFoundError(MoetuneError):
    """No hardware or tuned profile has the name asked for."""

    exit_code = ExitCode.FILE_NOT_FOUND


class HubError(MoetuneError):
    """Talking to the model hub (or another HTTP server holding a GGUF file) failed."""

    exit_code = ExitCode.NETWORK


class NetworkError(HubError):
    """No answer: DNS failure, refused connection, timeout, a 5xx; or an answer moetune
    refuses: a redirect loop, a server that ignores Range requests."""


class HubAuthError(HubError):
    """401/403: the repository is gated or private and HF_TOKEN is missing or cannot read it."""

    exit_code = ExitCode.HUB_AUTH


class HubNotFoundError(HubError):
    """404: no such repository, file, or quant in the repository (the message lists those
    that exist)."""

    exit_code = ExitCode.FILE_NOT_FOUND


# --- exceptions from outside the hierarchy -------------------------------------------------------


def named_error(exc: BaseException) -> MoetuneError | None:
    """``exc`` as the MoetuneError it stands for: itself, or the named error of a family a user
    can cause (see ``_FOREIGN``); None for a bug of moetune's."""
    if isinstance(exc, MoetuneError):
        return exc
    if isinstance(exc, KeyboardInterrupt):  # llamacpp.process.Terminated too
        return InterruptedByUser("interrupted")
    if isinstance(exc, MemoryError):
        return OutOfMemoryError(
            "moetune ran out of memory", hint="an input may be far larger than it says"
        )
    if isinstance(exc, RecursionError):
        return BadValueError(
            "an input is nested too deeply to read", hint="a JSON or TOML file of many levels?"
        )
    if isinstance(exc, UnicodeDecodeError):
        return BadValueError(f"not UTF-8 text: {exc}")
    if isinstance(exc, BrokenPipeError):  # whoever read stdout stopped: SIGPIPE's case
        return InterruptedByUser("output closed (broken pipe)")
    if isinstance(exc, OSError):
        return _os_error(exc)
    if not isinstance(exc, Exception):  # SystemExit, GeneratorExit: not errors
        return None
    families = {(c.__module__.partition(".")[0], c.__qualname__) for c in type(exc).__mro__}
    for family, make in _FOREIGN.items():
        if family in families:
            return make(exc)
    return None


def _os_error(exc: OSError) -> MoetuneError:
    """A path that cannot be used (missing, a directory, refused, full, a loop), or a socket's
    failure (refused, reset, timed out; socket.gaierror: a name that does not resolve)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
    if isinstance(exc, PermissionError):
        return denied(paths or None, exc)
    if exc.filename is not None:
        return ModelFileError(f"{paths}: {reason}")
    if isinstance(exc, ConnectionError | TimeoutError) or type(exc).__module__ == "socket":
        return NetworkError(f"connection failed: {reason}")
    return ModelFileError(f"cannot read or write a file: {reason}")


def denied(
    path: object, exc: OSError | None = None, *, doing: str = "", hint: str | None = None
) -> PermissionDeniedError:
    """``PATH: permission denied``, or ``DOING PATH: ...`` (``cannot write``); after it the
    errno's own words where they are not EACCES's (EPERM: ``Operation not permitted``)."""
    said = ""
    if exc is not None and exc.errno != errno.EACCES and exc.strerror:
        said = f" ({exc.strerror})"
    where = " ".join(str(part) for part in (doing, path) if part)
    return PermissionDeniedError(f"{where + ': ' if where else ''}permission denied{said}", hint)


def _http_error(exc: Exception) -> MoetuneError:
    """httpx's errors: a dropped connection, a timeout, a protocol violation, a status."""
    where = ""
    try:
        url = str(getattr(exc, "request").url).split("?", 1)[0]  # noqa: B009 (not Exception's)
        where = f", {url}"
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError for an unset request
        pass
    detail = str(exc) or type(exc).__name__
    return NetworkError(f"network error: {detail} ({type(exc).__name__}{where})")


def _validation_error(exc: Exception) -> MoetuneError:
    """pydantic's ValidationError of what a user's file says: the first few fields, no URL."""
    errors: list[dict[str, Any]] = getattr(exc, "errors")(include_url=False)  # noqa: B009
    shown = [
        f"{'.'.join(str(part) for part in error.get('loc', ())) or 'value'}: {error.get('msg')}"
        for error in errors[:3]
    ]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return BadValueError(f"invalid {getattr(exc, 'title', 'value')}: {'; '.join(shown)}{more}")


# Families by (top-level package, class name) anywhere in the exception's MRO, so that this
# module imports none of the libraries (each has one home, tests/unit/test_layers.py).
_FOREIGN: dict[tuple[str, str], Callable[[Exception], MoetuneError]] = {
    ("httpx", "HTTPError"): _http_error,
    ("httpx", "InvalidURL"): lambda exc: BadValueError(f"not a usable URL: {exc}"),
    ("pydantic_core", "ValidationError"): _validation_error,
    ("json", "JSONDecodeError"): lambda exc: BadValueError(f"not valid JSON: {exc}"),
    ("tomllib", "TOMLDecodeError"): lambda exc: BadValueError(f"not valid TOML: {exc}"),
    ("tomli", "TOMLDecodeError"): lambda exc: BadValueError(f"not valid TOML: {exc}"),
}
