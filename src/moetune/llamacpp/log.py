"""Reading llama-server's log: buffer sizes, the ``--fit`` dry run, why it exited.

Memory lines are printed at ``-lv 4``; match the text, not the prefix:

load_tensors:   CPU_Mapped model buffer size =    15.34 MiB
llama_kv_cache:        CPU KV buffer size =     8.50 MiB
llama_memory_recurrent:        CPU RS buffer size =     0.22 MiB
sched_reserve:        CPU compute buffer size =     7.55 MiB
llama_context:        CPU  output buffer size =     0.00 MiB
clip_ctx: CLIP using RPC0[127.0.0.1:50052] backend            (a projector, --mmproj)
load_hparams: model size:         0.30 MiB
reserve_compute_meta: RPC0[127.0.0.1:50052] compute buffer size =     0.86 MiB
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from moetune.record import record
from moetune.records.fit import FitChoice, FitDevice
from moetune.units import MIB

BUFFER_KINDS = ("model", "KV", "RS", "compute", "output")
_BUFFER_RE = re.compile(
    r"(?P<device>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size\s*=\s*"
    r"(?P<mib>\d+(?:\.\d+)?) MiB"
)
_CONTEXT_START = "llama_context: constructing llama_context"
_CLIP_START = "clip_model_loader: model name"
_CLIP_BACKEND_RE = re.compile(r"CLIP using (?P<device>\S+) backend")
_CLIP_MODEL_RE = re.compile(r"load_hparams: model size:\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_BIND_RE = re.compile(r"couldn't bind HTTP server socket.*|couldn't start HTTP listener.*")
_SECTION_START = "llama_model_loader: loaded meta data"
_DRY_RUN_RE = re.compile(r"no_alloc\s*=\s*1\b")
# Allocation failures, as ggml/src and src/ print them (ggml-backend.cpp, ggml-alloc.c, ggml.c,
# ggml-cuda.cu "cudaMalloc failed: out of memory", llama-model.cpp "unable to allocate X buffer",
# llama-context.cpp "failed to allocate compute pp buffers", Metal, Vulkan; std::bad_alloc from
# host-side vectors, e.g. KV cell bookkeeping for a huge -c).
_OOM_RE = re.compile(
    r"out of memory|cudaMalloc failed|failed to allocate|unable to allocate|insufficient memory"
    r"|failed to reserve|OutOfDeviceMemory|ErrorOutOfHostMemory|bad_alloc",
    re.IGNORECASE,
)
# Debug-level allocation misses that llama.cpp recovers from.
_OOM_BENIGN_RE = re.compile(r"pinned memory|async uploads|reserving \(")
# llama.cpp prints MiB with two decimals: a printed figure is exact to +-0.005 MiB.
PRINTED_MIB_TOLERANCE_BYTES = round(0.005 * MIB)


@record(frozen=True)
class BufferLine:
    device: str  # CPU, CPU_Mapped, CPU_REPACK, CUDA0, CUDA_Host, RPC0[127.0.0.1:50052], ...
    kind: str  # one of BUFFER_KINDS
    mib: float

    @property
    def bytes(self) -> int:
        return round(self.mib * MIB)


def parse_buffers(text: str) -> list[BufferLine]:
    """Every buffer in a llama.cpp log, in order: the buffer-size lines, and a projector's
    weights (clip logs ``load_hparams: model size: X MiB`` after ``CLIP using DEV backend``)
    as a ``model`` buffer of that device. A context that reserves its compute buffer more
    than once (the MTP context does) keeps one line per device, the largest, as ggml does."""
    found: list[BufferLine] = []
    clip_device = "CPU"
    reserved: dict[str, int] = {}  # this context's compute lines: device -> index in found
    for line in text.splitlines():
        if _CONTEXT_START in line or _CLIP_START in line:
            reserved = {}
        if (clip := _CLIP_BACKEND_RE.search(line)) is not None:
            clip_device = clip["device"]
        elif (size := _CLIP_MODEL_RE.search(line)) is not None:
            found.append(BufferLine(clip_device, "model", float(size["mib"])))
        elif (m := _BUFFER_RE.search(line)) is not None:
            buffer = BufferLine(m["device"], m["kind"], float(m["mib"]))
            if buffer.kind == "compute" and buffer.device in reserved:
                at = reserved[buffer.device]
                found[at] = max(found[at], buffer, key=lambda b: b.mib)
                continue
            if buffer.kind == "compute":
                reserved[buffer.device] = len(found)
            found.append(buffer)
    return found


def total_mib(lines: Iterable[BufferLine], kind: str, device_prefix: str = "") -> float:
    """Sum of the printed sizes of one kind, on devices whose name starts with the prefix."""
    return sum(b.mib for b in lines if b.kind == kind and b.device.startswith(device_prefix))


def real_load_lines(text: str) -> list[str]:
    """The log's lines without the ``--fit`` dry-run loads (sections that print ``no_alloc = 1``).

    A section starts at each ``llama_model_loader: loaded meta data`` line.
    """
    sections: list[list[str]] = [[]]
    for line in text.splitlines():
        if _SECTION_START in line:
            sections.append([])
        sections[-1].append(line)
    kept = [s for s in sections if not any(_DRY_RUN_RE.search(line) for line in s)]
    return [line for section in kept for line in section]


def allocation_failure(text: str) -> str | None:
    """The first line of a llama.cpp log that reports a failed memory allocation, if any."""
    for line in real_load_lines(text):
        if _OOM_RE.search(line) and not _OOM_BENIGN_RE.search(line):
            return line.strip()
    return None


def bind_failure(text: str) -> str | None:
    """llama-server's own message when it could not bind its HTTP port, if present."""
    m = _BIND_RE.search(text)
    return m[0].strip() if m else None


