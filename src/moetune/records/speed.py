"""Speed points: one measured speed of a model at one placement and setting, whoever measured
it (llama-bench, `moetune bench`, `moetune run`), and what `moetune calibrate` imported.

A point is llama-bench's test as data: ``n_prompt`` tokens processed (prompt processing),
``n_gen`` generated (generation) or both (``-pg``), after ``n_depth`` tokens already in the
cache, at ``tps`` tokens per second. store/speed.py keeps them; the speed model fits them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from moetune.records.frozen import FrozenModel

SPEED_KIND = "moetune.speed"
SpeedKind = Literal["prompt", "generation", "combined"]
Tool = Literal["llama-bench", "moetune bench", "moetune run"]
FlashAttn = Literal["on", "off", "auto"]


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

    n_cpu_moe: int = Field(default=0, ge=0)
    override_tensor: list[str] = []  # "PATTERN=BUFT", in order
    n_gpu_layers: int | None = None  # None: not given (llama.cpp's default: every layer)
    tensor_split: list[float] = []  # empty: by free memory
    split_mode: str | None = None
    no_op_offload: bool = False
    fit: bool = False  # llama.cpp's --fit chose it (the rules above are not all of it)


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
    n_ubatch: int | None = Field(default=None, ge=1)
    n_batch: int | None = Field(default=None, ge=1)
    n_threads: int | None = Field(default=None, ge=1)
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: FlashAttn | None = None
    n_depth: int = Field(default=0, ge=0)
    n_prompt: int = Field(ge=0)
    n_gen: int = Field(ge=0)
    tps: float = Field(ge=0)  # llama-bench's avg_ts; moetune's median of the repeats
    tps_stddev: float | None = Field(default=None, ge=0)
    samples_tps: list[float] = []
    machine: SpeedMachine
    source: SpeedSource


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
    saved_path: str
    already_saved: bool  # the store had these points already (the same file imported again)


class CalibrateResult(FrozenModel):
    """What `moetune calibrate FILE...` imported."""

    files: list[ImportedFile]
    store: str  # the folder the points are kept in
    total_points: int  # every point in the store now
