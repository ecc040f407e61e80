"""Run parameters, weight placement and context options, and the constants they use."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from moetune.core.backends import KINDS, rules
from moetune.core.facts import TensorFacts
from moetune.core.kvcache import pad
from moetune.core.settings import OP_OFFLOAD_MIN_BATCH
from moetune.gguf.roles import Role

DEV = 0  # backend id of the first device (devices are 0, 1, ... in llama.cpp's order)
# The CPU's backend id in the replay: the last, lowest-priority backend. A weight's home on
# the CPU is core/placement.py's CPU (-1); here -1 means "not yet assigned", as in ggml's
# scheduler, so the replay numbers the CPU after every device (backend_of maps one to the other).
CPU_BACKEND = 64
DEVICE_KINDS = KINDS
F32, F16, I32, I64 = 4, 2, 4, 8
KQ_MASK_TYPES = {True: F16, False: F32}  # flash attention needs an F16 mask
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


def backend_of(home: int) -> int:
    """The backend id of a home (core/placement.py: a device index, or negative: the CPU)."""
    return home if home >= 0 else CPU_BACKEND


class LayerHomes(NamedTuple):
    """Where weights live, as the compute replay reads them (from core/placement.py's
    WeightSplit): each block's home (then the output layer's), and the tensors an
    override put elsewhere (``moves``: name, home); a home is a device index or, negative,
    the CPU, as core/placement.py has them."""

    homes: tuple[int, ...]
    moves: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def single(
        cls,
        n_layers: int,
        dev_start: int,
        cpu_experts: Iterable[int] = (),
        output_on_device: bool = True,
        tensors: Iterable[TensorFacts] = (),
    ) -> LayerHomes:
        """One device: blocks >= ``dev_start`` on it, the experts of ``cpu_experts`` (found
        among ``tensors``) on the CPU."""
        homes = tuple(DEV if il >= dev_start else CPU_BACKEND for il in range(n_layers))
        blocks = frozenset(cpu_experts)
        moves = frozenset(
            (t.name, CPU_BACKEND)
            for t in tensors
            if t.role is Role.EXPERTS and t.layer in blocks and homes[t.layer] != CPU_BACKEND
        )
        return cls((*homes, DEV if output_on_device else CPU_BACKEND), moves)

    def block(self, il: int) -> int:
        return backend_of(self.homes[il])

    @property
    def output(self) -> int:
        return backend_of(self.homes[-1])

    def weight(self, tensor: TensorFacts) -> int:
        """The backend of a weight."""
        if self.moves:
            moved = _moves(self.moves).get(tensor.name)
            if moved is not None:
                return backend_of(moved)
        if tensor.layer is None:
            on_out = tensor.role in (Role.OUTPUT, Role.OUTPUT_NORM)
            return self.output if on_out else CPU_BACKEND
        return self.block(tensor.layer)

    def grouped_moves(self) -> dict[int, tuple[tuple[str, int], ...]]:
        """The moved tensors of each block: (name without ``blk.N.``, backend); under -1,
        those outside the blocks (token_embd, output, output_norm)."""
        return _by_block(self.moves) if self.moves else {}


@lru_cache(maxsize=256)
def _moves(moves: frozenset[tuple[str, int]]) -> dict[str, int]:
    return dict(moves)


@lru_cache(maxsize=256)
def _by_block(moves: frozenset[tuple[str, int]]) -> dict[int, tuple[tuple[str, int], ...]]:
    """The moves of each block as backends (``blk.N.`` taken off the names; -1: outside the
    blocks)."""
    grouped: dict[int, list[tuple[str, int]]] = {}
    for name, home in moves:
        if name.startswith("blk."):
            index, rest = name[4:].split(".", 1)
            grouped.setdefault(int(index), []).append((rest, backend_of(home)))
        else:
            grouped.setdefault(-1, []).append((name, backend_of(home)))
    return {il: tuple(sorted(found)) for il, found in grouped.items()}


class Options(NamedTuple):
    """Context settings that change the graph or the allocator; ``kinds``: each device's
    kind (core/backends.py: op offload, alignment, CUDA's row padding and fusions);
    ``n_copies``: 4 with pipeline parallelism (several devices, every layer offloaded, no
    tensor overrides); ``op_offload_min_batch``: GGML_OP_OFFLOAD_MIN_BATCH."""

    flash_attn: bool
    type_k: str
    type_v: str
    kinds: tuple[str, ...]
    op_offload: bool
    n_copies: int = 1
    # GGML_OP_OFFLOAD_MIN_BATCH: the batch from which an op on host weights is offloaded
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH

    @property
    def backends(self) -> tuple[int, ...]:
        return (*range(len(self.kinds)), CPU_BACKEND)

    def is_cuda(self, backend: int) -> bool:
        """Whether ggml-cuda's buffers (row padding, FA copies, fusion deps) apply."""
        return 0 <= backend < len(self.kinds) and rules(self.kinds[backend]).cuda_buffers

    def alignment(self, backend: int) -> int:
        """The buffer alignment of a backend (the CPU's: 32 bytes)."""
        return rules(self.kinds[backend]).alignment if 0 <= backend < len(self.kinds) else 32

    @property
    def offload_to(self) -> int | None:
        """The device that runs ops on host weights for big batches (the first whose backend
        has ``offload_op``: CUDA, Vulkan; RPC has none)."""
        if not self.op_offload:
            return None
        return next((i for i, kind in enumerate(self.kinds) if rules(kind).op_offload), None)

    def kv_bytes(self, kind: str) -> float:
        return _QUANT_BYTES.get(self.type_k if kind == "k" else self.type_v, 2.0)

    def kv_quantized(self, kind: str) -> bool:
        return (self.type_k if kind == "k" else self.type_v) not in ("f32", "f16", "bf16")