class ExitCause(NamedTuple):
    """Why llama-server exited, read off its log: a kind and the line that says it."""

    kind: str  # port in use | connection refused | out of memory | invalid argument |
    #            unsupported model | crashed
    line: str


# ggml-rpc.cpp aborts with "<file>:<line>: Failed to connect to HOST:PORT"
_RPC_RE = re.compile(r"[Ff]ailed to connect to \S+")
_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # common/arg.cpp
    (
        "invalid argument",
        re.compile(
            r"error: invalid argument: .*|[Ee]rror while handling (?:argument|environment).*"
            r"|error: unknown value for .*"
        ),
    ),
    # src/llama.cpp: "llama_model_load: error loading model: ..." (the first one says why)
    (
        "unsupported model",
        re.compile(
            r"error loading model(?: architecture| hyperparameters| vocabulary)?: .*"
            r"|unknown model architecture: .*|failed to open GGUF file .*"
        ),
    ),
)
# ggml's GGML_ABORT/GGML_ASSERT line: "/path/file.cpp:123: message"
_ABORT_RE = re.compile(r"^\S+\.(?:c|cpp|cu|h):\d+: (?P<msg>.+)$", re.MULTILINE)


def exit_cause(text: str) -> ExitCause | None:
    """The one line of a llama-server log that says why it exited (not the backtrace).

    In order: the HTTP port was taken, an ``--rpc`` server could not be reached, memory ran
    out, a flag or value was refused, the model could not be loaded, ggml aborted.
    """
    if line := bind_failure(text):
        return ExitCause("port in use", line)
    if m := _RPC_RE.search(text):
        return ExitCause("connection refused", m[0].strip())
    if line := allocation_failure(text):
        return ExitCause("out of memory", line)
    for kind, pattern in _CAUSES:
        if m := pattern.search(text):
            return ExitCause(kind, m[0].strip())
    if m := _ABORT_RE.search(text):
        return ExitCause("crashed", m["msg"].strip())
    return None


