"""Run parameters, weight placement and context options, and the constants they use."""

from __future__ import annotations

from typing import NamedTuple

from moetune.core.facts import TensorFacts
from moetune.core.kvcache import pad
from moetune.gguf.roles import Role

DEV, CPU = 0, 1  # backend ids: the device (highest priority) and the CPU (always last)
DEVICE_KINDS = ("cuda", "rpc", "cpu-like")
F32, F16, I32, I64 = 4, 2, 4, 8
KQ_MASK_TYPES = {True: F16, False: F32}  # flash attention needs an F16 mask
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: GGML_OP_OFFLOAD_MIN_BATCH default
CUDA_ROW_PADDING = 512  # ggml-cuda MATRIX_ROW_PADDING, added to quantized tensors' alloc size
MOE_REDUCTION_MAX_EXPERTS = 15  # ggml-cuda.cu MOE_WEIGHTED_REDUCTION_MAX_EXPERTS
_QUANT_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
    "iq4_nl": 18 / 32,
}


class Run(NamedTuple):
    """The shape of the worst-case (prompt-processing) ubatch that sched_reserve builds."""

    n_tokens: int
    n_seqs: int
    n_outputs: int
    n_ctx: int
    n_ubatch: int


def run_params(n_ctx: int, n_ubatch: int, n_batch: int, n_seq: int, n_outputs: int | None) -> Run:
    """llama_context: n_ctx padded to 256, n_batch <= n_ctx, n_ubatch <= n_batch;
    sched_reserve: n_tokens = min(n_ctx, n_ubatch), rounded up to a multiple of n_seqs."""
    if n_ctx < 1 or n_ubatch < 1 or n_batch < 1 or n_seq < 1:
        raise ValueError("n_ctx, n_ubatch, n_batch and n_seq must be positive")
    ctx = pad(n_ctx)
    batch = min(ctx, n_batch)
    ubatch = min(batch, n_ubatch)
    n_tokens = min(ctx, ubatch)
    n_tokens = -(-n_tokens // n_seq) * n_seq
    outputs_max = batch if n_outputs is None else max(1, min(batch, n_outputs))
    return Run(n_tokens, n_seq, min(n_tokens, outputs_max), ctx, ubatch)


class Placement(NamedTuple):
    """Where weights live: blocks >= ``dev_start`` on the device, minus CPU experts."""

    dev_start: int
    cpu_experts: frozenset[int]
    output_on_device: bool

    def block(self, il: int) -> int:
        return DEV if il >= self.dev_start else CPU

    def weight(self, tensor: TensorFacts) -> int:
        if tensor.layer is None:
            on_dev = self.output_on_device and tensor.role in (Role.OUTPUT, Role.OUTPUT_NORM)
            return DEV if on_dev else CPU
        if tensor.role is Role.EXPERTS and tensor.layer in self.cpu_experts:
            return CPU
        return self.block(tensor.layer)


class Options(NamedTuple):
    """Context settings that change the graph or the allocator."""

    flash_attn: bool
    type_k: str
    type_v: str
    cuda: bool
    op_offload: bool

    def kv_bytes(self, kind: str) -> float:
        return _QUANT_BYTES.get(self.type_k if kind == "k" else self.type_v, 2.0)

    def kv_quantized(self, kind: str) -> bool:
        return (self.type_k if kind == "k" else self.type_v) not in ("f32", "f16", "bf16")
