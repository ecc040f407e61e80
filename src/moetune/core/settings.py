"""The llama-server settings that change memory, and the defaults moetune plans with."""

from __future__ import annotations

from dataclasses import field

from moetune.core.overhead import DEFAULT_CUDA_OVERHEAD_BYTES
from moetune.record import HIDDEN, OMIT_EMPTY, record, require

# What a CUDA process costs beyond llama.cpp's own buffers: the context, cuBLAS workspaces and
# the memory pool's slack, from public figures (core/overhead.py: 512 MiB). Users override it
# with --overhead; `moetune run` measures the real figure.
DEFAULT_GPU_OVERHEAD_BYTES = DEFAULT_CUDA_OVERHEAD_BYTES
DEFAULT_CTX = 32768  # what moetune plans and tunes for when no --ctx is given
# ggml's op-offload threshold: an op on weights in host memory runs on the first CUDA (Vulkan,
# SYCL, Metal, CANN) device when its batch reaches it, the weights copied over the host link;
# below it the CPU runs it (ggml-cuda.cu ``offload_op``: ``get_op_batch_size(op) >=
# op_offload_min_batch_size``, read from the environment once, default 32)
OP_OFFLOAD_ENV = "GGML_OP_OFFLOAD_MIN_BATCH"
OP_OFFLOAD_MIN_BATCH = 32


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
    # GGML_OP_OFFLOAD_MIN_BATCH for llama-server (None: unset, ggml's 32); a process-wide
    # variable, not a flag: the command carries it as an assignment before llama-server
    op_offload_min_batch: int | None = field(default=None, metadata=OMIT_EMPTY)

    def __post_init__(self) -> None:
        require(self, "n_ctx", self.n_ctx > 0, "positive")
        require(self, "n_draft", self.n_draft >= 0, "0 or more")
        require(
            self,
            "op_offload_min_batch",
            self.op_offload_min_batch is None or self.op_offload_min_batch >= 1,
            "1 or more",
        )

    @property
    def offload_min_batch(self) -> int:
        """The op-offload threshold llama-server runs with (the variable's, else 32)."""
        found = self.op_offload_min_batch
        return OP_OFFLOAD_MIN_BATCH if found is None else found

    @property
    def streams(self) -> int | None:
        """The concurrent streams a speed forecast is for: an explicit ``-np N``'s N (None:
        not given, one stream)."""
        return self.n_seq if self.explicit_parallel else None

    @property
    def n_outputs(self) -> int:
        """The logits rows llama-server reserves per ubatch: one per slot, and one more per
        drafted token when speculation is on (tools/server server_output_limits)."""
        return min(self.n_seq * (1 + self.n_draft), self.n_batch)