# What a debugger prints when ggml aborts (ggml_print_backtrace runs gdb), not a cause.
_BACKTRACE_RE = re.compile(
    r"^(?:#\d+\s|\[New |\[Inferior |\[Thread |Using host |0x[0-9a-f]+ in |\d+\t)"
)


def last_words(text: str) -> str | None:
    """The last log line that is not part of a backtrace (for an exit without a known cause)."""
    for line in reversed(text.splitlines()):
        if line.strip() and not _BACKTRACE_RE.match(line):
            return line.strip()
    return None


# --- what --fit chose ---------------------------------------------------------------------------


_FIT_DEVICE_RE = re.compile(
    r"common_params_fit_impl:\s+- (?P<dev>.+?):\s+(?P<layers>\d+) layers"
    r"(?: \(\s*(?P<over>\d+) overflowing\))?,\s+(?P<used>-?\d+) MiB used,"
    r"\s+(?P<free>-?\d+) MiB free"
)
_FIT_STATUS = (  # the first that matches wins ("no changes needed" also ends "successfully")
    (re.compile(r"failed to fit params to free device memory: (?P<msg>.*)"), "failed"),
    (re.compile(r"encountered an error while trying to fit params.*?: (?P<msg>.*)"), "error"),
    (re.compile(r"no changes needed"), "unchanged"),
    (re.compile(r"successfully fit params"), "fitted"),
)
_OFFLOADED_RE = re.compile(r"offloaded (\d+/\d+) layers to GPU")


def parse_fit_log(text: str, target_mib: int | None = None) -> FitChoice:
    """What ``--fit`` chose, from a llama-server log at ``-lv 4`` (common/fit.cpp's lines).

    ``unchanged``: the defaults fit; ``fitted``: it moved tensors (the per-device lines say
    how many layers went to each device and how many of them have experts on the CPU,
    "overflowing"); ``failed``/``error``: it gave up, load continued with the defaults.
    """
    status, message = "unknown", None
    for pattern, name in _FIT_STATUS:
        if m := pattern.search(text):
            status, message = name, (m.groupdict().get("msg") or "").strip() or None
            break
    devices: dict[str, FitDevice] = {}
    for m in _FIT_DEVICE_RE.finditer(text):  # a later line for a device replaces an earlier one
        name = m["dev"].strip()
        devices[name] = FitDevice(
            device=name,
            layers=int(m["layers"]),
            overflowing=int(m["over"] or 0),
            used_mib=int(m["used"]),
            free_mib=int(m["free"]),
        )
    offloaded = _OFFLOADED_RE.findall(text)
    return FitChoice(
        status=status,
        message=message,
        devices=list(devices.values()),
        offloaded=offloaded[-1] if offloaded else None,
        target_mib=target_mib,
    )


# --- llama-fit-params's projection -------------------------------------------------------------

# `llama-fit-params -fitp on` prints, on stdout, one line per device and one for the host:
# "<DEV> <model> <context> <compute>" in MiB (common/fit.cpp, rounded down).
_PROJECTION_RE = re.compile(
    r"^(?P<dev>\S+) (?P<model>\d+) (?P<context>\d+) (?P<compute>\d+)\s*$", re.MULTILINE
)


class Projection(NamedTuple):
    """llama.cpp's own dry-run figures for one device (or ``Host``), in MiB."""

    device: str
    model_mib: int
    context_mib: int
    compute_mib: int

    @property
    def total_mib(self) -> int:
        return self.model_mib + self.context_mib + self.compute_mib


def parse_projection(stdout: str) -> dict[str, Projection]:
    """Device name (``CUDA0``, ``RPC1``, ``Host``) -> its projection."""
    return {
        m["dev"]: Projection(m["dev"], int(m["model"]), int(m["context"]), int(m["compute"]))
        for m in _PROJECTION_RE.finditer(stdout)
    }
