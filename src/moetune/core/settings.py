"""The llama-server settings that change memory, and the defaults moetune plans with."""

from __future__ import annotations

from dataclasses import field

from moetune.core.overhead import DEFAULT_CUDA_OVERHEAD_BYTES
from moetune.record import HIDDEN, record, require

# What a CUDA process costs beyond llama.cpp's own buffers: the context, cuBLAS workspaces and
# the memory pool's slack, from public figures (core/overhead.py: 512 MiB). Users override it
# with --overhead; `moetune run` measures the real figure.
DEFAULT_GPU_OVERHEAD_BYTES = DEFAULT_CUDA_OVERHEAD_BYTES
DEFAULT_CTX = 32768  # what moetune plans and tunes for when no --ctx is given


def default_n_ctx(training_context: int | None) -> int:
    """The context used when none is given: 32768, or the training context if shorter."""
    return min(DEFAULT_CTX, training_context or DEFAULT_CTX)


@record(frozen=True, kw_only=True)
class Settings:
    """The llama-server settings that change memory (defaults: llama-server's, FA on)."""

    n_ctx: int
    type_k: str = "f16"
    type_v: str = "f16"
    n_seq: int = 4  # -np auto: 4 slots sharing one unified cache
    kv_unified: bool = True  # an explicit -np N turns it off (tools/server/server.cpp)
    explicit_parallel: bool = False  # pass -np n_seq to llama-server
    flash_attn: bool = True
    n_ubatch: int = 512
    n_batch: int = 2048
    gpu_overhead_bytes: int = DEFAULT_GPU_OVERHEAD_BYTES
    # one device: what llama.cpp's own dry run found beyond the prediction (core/devices.py)
    device_correction_bytes: int = 0
    device_kind: str = "cuda"  # core/backends.py: "cuda", "vulkan", "rpc", "cpu-like"
    # llama-server reserves logits for n_seq rows; llama-fit-params and llama-bench for all.
    all_outputs: bool = False
    # the tokens speculation drafts per step (--spec-type, --spec-draft-n-max: core/extras.py);
    # what else the same llama-server loads (a projector, a draft) travels beside the
    # settings as core.extras.Extras. Left out of the JSON, as before it was a setting.
    n_draft: int = field(default=0, metadata=HIDDEN)

    def __post_init__(self) -> None:
        require(self, "n_ctx", self.n_ctx > 0, "positive")
        require(self, "n_draft", self.n_draft >= 0, "0 or more")

    @property
    def n_outputs(self) -> int:
        """The logits rows llama-server reserves per ubatch: one per slot, and one more per
        drafted token when speculation is on (tools/server server_output_limits)."""
        return min(self.n_seq * (1 + self.n_draft), self.n_batch)
