"""Speed points: one measured speed of a model at one placement and setting, whoever measured
it (llama-bench, `moetune bench`, `moetune run`), and what `moetune calibrate` imported.

A point is llama-bench's test as data: ``n_prompt`` tokens processed (prompt processing),
``n_gen`` generated (generation) or both (``-pg``), after ``n_depth`` tokens already in the
cache, at ``tps`` tokens per second. store/speed.py keeps them; the speed model fits them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from moetune.records.frozen import FrozenModel

SPEED_KIND = "moetune.speed"
SpeedKind = Literal["prompt", "generation", "combined"]
Tool = Literal["llama-bench", "moetune bench", "moetune run", "llama-batched-bench"]
FlashAttn = Literal["on", "off", "auto"]

# What a real measurement can be: the one place the bounds are, checked at import (llama-bench's
# rows become points through these models) and at every read of a stored file. A value past
# them cannot have been measured, and the speed model's loops and sums would not end or would
# overflow on it.
MAX_TOKENS = 2**24  # n_prompt, n_gen, n_depth, n_ubatch, n_batch: past any context llama.cpp has
MAX_UBATCHES = 2**16  # a prompt's ubatches (n_prompt / n_ubatch): the speed model walks each
MAX_THREADS = 4096
MAX_STREAMS = 256  # llama.cpp's LLAMA_MAX_SEQ
MAX_BLOCKS = 10_000  # n_cpu_moe, n_gpu_layers (llama-bench's -ngl 99 or 999 and the like)
MAX_TPS = 1e7  # tokens per second: above any machine
MAX_SPLIT = 1e9  # a -ts proportion

Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS)]
Speed = Annotated[float, Field(gt=0, le=MAX_TPS, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=MAX_SPLIT, allow_inf_nan=False)]


class SpeedModel(FrozenModel):
    """Which model: its file name always; the rest where the source or the file says it."""

    file_name: str
    path: str | None = None  # where it was measured: informative
    model_bytes: int | None = Field(default=None, ge=0)  # llama-bench's model_size: tensors
    n_params: int | None = Field(default=None, ge=0)
    model_type: str | None = None  # llama-bench's "qwen3moe 30B.A3B Q4_K - Medium"
    # moetune's identity of the file (store/tuned.ModelIdentity) where it was readable here
    file_bytes: int | None = Field(default=None, ge=0)
    header_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class SpeedPlacement(FrozenModel):
    """Where the weights were: ``--n-cpu-moe``, ``-ot`` rules as written, ``-ngl``, ``-ts``."""

    n_cpu_moe: int = Field(default=0, ge=0, le=MAX_BLOCKS)
    override_tensor: list[str] = []  # "PATTERN=BUFT", in order
    # None: not given (llama.cpp's default: every layer); -1: every layer
    n_gpu_layers: int | None = Field(default=None, ge=-1, le=MAX_BLOCKS)
    tensor_split: list[Share] = []  # empty: by free memory
    split_mode: str | None = None
    no_op_offload: bool = False
    fit: bool = False  # llama.cpp's --fit chose it (the rules above are not all of it)
    # GGML_OP_OFFLOAD_MIN_BATCH it ran with (None: unset, ggml's 32)
    op_offload_min_batch: int | None = Field(default=None, ge=1, le=MAX_TOKENS)


class SpeedMachine(FrozenModel):
    """Where it ran: the CPU, the devices (names and descriptions) and the backends."""

    cpu_info: str | None = None  # "AMD Ryzen 7 7800X3D 8-Core Processor"
    gpu_info: str | None = None  # the devices' descriptions, ", "-joined (llama-bench's)
    backends: list[str] = []  # "CUDA", "RPC"; ["CPU"]: no device
    devices: list[str] | None = None  # names (CUDA0, RPC0); None: llama.cpp's default, all

    @property
    def label(self) -> str:
        """``AMD Ryzen 9 7950X + NVIDIA GeForce RTX 4090`` (what is known of it)."""
        parts = [p for p in (self.cpu_info, self.gpu_info) if p]
        return " + ".join(parts) or "unknown machine"


def same_machine(a: SpeedMachine, b: SpeedMachine) -> bool:
    """Whether ``a`` and ``b`` are one machine, whose points calibrate each other's forecasts
    (core/calibrate.py: the fitted factors are the machine's): the same CPU (both named),
    and, where both say them, the same devices (their descriptions, their names in order).
    What one of them does not say (a plan for devices given by ``--vram`` or a hardware
    profile, a point that recorded no device) does not tell them apart. The backends do not
    either: llama-bench records the ones its build has (``Vulkan, RPC`` for a run on an RPC
    device alone), moetune the ones its devices use."""
    if a.cpu_info is None or a.cpu_info != b.cpu_info:
        return False
    if a.gpu_info and b.gpu_info and a.gpu_info != b.gpu_info:
        return False
    return a.devices is None or b.devices is None or a.devices == b.devices


class SpeedSource(FrozenModel):
    """Who measured it, with which llama.cpp build, kept in which file."""

    tool: Tool
    file: str | None = None  # the file it was read from, or the bench result it is in
    build_number: int | None = None
    build_commit: str | None = None
    config: str | None = None  # moetune bench's configuration name
    measured_at: str | None = None  # llama-bench's test_time, moetune's time of the result


class SpeedPoint(FrozenModel):
    """One measured speed."""

    kind: SpeedKind
    model: SpeedModel
    placement: SpeedPlacement
    n_ubatch: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    n_batch: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    n_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: FlashAttn | None = None
    n_depth: Tokens = 0
    n_prompt: Tokens
    n_gen: Tokens
    tps: Speed  # llama-bench's avg_ts; moetune's median of the repeats
    tps_stddev: float | None = Field(default=None, ge=0, le=MAX_TPS, allow_inf_nan=False)
    samples_tps: list[Speed] = []
    machine: SpeedMachine
    source: SpeedSource
    # a generation of this many concurrent streams (llama-batched-bench's -npl, bench
    # --parallel): ``tps`` all of theirs together, each stream ``n_gen`` tokens
    n_streams: int = Field(default=1, ge=1, le=MAX_STREAMS)

    @model_validator(mode="after")
    def _few_ubatches(self) -> SpeedPoint:
        ubatches = -(-self.n_prompt // (self.n_ubatch or 512))  # llama.cpp's default ubatch
        if ubatches > MAX_UBATCHES:
            raise ValueError(
                f"n_prompt {self.n_prompt} in ubatches of {self.n_ubatch or 512} is"
                f" {ubatches} ubatches, more than {MAX_UBATCHES}"
            )
        return self


class PointRefused(ValueError):
    """A point past the bounds above: its field (``tensor_split``, ``tps``; ``the point`` for
    one of several fields together), the value and why."""

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field, self.value, self.reason = field, value, reason
        super().__init__(self.describe(field))

    def describe(self, field: str) -> str:
        """``avg_ts 1e+308 is refused: ...`` with ``field`` as the field's name."""
        value = "" if self.field == "the point" else f" {self.value!r}"
        return f"{field}{value} is refused: {self.reason}"


def checked(build: Callable[[], SpeedPoint]) -> SpeedPoint:
    """``build()``, its refusal by the bounds as one PointRefused (the first field wrong)."""
    try:
        return build()
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if loc and loc[0] in ("model", "placement", "machine", "source"):
            loc = loc[1:]
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise PointRefused(loc[0] if loc else "the point", error.get("input"), reason) from None


def kind_of(n_prompt: int, n_gen: int) -> SpeedKind | None:
    """Prompt processing (``pp``), generation (``tg``), both (``pg``); None: neither."""
    if n_prompt > 0 and n_gen > 0:
        return "combined"
    if n_prompt > 0:
        return "prompt"
    if n_gen > 0:
        return "generation"
    return None


class SpeedBatch(FrozenModel):
    """The points of one source (an imported file, a bench, one run launch): one file of the
    store."""

    kind: Literal["moetune.speed"] = "moetune.speed"
    saved: str
    points: list[SpeedPoint] = Field(min_length=1)


class ImportedFile(FrozenModel):
    """One file `moetune calibrate` read: its points and where they are kept."""

    file: str
    tool: Tool
    points: list[SpeedPoint]
    saved_path: str | None  # None: not kept (`calibrate --measure` refused them for noise)
    already_saved: bool  # the store had these points already (the same file imported again)
    refused: int = 0  # rows refused (wrong, or past what a measurement can be)
    refusals: list[str] = []  # the first few refused rows: the row, the field, its value
    # the points whose samples disagree (core/noise.py), each why: `calibrate --measure` runs
    # them again (``remeasured``) and refuses those that still do (``noisy``, not in
    # ``points``); an import keeps them (``disagreeing``: someone's measurements)
    remeasured: list[str] = []
    noisy: list[str] = []
    disagreeing: list[str] = []


class FitCheck(FrozenModel):
    """The fit a forecast on this machine makes of the points imported and those kept for it
    (records/speed.py ``same_machine``): its leave-one-out error of tok/s against the bound
    (core/noise.py); beyond it a forecast does not use the fit."""

    points: int  # the prompt and generation points fitted
    kept_points: int  # of them, those kept for this machine before
    median_error: float | None  # None: too few points to leave one out
    max_error: float | None
    bound: float
    within: bool


class CalibrateResult(FrozenModel):
    """What `moetune calibrate FILE...` imported."""

    files: list[ImportedFile]
    store: str  # the folder the points are kept in
    total_points: int  # every point in the store now
    fit: FitCheck | None = None  # None: fewer than two points of this machine to fit
    # `calibrate --measure` refused its points (none kept): the one line saying why
    refused: str | None = None
