"""One error hierarchy; cli/app.py turns each into one line on stderr and a named exit code."""

from __future__ import annotations

from enum import IntEnum


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
    """llama-server could not allocate a buffer (device or host memory ran out)."""

    exit_code = ExitCode.OUT_OF_MEMORY


class PortInUseError(MoetuneError):
    """The TCP port asked for llama-server is already taken."""

    exit_code = ExitCode.PORT_IN_USE


class CheckFailedError(MoetuneError):
    """`moetune doctor` found a check that fails (its report is printed first)."""

    exit_code = ExitCode.CHECK_FAILED


class FolderNotFoundError(MoetuneError):
    """A file is to be written into a folder that does not exist (``export --out``)."""

    exit_code = ExitCode.FILE_NOT_FOUND


class ProfileError(BadValueError):
    """A profile file cannot be used: not TOML/JSON, or a field is missing, unknown or wrong."""


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
