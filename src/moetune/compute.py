"""Compute buffers: llama.cpp's ``sched_reserve: <DEV> compute buffer size`` lines, per device.

VRAM = weights + KV + compute + overhead; this module predicts the compute part, for the one
offload device and for the host (the CPU backend's buffer: ``CPU``, or ``CUDA_Host`` when a
CUDA device exists), from the GGUF header and a placement.  Pure: no llama.cpp needed.

How.  The compute buffer is the peak of ggml-alloc's allocator over the worst-case graph that
``llama_context::sched_reserve`` builds (llama-context.cpp): a prompt ubatch of
``T = min(n_ctx, n_ubatch)`` tokens (rounded to a multiple of n_seq) over the WHOLE cache
(``n_kv = n_ctx`` padded to 256), with ``min(T, n_outputs_max)`` logits rows.  Fragmentation
matters (on Qwen3-30B-A3B the MoE phase peaks at 167 KiB/token where its live tensors hold
104), so no sum of terms fits to 10 %.  Instead this module rebuilds that graph and replays
llama.cpp on it, step by step:

1. the graph skeleton, op by op in ggml's node order, after llama-graph.cpp and
   src/models/*.cpp: inputs, the embedding paths, per block GQA attention (Q/K norms, biases,
   sinks, output gate, SWA), DeepSeek MLA, or the Qwen3-Next/3.5 gated delta net; a dense,
   MoE (+ shared expert) FFN; the output head; Hadamard rotations for quantized caches;
2. ggml_backend_sched_split_graph (ggml-backend.cpp): weights pin ops to their buffer's
   backend, inputs go to the CPU, four expansion passes fill the rest, splits copy foreign
   sources once per backend (allocated at the split start), a foreign weight starts a split;
3. ggml_gallocr (ggml-alloc.c): inputs first, then each node in order, in place over a dying
   parent for the in-place ops, freed after its last consumer (outputs never), best-fit over
   free blocks else the growing end block; the buffer is the highest offset reached.

Dominant terms it reproduces (T tokens, C cells, E n_embd, k experts used, V vocabulary):
- KQ mask, an input: ``C*T*2`` with flash attention (F16), ``C*T*4`` without; on the device
  and in the host buffer; SWA layers add one over ``pad256(n_swa*n_seq + n_ubatch)`` cells.
- without FA: ``KQ = C*T*n_head*4`` per attention layer (softmax in place) - the big one.
- MoE FFN: gate, up and GLU outputs ``3*n_ff_exp*k*T*4``, down ``E*k*T*4``; on CUDA the fused
  weighted reduction (graph_optimize alloc deps) keeps down and the weighted copy both alive.
- logits ``V*min(T, n_outputs)*4`` on the output's device; the result_norm rows.
- CUDA op offload (``ggml_backend_cuda_device_offload_op``: batch >= 32,
  ``GGML_OP_OFFLOAD_MIN_BATCH``): an op whose weight is in a host buffer runs on the GPU and
  the WHOLE weight is copied into the GPU compute buffer: with CPU experts, one expert tensor
  at a time (Qwen3-30B-A3B F16: 384 MiB; Q4_K_M down in Q6_K: 157.5 MiB); with the output
  layer on the CPU and >= 32 outputs, output.weight too.  RPC has no offload_op (NULL).
- CUDA flash attention with a quantized K/V: its prompt kernels (MMA/tile) convert the
  layer's K and V views to F16 inside the FA node's allocation (+ ``C*n_embd_k_gqa*2`` each).
- host: every graph input (tokens, positions, masks, cache index vectors, ``inp_embd`` and the
  mixed-batch ``inp_mixed_embd``, E*T*4 each), the token-embedding rows (get_rows on the
  CPU, 2 x E*T*4) and whatever runs on the CPU: experts on a non-offloading device, CPU
  blocks, a CPU output layer (its logits).

Calibration (benchmarks/compute_calibration.py, llama.cpp build 11434; error = predicted -
printed, MiB):

    source                               cases  buffer  max |err|  mean |err|  max rel
    llama-server, RPC device + CPU        1005  device      0.005      0.0025   0.36 %
      (6 archs x 3 sizes x ub 128/512/             host      0.005      0.0028   0.48 %
      2048 x ctx 512/4096/16384 x FA on/off x {all on device, --n-cpu-moe 2, -ngl}, and
      q8_0/q4_0 caches; printed to 0.01 MiB, so 0.005 is exact)
    llama-fit-params, RPC + Host             72  device      0          0        0 %
      (Qwen3-30B-A3B Q4_K_M, 151936 vocab;  host        0          0        0 %
      4 placements incl. output on the CPU; printed as floor(MiB), compared floored)
    CUDA data point (below)                   1  device    +12.26                 1.4 %
                                                 host      +8.02

The RPC predictions are exact: tracing ggml-alloc (built with its debug prints) showed the
same allocations.  The CUDA-specific parts (op offload copies, 128-byte alignment, the MoE
reduction alloc deps, FA's F16 conversion) come from the source and one public data point,
tools/fit-params/README.md: Qwen3-30B-A3B F16, ctx 4096, experts of blocks 14-47 and the
output layer on the CPU: CUDA0 compute 898 MiB, Host 12 MiB, printed by build 6895.  With that
build's semantics (all 512 tokens are outputs, so the 593.5 MiB output.weight is copied to
the GPU beside 296.75 MiB of logits) this module predicts 910.26 MiB and 20.02 MiB.  The gap
is graph changes since build 6895: the mixed-batch embedding path (its never-freed DUP pins
4 MiB below the output-weight copy, its inputs add 8 MiB to the host) and the F16 mask FA
now gets directly (6895 made an F32 input and cast it).  Replaying 6895's graph (no mixed
path, F32 mask + F16 cast) gives 894.25 MiB (-3.75, -0.4 %) and 12.01 MiB (exact).  In this
build's llama-server the same placement needs 448.01 MiB: 4 outputs per ubatch keep the
output matmul on the CPU, and the peak is one 384 MiB expert copy plus activations.

Facts found on the way (build 11434):
- llama-server reserves logits for ``n_outputs_max = n_parallel * (1 + n_draft)`` rows (4 by
  default); llama-fit-params, llama-bench and llama-cli reserve ``n_batch`` rows, so the
  dry run over-states the server's device compute by ``V*(T-4)*4`` when the output layer is
  on the device (Qwen3-30B-A3B at ub 512: ~297 MiB).  Use ``n_outputs=None, n_seq=1`` to
  predict llama-fit-params.
- llama-server's buffer is the max of the pp and tg reserves; llama-fit-params reports the
  first pp reserve only.  The tg graph (n_seq tokens) is never the larger one here.
- ``--no-op-offload`` (``op_offload=False``) keeps CPU weights' ops on the CPU: no weight
  copies on the GPU, the expert/output activations go to the host buffer instead.
- CPU weights on a CUDA system sit in host memory (CPU_Mapped with mmap, CUDA_Host without),
  both ``is_host``, so offload applies.  CPU_REPACK buffers are not is_host (ops on repacked
  weights are never offloaded); llama.cpp lists a GPU's host buffer type before them, so
  they only appear without a GPU (the RPC rig) or with ``--no-host``.
- A quantized K (or V) cache with a head size that is a multiple of 64 gets Hadamard
  rotations (``attn_inp_k_rot``/``v_rot`` inputs and one extra matmul per Q/K/V/output).
Not modelled: pipeline parallelism (several GPUs, all layers offloaded, no overrides: 4
copies of the inputs), a non-unified cache (explicit ``-np N`` without ``--kv-unified``),
ggml-cuda's shared-expert reordering and top-k fusion deps (small tensors), and graph
details of architectures other than the llama-like, MLA and gated-delta-net families (they
get the generic block).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from moetune.gguf.roles import Role
from moetune.model import HParam, ModelFacts, TensorFacts

DEV, CPU = 0, 1  # backend ids: the device (highest priority) and the CPU (always last)
DEVICE_KINDS = ("cuda", "rpc", "cpu-like")
F32, F16, I32, I64 = 4, 2, 4, 8
KQ_MASK_TYPES = {True: F16, False: F32}  # flash attention needs an F16 mask
N_CTX_PAD = 256  # llama_context pads n_ctx to a multiple of 256 (llama-context.cpp)
OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: GGML_OP_OFFLOAD_MIN_BATCH default
CUDA_ROW_PADDING = 512  # ggml-cuda MATRIX_ROW_PADDING, added to quantized tensors' alloc size
MOE_REDUCTION_MAX_EXPERTS = 15  # ggml-cuda.cu MOE_WEIGHTED_REDUCTION_MAX_EXPERTS
# ggml_op_can_inplace() in ggml-alloc.c, in the op names used below.
_INPLACE_OPS = frozenset(
    {"add", "add_id", "mul", "div", "scale", "unary", "rope", "rms_norm", "clamp", "soft_max"}
)
_VIEW_OPS = frozenset({"view", "reshape", "permute", "transpose"})  # ggml_is_view_op()
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
_UNQUANTIZED = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})
_SWA_PATTERN_DEFAULT = {"gpt-oss": 2}  # load_swa_pattern(ml, 2) in src/models/openai-moe.cpp


@dataclass(frozen=True)
class ComputeEstimate:
    """Predicted compute buffers: the offload device's, and the host's (CPU or CUDA_Host)."""

    device_bytes: int
    host_bytes: int


def estimate_compute(
    facts: ModelFacts,
    *,
    n_ctx: int,
    n_ubatch: int = 512,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
    output_on_device: bool = True,
    layers_on_device: int | None = None,
    cpu_expert_layers: int = 0,
    op_offload: bool = True,
    device_kind: str = "cuda",
    cpu_expert_blocks: Iterable[int] | None = None,
    n_batch: int = 2048,
    n_seq: int = 4,
    n_outputs: int | None = 4,
) -> ComputeEstimate:
    """Predict the compute buffers llama.cpp reserves for one offload device and the host.

    ``layers_on_device``: how many of the LAST blocks sit on the device (None = all); llama.cpp's
    ``-ngl K`` means ``layers_on_device = K - 1`` and ``output_on_device = K >= 1``.
    ``cpu_expert_layers``: ``--n-cpu-moe N`` (routed experts of blocks 0..N-1 on the CPU), or
    give the exact blocks in ``cpu_expert_blocks`` (e.g. ``--fit``'s last blocks).
    ``device_kind``: "cuda" (op offload of CPU weights for batches >= 32, 128-byte alignment,
    CUDA fusions) or "rpc"/"cpu-like" (no op offload).  ``n_seq``: parallel sequences
    (llama-server: 4; llama-fit-params, llama-bench: 1).  ``n_outputs``: the most logits rows
    per ubatch (llama-server: n_seq; None = every token, as llama-fit-params and llama-bench).
    """
    if device_kind not in DEVICE_KINDS:
        raise ValueError(f"device_kind must be one of {DEVICE_KINDS}, got {device_kind!r}")
    run = _run_params(n_ctx, n_ubatch, n_batch, n_seq, n_outputs)
    blocks = range(cpu_expert_layers) if cpu_expert_blocks is None else cpu_expert_blocks
    n_dev = facts.n_layers if layers_on_device is None else min(layers_on_device, facts.n_layers)
    placement = _Placement(facts.n_layers - max(n_dev, 0), frozenset(blocks), output_on_device)
    options = _Options(
        flash_attn=flash_attn,
        type_k=type_k.lower(),
        type_v=type_v.lower(),
        cuda=device_kind == "cuda",
        op_offload=op_offload and device_kind == "cuda",
    )
    peaks = _simulate(facts, run, placement, options)
    return ComputeEstimate(device_bytes=peaks[DEV], host_bytes=peaks[CPU])


# --- parameters ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """The shape of the worst-case (prompt-processing) ubatch that sched_reserve builds."""

    n_tokens: int
    n_seqs: int
    n_outputs: int
    n_ctx: int
    n_ubatch: int


def _run_params(n_ctx: int, n_ubatch: int, n_batch: int, n_seq: int, n_outputs: int | None) -> _Run:
    """llama_context: n_ctx padded to 256, n_batch <= n_ctx, n_ubatch <= n_batch;
    sched_reserve: n_tokens = min(n_ctx, n_ubatch), rounded up to a multiple of n_seqs."""
    if n_ctx < 1 or n_ubatch < 1 or n_batch < 1 or n_seq < 1:
        raise ValueError("n_ctx, n_ubatch, n_batch and n_seq must be positive")
    ctx = -(-n_ctx // N_CTX_PAD) * N_CTX_PAD
    batch = min(ctx, n_batch)
    ubatch = min(batch, n_ubatch)
    n_tokens = min(ctx, ubatch)
    n_tokens = -(-n_tokens // n_seq) * n_seq
    outputs_max = batch if n_outputs is None else max(1, min(batch, n_outputs))
    return _Run(n_tokens, n_seq, min(n_tokens, outputs_max), ctx, ubatch)


@dataclass(frozen=True)
class _Placement:
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


@dataclass(frozen=True)
class _Options:
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


# --- graph IR -------------------------------------------------------------------------------


@dataclass
class _State:
    """ggml-alloc's hash_node for one tensor: users left, views left, where it lives."""

    children: int = 0
    views: int = 0
    allocated: bool = False
    visited: bool = False
    offset: int = 0
    backend: int = DEV


@dataclass(eq=False)
class _T:
    """One ggml tensor of the reserve graph: a node, an input leaf, a weight or a cache."""

    name: str
    op: str
    ne: tuple[int, ...]
    esize: float = F32
    srcs: list[_T] = field(default_factory=list)
    view_src: _T | None = None  # the base tensor of a view (never itself a view)
    buffer: int | None = None  # pre-allocated in this backend's buffer (weights, caches)
    weight: bool = False
    is_input: bool = False
    is_output: bool = False
    backend: int = -1
    quant_pad: int = 0  # CUDA pads quantized rows: extra bytes when copied to a CUDA buffer
    cuda_extra: int = 0  # CUDA flash attention also converts quantized K/V to F16 in place
    fixed_bytes: int | None = None  # weights: bytes from the file; strided views: their span
    alloc: _State = field(default_factory=_State)

    @property
    def nbytes(self) -> int:
        if self.fixed_bytes is not None:
            return self.fixed_bytes
        return math.ceil(math.prod(self.ne) * self.esize)

    @property
    def layout(self) -> tuple[float, tuple[int, ...]]:
        return self.esize, self.ne


class _Graph:
    """The reserve graph of one ubatch, built in ggml's node order."""

    def __init__(self, facts: ModelFacts, run: _Run, place: _Placement, opts: _Options) -> None:
        self.d = _Dims.of(facts)
        self.hparams = facts.hparams
        self.run, self.place, self.opts = run, place, opts
        self.nodes: list[_T] = []
        self.leafs: list[_T] = []
        self.deps: list[tuple[_T, list[_T]]] = []  # CUDA alloc deps: keep tensors until a node
        self._tensors = {t.name: t for t in facts.tensors}
        self._weights: dict[str, _T] = {}

    def has(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str) -> list[int]:
        return self._tensors[name].shape

    def w(self, name: str) -> _T | None:
        """A weight by full tensor name (None if the model has no such tensor)."""
        found = self._weights.get(name)
        if found is None and name in self._tensors:
            found = _weight_tensor(self._tensors[name], self.place.weight(self._tensors[name]))
            self._weights[name] = found
        return found

    def output_weight(self) -> _T | None:
        """output.weight, or for tied embeddings the copy of token_embd that llama.cpp loads
        into the output layer's buffer (TENSOR_DUPLICATED)."""
        found = self.w("output.weight")
        if found is None and "token_embd.weight" in self._tensors:
            backend = DEV if self.place.output_on_device else CPU
            found = _weight_tensor(self._tensors["token_embd.weight"], backend)
        return found

    def input(self, name: str, ne: tuple[int, ...], esize: float) -> _T:
        leaf = _T(name, "none", ne, esize, is_input=True)
        self.leafs.append(leaf)
        return leaf

    def cache(self, name: str, il: int, ne: tuple[int, ...], esize: float) -> _T:
        return _T(name, "none", ne, esize, buffer=self.place.block(il))

    def op(
        self, op: str, name: str, ne: tuple[int, ...], *srcs: _T | None, esize: float = F32
    ) -> _T:
        node = _T(name, op, ne, esize, srcs=[s for s in srcs if s is not None])
        self.nodes.append(node)
        return node

    def view(
        self, src: _T, ne: tuple[int, ...] | None = None, op: str = "view", span: int | None = None
    ) -> _T:
        """A view (or reshape/permute/transpose) of ``src``: no memory of its own.  ``span``:
        ggml_nbytes of a strided view (what a copy of it to another backend takes)."""
        base = src.view_src if src.view_src is not None else src
        node = _T(
            f"{src.name} ({op})",
            op,
            src.ne if ne is None else ne,
            src.esize,
            [src],
            base,
            fixed_bytes=span,
        )
        self.nodes.append(node)
        return node

    def into(self, op: str, name: str, dst: _T, *srcs: _T | None) -> _T:
        """An op whose result is a view of ``dst`` (set_rows, cpy into a cache)."""
        node = self.op(op, name, dst.ne, *srcs, esize=dst.esize)
        node.view_src = dst.view_src if dst.view_src is not None else dst
        return node

    def mm(self, w: _T | None, x: _T, rows: int, name: str) -> _T:
        """mul_mat: [rows, x.ne[1:]] (F32)."""
        return self.op("mul_mat", name, (rows, *x.ne[1:]), w, x)

    def norm(self, x: _T, w: _T | None, name: str) -> _T:
        """build_norm (RMS): rms_norm, then mul by the weight."""
        cur = self.op("rms_norm", "norm", x.ne, x)
        return self.op("mul", name, x.ne, cur, w) if w is not None else cur


def _weight_tensor(tensor: TensorFacts, backend: int) -> _T:
    """A pre-allocated weight; ``quant_pad`` is the row padding a CUDA copy of it adds."""
    nbytes = tensor.nbytes or 0
    ne0 = tensor.shape[0] if tensor.shape else 0
    pad = 0
    if tensor.type.upper() not in _UNQUANTIZED and ne0 % CUDA_ROW_PADDING:
        elements = math.prod(tensor.shape) or 1
        pad = (CUDA_ROW_PADDING - ne0 % CUDA_ROW_PADDING) * nbytes // elements
    ne = tuple(tensor.shape) or (0,)
    return _T(
        tensor.name, "none", ne, 0, buffer=backend, weight=True, quant_pad=pad, fixed_bytes=nbytes
    )


def _hp(hparams: dict[str, HParam], key: str, default: int = 0) -> int:
    """An integer hyperparameter; per-layer arrays give their maximum."""
    value = hparams.get(key, default)
    if isinstance(value, list):
        value = max((v for v in value if isinstance(v, (int, float))), default=default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return int(value)


@dataclass(frozen=True)
class _Dims:
    """Model-wide shapes (per-layer widths are read from each layer's weight shapes)."""

    arch: str
    n_layers: int
    layers: tuple[int, ...]  # blocks in the graph (NextN/MTP blocks are skipped)
    n_embd: int
    n_vocab: int
    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    n_expert_used: int
    n_swa: int
    swa_layers: frozenset[int]
    n_pos: int
    recurrent: frozenset[int]

    @classmethod
    def of(cls, facts: ModelFacts) -> _Dims:
        hp = facts.hparams
        n_embd = _hp(hp, "embedding_length")
        n_head = max(_hp(hp, "attention.head_count", 1), 1)
        head_k = _hp(hp, "attention.key_length", n_embd // n_head)
        layers = tuple(x.index for x in facts.layers if not x.is_nextn)
        names = {t.name for t in facts.tensors}
        n_swa = _hp(hp, "attention.sliding_window")
        return cls(
            arch=facts.architecture,
            n_layers=facts.n_layers,
            layers=layers,
            n_embd=n_embd,
            n_vocab=_vocab(facts),
            n_head=n_head,
            n_head_kv=max(_hp(hp, "attention.head_count_kv", n_head), 1),
            head_k=head_k,
            head_v=_hp(hp, "attention.value_length", head_k),
            n_expert_used=max(facts.n_experts_used, 1),
            n_swa=n_swa,
            swa_layers=_swa_layers(facts, layers) if n_swa else frozenset(),
            n_pos=4 if "rope.dimension_sections" in hp else 1,
            recurrent=frozenset(i for i in layers if f"blk.{i}.ssm_conv1d.weight" in names),
        )


def _vocab(facts: ModelFacts) -> int:
    """Rows of the output matrix (or of the tied token embeddings)."""
    for name in ("output.weight", "token_embd.weight"):
        for tensor in facts.tensors:
            if tensor.name == name and len(tensor.shape) >= 2:
                return tensor.shape[1]
    return 0


def _swa_layers(facts: ModelFacts, layers: Sequence[int]) -> frozenset[int]:
    """llama_hparams::set_swa_pattern: layer il uses the window iff il % n < n - 1."""
    pattern = facts.hparams.get("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return frozenset(i for i in layers if i < len(pattern) and bool(pattern[i]))
    n = _hp(facts.hparams, "attention.sliding_window_pattern", 0)
    n = n or _SWA_PATTERN_DEFAULT.get(facts.architecture, 1)
    return frozenset(i for i in layers if n == 0 or i % n < n - 1)


# --- the reserve graph, after llama.cpp's graph builders (src/llama-graph.cpp, src/models/) --


_OUT_IDS_LATE = {"gpt-oss": "l_out", "qwen35moe": "norm", "qwen35": "norm", "qwen3next": "norm"}
_QKV_ORDER = {"gpt-oss": "qkv"}  # build order of the Q/K/V projections; default q, v, k
# llm_arch_supports_mixed_batch() is false for these (llama-arch.cpp)
_NO_MIXED_BATCH = frozenset(
    {"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash", "gemma4-assistant"}
)


@dataclass(frozen=True)
class _Inputs:
    """The graph inputs (allocated first, in the CPU's compute buffer)."""

    tokens: _T
    mixed: tuple[_T | None, _T | None, _T | None]  # tokens, slots, embd of a mixed batch
    pos: _T
    rs_copy: _T | None
    attn: dict[str, _AttnInputs]
    out_ids: _T


@dataclass(frozen=True)
class _AttnInputs:
    """Per attention kind (full or sliding window): cache row indices, the KQ mask and the
    Hadamard rotations that a quantized cache gets (llama-kv-cache.cpp, n_rot_k/n_rot_v)."""

    k_idxs: _T
    v_idxs: _T | None
    mask: _T
    k_rot: _T | None
    v_rot: _T | None


def _build(g: _Graph) -> None:
    """Inputs, embeddings, every (non-NextN) block, the output head."""
    inp = _inputs(g)
    res = _embeddings(g, inp)
    for il in g.d.layers:
        res = _layer(g, inp, il, res, il == g.d.layers[-1])
    _output(g, inp, res)


def _attn_kind(g: _Graph, il: int) -> str | None:
    """ "full" or "swa" for attention blocks, None for recurrent ones."""
    if il in g.d.recurrent:
        return None
    return "swa" if il in g.d.swa_layers else "full"


def _n_kv(g: _Graph, kind: str) -> int:
    """KV cells of the reserve graph: the whole cache (llama-kv-cache-iswa.cpp for SWA)."""
    run = g.run
    if kind == "swa":
        swa = -(-(g.d.n_swa * run.n_seqs + run.n_ubatch) // N_CTX_PAD) * N_CTX_PAD
        return min(run.n_ctx, swa)
    return run.n_ctx


def _inputs(g: _Graph) -> _Inputs:
    """The input leaves, in the order the graph first uses them."""
    t, e = g.run.n_tokens, g.d.n_embd
    tokens = g.input("inp_tokens", (t,), I32)
    g.input("inp_embd", (e, t), F32)  # the unused vector-embeddings branch: never freed
    mixed: tuple[_T | None, _T | None, _T | None] = (None, None, None)
    if g.d.arch not in _NO_MIXED_BATCH:
        mixed = (
            g.input("inp_mixed_tokens", (t,), I32),
            g.input("inp_mixed_slots", (t,), I64),
            g.input("inp_mixed_embd", (e, t), F32),
        )
    rs_copy = g.input("rs_s_copy", (g.run.n_seqs,), I32) if g.d.recurrent else None
    pos: _T | None = None
    attn: dict[str, _AttnInputs] = {}
    for il in g.d.layers:
        kind = _attn_kind(g, il)
        if kind is None or kind in attn:
            continue
        mla = g.has(f"blk.{il}.attn_kv_a_mqa.weight")
        k_rot = _rot_input(g, "k", g.d.head_k)
        if pos is None:
            pos = g.input("inp_pos", (t * g.d.n_pos,), I32)
        v_rot = None if mla else _rot_input(g, "v", g.d.head_v)
        attn[kind] = _attn_inputs(g, kind, mla, k_rot, v_rot)
    if pos is None:
        pos = g.input("inp_pos", (t * g.d.n_pos,), I32)
    out_ids = g.input("out_ids", (g.run.n_outputs,), I32)
    return _Inputs(tokens, mixed, pos, rs_copy, attn, out_ids)


def _rot_input(g: _Graph, kind: str, head: int) -> _T | None:
    """A quantized cache rotates K (and V) by a Hadamard matrix: n_rot_k is 64 doubled while
    it divides the head size, n_rot_v is 64; heads not a multiple of 64 are not rotated."""
    if not g.opts.kv_quantized(kind) or head <= 0 or head % 64:
        return None
    n = 64
    while kind == "k" and head % (2 * n) == 0:
        n *= 2
    return g.input(f"attn_inp_{kind}_rot", (n, n), F32)


def _attn_inputs(
    g: _Graph, kind: str, mla: bool, k_rot: _T | None, v_rot: _T | None
) -> _AttnInputs:
    """k_idxs, v_idxs (one per element of V when V is stored transposed, i.e. without flash
    attention; none for MLA, whose V is a view of K) and the KQ mask (F16 with FA)."""
    t, fa = g.run.n_tokens, g.opts.flash_attn
    k_idxs = g.input("attn_inp_k_idxs", (t,), I64)
    v_idxs = None
    if not mla:
        v_width = 1 if fa else g.d.n_head_kv * g.d.head_v
        v_idxs = g.input("attn_inp_v_idxs", (t * v_width,), I64)
    mask = g.input("attn_inp_kq_mask", (_n_kv(g, kind), t), KQ_MASK_TYPES[fa])
    return _AttnInputs(k_idxs, v_idxs, mask, k_rot, v_rot)


def _rotate(g: _Graph, cur: _T, rot: _T | None) -> _T:
    """llama_mul_mat_hadamard: [n, numel/n] = rot x reshape(cur), viewed back as ``cur``."""
    if rot is None:
        return cur
    n = rot.ne[0]
    flat = g.view(cur, (n, math.prod(cur.ne) // n), "reshape")
    return g.view(g.mm(rot, flat, n, "hadamard"), cur.ne, "reshape")


def _embeddings(g: _Graph, inp: _Inputs) -> _T:
    """build_inp_embd: the token path, plus the mixed-batch path whose DUP is never freed."""
    ne = (g.d.n_embd, g.run.n_tokens)
    tok = g.w("token_embd.weight")
    embd = g.op("get_rows", "embd", ne, tok, inp.tokens)
    tokens, slots, mixed_embd = inp.mixed
    if tokens is not None and mixed_embd is not None:
        rows = g.op("get_rows", "mixed_rows", ne, tok, tokens)
        dup = g.op("dup", "mixed_dup", ne, mixed_embd)  # only its set_rows view uses it
        g.into("set_rows", "mixed", dup, rows, slots, dup)
    return embd


def _layer(g: _Graph, inp: _Inputs, il: int, res: _T, last: bool) -> _T:
    """One block: norm, mixer (attention, MLA or delta net), residual, norm, FFN, residual."""
    p = f"blk.{il}."
    x = g.norm(res, g.w(p + "attn_norm.weight"), "attn_norm")
    if il in g.d.recurrent:
        cur = _gdn(g, inp, il, x)
    elif g.has(p + "attn_kv_a_mqa.weight"):
        cur = _attn_mla(g, inp, il, x)
    else:
        cur = _attn(g, inp, il, x)
    if last and g.d.arch not in _OUT_IDS_LATE:
        n_out = (g.d.n_embd, g.run.n_outputs)
        cur = g.op("get_rows", "attn_out_rows", n_out, cur, inp.out_ids)
        res = g.op("get_rows", "res_rows", n_out, res, inp.out_ids)
    ffn_inp = g.op("add", "ffn_inp", cur.ne, cur, res)
    norm_w = g.w(p + "ffn_norm.weight") or g.w(p + "post_attention_norm.weight")
    x = g.norm(ffn_inp, norm_w, "ffn_norm")
    out = _moe(g, il, x) if g.has(p + "ffn_gate_inp.weight") else _ffn(g, il, x, "")
    return g.op("add", "l_out", out.ne, out, ffn_inp)


def _output(g: _Graph, inp: _Inputs, res: _T) -> None:
    """Output norm and logits for the output rows (t_embd and t_logits are outputs)."""
    n_out = (g.d.n_embd, g.run.n_outputs)
    late = _OUT_IDS_LATE.get(g.d.arch)
    if late == "l_out":
        res.is_output = True  # t_h_nextn
        res = g.op("get_rows", "rows", n_out, res, inp.out_ids)
    cur = g.norm(res, g.w("output_norm.weight"), "result_norm")
    if late == "norm":
        cur.is_output = True  # t_h_nextn
        cur = g.op("get_rows", "result_norm", n_out, cur, inp.out_ids)
    cur.is_output = True
    logits = g.mm(g.output_weight(), cur, g.d.n_vocab, "result_output")
    logits.is_output = True


def _rows(g: _Graph, name: str, default: int) -> int:
    """Output width of a weight matrix (ggml ne[1]), or ``default`` if the model lacks it."""
    return g.shape(name)[1] if g.has(name) and len(g.shape(name)) > 1 else default


def _attn(g: _Graph, inp: _Inputs, il: int, x: _T) -> _T:
    """Grouped-query attention with KV cache: projections (+bias, +Q/K norm, +output gate),
    RoPE, cache store, then flash attention or KQ -> softmax -> KQV (build_attn_mha)."""
    p, d, t = f"blk.{il}.", g.d, g.run.n_tokens
    n_head = _rows(g, p + "attn_q.weight", d.n_head * d.head_k) // d.head_k
    gated = n_head == 2 * d.n_head
    n_head = d.n_head if gated else n_head
    n_kv_head = _rows(g, p + "attn_k.weight", d.n_head_kv * d.head_k) // d.head_k
    kind = _attn_kind(g, il) or "full"
    ai = inp.attn[kind]
    proj: dict[str, tuple[_T, _T]] = {}
    for part in _QKV_ORDER.get(d.arch, "qvk"):
        cur, full = _attn_proj(g, inp, il, x, part=part, heads=(n_head, n_kv_head, gated))
        proj[part] = _rotate(g, cur, ai.v_rot if part == "v" else ai.k_rot), full
    n_kv = _n_kv(g, kind)
    cache_k = g.cache(f"cache_k_l{il}", il, (d.head_k, n_kv_head, n_kv), g.opts.kv_bytes("k"))
    cache_v = g.cache(f"cache_v_l{il}", il, (d.head_v, n_kv_head, n_kv), g.opts.kv_bytes("v"))
    g.into("set_rows", f"cache_k_l{il}", cache_k, g.view(proj["k"][0]), ai.k_idxs, cache_k)
    g.into("set_rows", f"cache_v_l{il}", cache_v, g.view(proj["v"][0]), ai.v_idxs, cache_v)
    sinks = g.w(p + "attn_sinks.weight")
    q = g.view(g.view(proj["q"][0]), (d.head_k, t, n_head), "permute")
    k = g.view(g.view(cache_k), (d.head_k, n_kv, n_kv_head), "permute")
    v = g.view(g.view(cache_v), (d.head_v, n_kv, n_kv_head), "permute")
    cur = _rotate(g, _attn_core(g, (q, k, v), ai.mask, sinks, n_head=n_head, n_kv=n_kv), ai.v_rot)
    if gated:
        cur = _attn_gate(g, proj["q"][1], cur, n_head)
    out = g.mm(g.w(p + "attn_output.weight"), cur, d.n_embd, "attn_output")
    bias = g.w(p + "attn_output.bias")
    return g.op("add", "attn_out", out.ne, out, bias) if bias is not None else out


def _attn_proj(
    g: _Graph, inp: _Inputs, il: int, x: _T, *, part: str, heads: tuple[int, int, bool]
) -> tuple[_T, _T]:
    """One of Q/K/V: matmul (+bias), reshape to heads, optional RMS norm, RoPE for Q and K.
    Returns the result and the projection itself (Q's also holds the output gate)."""
    p, d, t = f"blk.{il}.attn_{part}", g.d, g.run.n_tokens
    n_head, n_kv_head, gated = heads
    width = d.head_v if part == "v" else d.head_k
    n = n_head if part == "q" else n_kv_head
    rows = n * width * (2 if gated and part == "q" else 1)
    cur = g.mm(g.w(p + ".weight"), x, rows, f"{part.upper()}cur")
    bias = g.w(p + ".bias")
    if bias is not None:
        cur = g.op("add", f"{part.upper()}cur_b", cur.ne, cur, bias)
    full = cur
    cur = g.view(cur, (width, n, t), "reshape")
    if part == "v":
        return cur, full
    qk_norm = g.w(f"{p}_norm.weight")
    if qk_norm is not None:
        cur = g.norm(cur, qk_norm, f"{part.upper()}cur_normed")
    return g.op("rope", f"{part.upper()}cur", cur.ne, cur, inp.pos), full


def _attn_core(
    g: _Graph, qkv: tuple[_T, _T, _T], mask: _T, sinks: _T | None, *, n_head: int, n_kv: int
) -> _T:
    """build_attn_mha: [d_v * n_head, n_tokens] from permuted q [d, T, H] and cache views."""
    q, k, v = qkv
    d_v, t = v.ne[0], g.run.n_tokens
    if g.opts.flash_attn:
        out = g.op("flash_attn", "fattn", (d_v, n_head, t), q, k, v, mask, sinks)
        out.cuda_extra = _fa_f16_extra(g, out, k, v, same=False)
        return g.view(out, (d_v * n_head, t), "reshape")
    kq = g.op("mul_mat", "kq", (n_kv, t, n_head), k, q)
    kq = g.op("soft_max", "kq_soft_max", kq.ne, kq, mask, sinks)
    kqv = g.op("mul_mat", "kqv", (d_v, t, n_head), v, kq)
    return g.op("cont", "kqv_out", (d_v * n_head, t), g.view(kqv, None, "permute"))


def _fa_f16_extra(g: _Graph, out: _T, k: _T, v: _T, same: bool) -> int:
    """ggml_cuda_flash_attn_ext_get_alloc_size: the MMA/tile kernels used for prompt batches
    need F16 K and V, converted into the FA node's own allocation after its result (each
    start padded to 128 bytes); V shares K's copy when it is a view of K (MLA)."""
    end = out.nbytes
    for view, kind in ((k, "k"), (v, "v")):
        needs_f16 = (g.opts.type_k if kind == "k" else g.opts.type_v) != "f16"
        if needs_f16 and not (same and kind == "v"):
            end = -(-end // 128) * 128 + math.prod(view.ne) * F16
    return end - out.nbytes


def _attn_gate(g: _Graph, q_full: _T, cur: _T, n_head: int) -> _T:
    """Qwen3-Next/3.5 output gate: attn * sigmoid(gate half of the Q projection)."""
    t = g.run.n_tokens
    gate = g.op("cont", "gate_reshaped", (g.d.head_k * n_head, t), g.view(q_full))
    gate = g.op("unary", "gate_sigmoid", gate.ne, gate)
    return g.op("mul", "attn_gated", cur.ne, cur, gate)


def _attn_mla(g: _Graph, inp: _Inputs, il: int, x: _T) -> _T:
    """DeepSeek MLA with the absorption optimisation (src/models/deepseek2.cpp): the cache
    holds one compressed head (kv_lora_rank + rope dims); V is a view of K."""
    p, t = f"blk.{il}.", g.run.n_tokens
    nope, kv_lora, n_head = g.shape(p + "attn_k_b.weight")[:3]
    v_mla = g.shape(p + "attn_v_b.weight")[1]
    rope = _rows(g, p + "attn_kv_a_mqa.weight", kv_lora) - kv_lora
    q = _mla_query(g, inp, il, x, (nope, rope, kv_lora, n_head))
    kv = g.mm(g.w(p + "attn_kv_a_mqa.weight"), x, kv_lora + rope, "kv_cmpr_pe")
    kv_c = g.norm(g.view(kv, (kv_lora, t)), g.w(p + "attn_kv_a_norm.weight"), "kv_cmpr")
    v_cur = g.view(kv_c, (kv_lora, 1, t), "reshape")
    k_pe = g.op("rope", "k_pe", (rope, 1, t), g.view(kv, (rope, 1, t)), inp.pos)
    k_cur = g.op("concat", "Kcur", (kv_lora + rope, 1, t), v_cur, k_pe)
    kind = _attn_kind(g, il) or "full"
    ai, n_kv = inp.attn[kind], _n_kv(g, kind)
    q = _rotate(g, q, ai.k_rot)
    k_cur = _rotate(g, k_cur, ai.k_rot)
    cache = g.cache(f"cache_k_l{il}", il, (kv_lora + rope, 1, n_kv), g.opts.kv_bytes("k"))
    g.into("set_rows", f"cache_k_l{il}", cache, g.view(k_cur), ai.k_idxs, cache)
    qp = g.view(g.view(q), (kv_lora + rope, t, n_head), "permute")
    cur = _mla_core(g, il, (qp, cache), ai.mask, v_mla=v_mla)
    cur = _rotate(g, cur, ai.k_rot)
    return g.mm(g.w(p + "attn_output.weight"), cur, g.d.n_embd, "attn_output")


def _mla_core(g: _Graph, il: int, q_cache: tuple[_T, _T], mask: _T, *, v_mla: int) -> _T:
    """Attention over the compressed cache, then V decompressed by attn_v_b per head."""
    qp, cache = q_cache
    t, (k_row, _, n_kv), n_head = g.run.n_tokens, cache.ne, qp.ne[2]
    kv_lora = g.shape(f"blk.{il}.attn_v_b.weight")[0]
    w_v = g.w(f"blk.{il}.attn_v_b.weight")
    k = g.view(g.view(cache), (k_row, n_kv, 1), "permute")
    v = g.view(g.view(cache), (kv_lora, n_kv, 1), "permute")
    if g.opts.flash_attn:
        out = g.op("flash_attn", "fattn", (kv_lora, n_head, t), qp, k, v, mask)
        out.cuda_extra = _fa_f16_extra(g, out, k, v, same=True)
        cur = g.view(out, (kv_lora, t, n_head), "permute")
        mla = g.op("mul_mat", "fattn_mla", (v_mla, t, n_head), w_v, cur)
    else:
        v_t = g.view(v, None, "transpose")
        v_cont = g.op("cont", "v_cont", (n_kv, kv_lora, 1), v_t, esize=g.opts.kv_bytes("k"))
        kq = g.op("mul_mat", "kq", (n_kv, t, n_head), k, qp)
        kq = g.op("soft_max", "kq_soft_max", kq.ne, kq, mask)
        kqv = g.op("mul_mat", "kqv", (kv_lora, t, n_head), v_cont, kq)
        mla = g.mm(w_v, kqv, v_mla, "kqv_mla")
    return g.op("cont", "kqv_out", (v_mla * n_head, t), g.view(mla, None, "permute"))


def _mla_query(g: _Graph, inp: _Inputs, il: int, x: _T, dims: tuple[int, int, int, int]) -> _T:
    """Q with the nope part absorbed into the compressed space, concatenated with rope."""
    p, t = f"blk.{il}.", g.run.n_tokens
    nope, rope, kv_lora, n_head = dims
    q_lora = _rows(g, p + "attn_q_a.weight", 0)
    if q_lora:
        q = g.mm(g.w(p + "attn_q_a.weight"), x, q_lora, "q")
        q = g.norm(q, g.w(p + "attn_q_a_norm.weight"), "q")
        q = g.mm(g.w(p + "attn_q_b.weight"), q, n_head * (nope + rope), "q")
    else:
        q = g.mm(g.w(p + "attn_q.weight"), x, n_head * (nope + rope), "q")
    q3 = g.view(q, (nope + rope, n_head, t), "reshape")
    q_nope = g.view(g.view(q3, (nope, n_head, t)), (nope, t, n_head), "permute")
    absorbed = g.op(
        "mul_mat", "q_nope_absorbed", (kv_lora, t, n_head), g.w(p + "attn_k_b.weight"), q_nope
    )
    absorbed = g.view(absorbed, (kv_lora, n_head, t), "permute")
    q_pe = g.op("rope", "q_pe", (rope, n_head, t), g.view(q3, (rope, n_head, t)), inp.pos)
    return g.op("concat", "Qcur", (kv_lora + rope, n_head, t), absorbed, q_pe)


@dataclass(frozen=True)
class _Ssm:
    """Gated delta net shapes (Qwen3-Next / Qwen3.5 linear-attention layers)."""

    d_conv: int
    head_k: int
    n_k_heads: int
    n_v_heads: int
    head_v: int

    @property
    def conv_dim(self) -> int:
        return 2 * self.head_k * self.n_k_heads + self.head_v * self.n_v_heads

    @classmethod
    def of(cls, hparams: dict[str, HParam]) -> _Ssm:
        n_v = max(_hp(hparams, "ssm.time_step_rank", 1), 1)
        return cls(
            d_conv=max(_hp(hparams, "ssm.conv_kernel", 4), 1),
            head_k=_hp(hparams, "ssm.state_size"),
            n_k_heads=max(_hp(hparams, "ssm.group_count", 1), 1),
            n_v_heads=n_v,
            head_v=_hp(hparams, "ssm.inner_size") // n_v,
        )


def _gdn(g: _Graph, inp: _Inputs, il: int, x: _T) -> _T:
    """build_layer_attn_linear (src/models/qwen35moe.cpp) with the fused GATED_DELTA_NET op:
    conv state + projection -> ssm_conv -> q/k l2-norm -> delta net -> gated norm -> out."""
    p, s, run = f"blk.{il}.", _Ssm.of(g.hparams), g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    conv_input = _gdn_conv_input(g, inp, il, x, s)
    state = _gdn_state(g, inp, il, s)
    conv = g.op(
        "ssm_conv",
        "conv_output_raw",
        (s.conv_dim, seq_t, n_seqs),
        conv_input,
        g.w(p + "ssm_conv1d.weight"),
    )
    conv = g.op("unary", "conv_output_silu", conv.ne, conv)
    qk = []
    for name in ("q_conv", "k_conv"):
        view = g.view(conv, (s.head_k, s.n_k_heads, seq_t, n_seqs))
        qk.append(g.op("scale", name, view.ne, g.op("rms_norm", name, view.ne, view)))
    v = g.view(conv, (s.head_v, s.n_v_heads, seq_t, n_seqs))
    gate, beta = _gdn_gates(g, il, x, s)
    out = g.op(
        "gdn",
        "gated_delta_net",
        (s.head_v * s.n_v_heads, run.n_tokens + s.head_v * n_seqs),
        qk[0],
        qk[1],
        v,
        gate,
        beta,
        state,
    )
    cache_s = g.cache(f"cache_s_l{il}", il, (s.head_v * s.head_v * s.n_v_heads, n_seqs), F32)
    g.into("cpy", "new_state", cache_s, g.view(out), g.view(cache_s))
    heads = (s.head_v, s.n_v_heads, seq_t, n_seqs)
    norm = g.norm(g.view(out, heads), g.w(p + "ssm_norm.weight"), "attn_out_norm")
    z = g.mm(g.w(p + "attn_gate.weight"), x, s.head_v * s.n_v_heads, "z")
    z = g.op("unary", "z_silu", heads, g.view(z, heads, "reshape"))
    gated = g.op("mul", "gated", heads, norm, z)
    final = g.view(gated, (s.head_v * s.n_v_heads, seq_t, n_seqs), "reshape")
    out = g.mm(g.w(p + "ssm_out.weight"), final, g.d.n_embd, "linear_attn_out")
    return g.view(out, (g.d.n_embd, run.n_tokens), "reshape")


def _gdn_conv_input(g: _Graph, inp: _Inputs, il: int, x: _T, s: _Ssm) -> _T:
    """build_conv_state: gather the conv states, write them back, concat the projection."""
    run = g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    rows = (s.d_conv - 1) * s.conv_dim
    cache_r = g.cache(f"cache_r_l{il}", il, (rows, n_seqs), F32)
    states = g.op("get_rows", "conv_states", (rows, n_seqs), g.view(cache_r), inp.rs_copy)
    g.into("cpy", "conv_states_cpy", cache_r, g.view(states), g.view(cache_r))
    qkv = g.mm(g.w(f"blk.{il}.attn_qkv.weight"), x, s.conv_dim, "qkv_mixed")
    qkv_t = g.view(g.view(qkv, (s.conv_dim, seq_t, n_seqs), "reshape"), None, "transpose")
    conv_states = g.view(states, (s.d_conv - 1, s.conv_dim, n_seqs), "reshape")
    conv_input = g.op(
        "concat", "conv_input", (s.d_conv - 1 + seq_t, s.conv_dim, n_seqs), conv_states, qkv_t
    )
    g.into("cpy", "conv_state_update", cache_r, g.view(conv_input), g.view(cache_r))
    return conv_input


def _gdn_state(g: _Graph, inp: _Inputs, il: int, s: _Ssm) -> _T:
    """build_rs: gather the recurrent states of the ubatch's sequences, write them back."""
    n_seqs = g.run.n_seqs
    rows = s.head_v * s.head_v * s.n_v_heads
    cache_s = g.cache(f"cache_s_l{il}", il, (rows, n_seqs), F32)
    state = g.op("get_rows", "ssm_states", (rows, n_seqs), g.view(cache_s), inp.rs_copy)
    g.into("cpy", "ssm_states_cpy", cache_s, g.view(state), g.view(cache_s))
    return g.view(state, (s.head_v, s.head_v, s.n_v_heads, n_seqs), "reshape")


def _gdn_gates(g: _Graph, il: int, x: _T, s: _Ssm) -> tuple[_T, _T]:
    """gate = softplus(alpha + dt_bias) * ssm_a, beta = sigmoid(beta projection)."""
    p, run = f"blk.{il}.", g.run
    heads = (s.n_v_heads, run.n_tokens // run.n_seqs, run.n_seqs)
    alpha = g.mm(g.w(p + "ssm_alpha.weight"), x, s.n_v_heads, "alpha")
    alpha = g.op(
        "add", "alpha_biased", heads, g.view(alpha, heads, "reshape"), g.w(p + "ssm_dt.bias")
    )
    alpha = g.op("unary", "a_softplus", heads, alpha)
    gate = g.op("mul", "gate", heads, alpha, g.w(p + "ssm_a"))
    beta = g.mm(g.w(p + "ssm_beta.weight"), x, s.n_v_heads, "beta")
    beta = g.op("unary", "beta_sigmoid", (1, *heads), g.view(beta, (1, *heads), "reshape"))
    return g.view(gate, (1, *heads), "reshape"), beta


def _ffn(g: _Graph, il: int, x: _T, kind: str) -> _T:
    """build_ffn with a gate (SwiGLU): dense blocks (kind "") or shared experts ("_shexp")."""
    p = f"blk.{il}.ffn_"
    width = _rows(g, f"{p}up{kind}.weight", 0)
    ne = (width, *x.ne[1:])
    gate = g.mm(g.w(f"{p}gate{kind}.weight"), x, width, "ffn_gate")
    up = g.mm(g.w(f"{p}up{kind}.weight"), x, width, "ffn_up")
    act = g.op("glu", "ffn_swiglu", ne, gate, up)
    return g.mm(g.w(f"{p}down{kind}.weight"), act, g.d.n_embd, "ffn_out")


def _moe(g: _Graph, il: int, x: _T) -> _T:
    """build_moe_ffn: router -> top-k -> gate/up (mul_mat_id) -> GLU -> down -> weighted sum,
    plus the shared expert(s) when present."""
    p, t = f"blk.{il}.", x.ne[1]
    n_used = g.d.n_expert_used
    topk, weights = _router(g, il, x)
    x3 = g.view(x, (g.d.n_embd, 1, t), "reshape")
    gate, up = _expert_gate_up(g, il, x3, topk)
    act = g.op("glu", "ffn_moe_glu", gate.ne, gate, up)
    down = g.op(
        "mul_mat_id",
        "ffn_moe_down",
        (g.d.n_embd, n_used, t),
        g.w(p + "ffn_down_exps.weight"),
        act,
        topk,
    )
    down = _add_id(g, down, g.w(p + "ffn_down_exps.bias"), topk)
    weighted = g.op("mul", "ffn_moe_weighted", down.ne, down, weights)
    views = [g.view(weighted, (g.d.n_embd, t)) for _ in range(n_used)]
    out = views[0]
    for view in views[1:]:
        out = g.op("add", "ffn_moe_out", (g.d.n_embd, t), out, view)
    if 2 <= n_used <= MOE_REDUCTION_MAX_EXPERTS:
        g.deps.append((out, [down, weights]))  # ggml-cuda graph_optimize: fused reduction
    if g.has(p + "ffn_up_shexp.weight"):
        shared = _ffn(g, il, x, "_shexp")
        shared_gate = g.w(p + "ffn_gate_inp_shexp.weight")
        if shared_gate is not None:
            sg = g.op("unary", "shexp_gate", (1, t), g.mm(shared_gate, x, 1, "shexp_gate"))
            shared = g.op("mul", "ffn_shexp_gated", shared.ne, shared, sg)
        out = g.op("add", "ffn_out", out.ne, out, shared)
    return out


def _router(g: _Graph, il: int, x: _T) -> tuple[_T, _T]:
    """Expert selection: logits -> probs -> argsort top-k; the routing weights [1, k, T]."""
    p, t, k = f"blk.{il}.", x.ne[1], g.d.n_expert_used
    n_expert = _rows(g, p + "ffn_gate_inp.weight", k)
    logits = g.mm(g.w(p + "ffn_gate_inp.weight"), x, n_expert, "ffn_moe_logits")
    bias = g.w(p + "ffn_gate_inp.bias")
    if bias is not None:  # gpt-oss: softmax over the selected logits only
        probs = g.op("add", "ffn_moe_probs", logits.ne, logits, bias)
    else:
        probs = g.op("unary", "ffn_moe_probs", logits.ne, logits)
    selection = probs
    probs_b = g.w(p + "exp_probs_b.bias")
    if probs_b is not None:
        selection = g.op("add", "ffn_moe_probs_biased", probs.ne, probs, probs_b)
    argsort = g.op("argsort", "ffn_moe_argsort", probs.ne, selection, esize=I32)
    topk = g.view(argsort, (k, t), span=((t - 1) * n_expert + k) * I32)
    weights = g.op(
        "get_rows", "ffn_moe_weights", (1, k, t), g.view(probs, (1, n_expert, t), "reshape"), topk
    )
    if bias is not None:
        weights = g.op(
            "soft_max", "ffn_moe_weights_softmax", (k, t), g.view(weights, (k, t), "reshape")
        )
        weights = g.view(weights, (1, k, t), "reshape")
    elif _norm_weights(g):
        flat = g.view(weights, (k, t), "reshape")
        total = g.op("sum_rows", "ffn_moe_weights_sum", (1, t), flat)
        total = g.op("clamp", "ffn_moe_weights_sum_clamped", total.ne, total)
        weights = g.op("div", "ffn_moe_weights_norm", (k, t), flat, total)
        weights = g.view(weights, (1, k, t), "reshape")
    return topk, weights


def _norm_weights(g: _Graph) -> bool:
    """Whether the routing weights are renormalised (qwen3moe and qwen3.5 always)."""
    if g.d.arch.startswith(("qwen3", "qwen35")):
        return True
    return bool(g.hparams.get("expert_weights_norm", False))


def _expert_gate_up(g: _Graph, il: int, x3: _T, topk: _T) -> tuple[_T, _T]:
    """Gate and up projections of the selected experts (fused gate_up or separate; +bias)."""
    p, t, k = f"blk.{il}.", x3.ne[2], g.d.n_expert_used
    fused = g.w(p + "ffn_gate_up_exps.weight")
    if fused is not None:
        width = _rows(g, p + "ffn_gate_up_exps.weight", 0) // 2
        both = g.op("mul_mat_id", "ffn_moe_gate_up", (2 * width, k, t), fused, x3, topk)
        both = _add_id(g, both, g.w(p + "ffn_gate_up_exps.bias"), topk)
        return g.view(both, (width, k, t)), g.view(both, (width, k, t))
    width = _rows(g, p + "ffn_up_exps.weight", 0)
    parts = []
    for part in ("gate", "up"):
        w = g.w(f"{p}ffn_{part}_exps.weight")
        cur = g.op("mul_mat_id", f"ffn_moe_{part}", (width, k, t), w, x3, topk)
        parts.append(_add_id(g, cur, g.w(f"{p}ffn_{part}_exps.bias"), topk))
    return parts[0], parts[1]


def _add_id(g: _Graph, cur: _T, bias: _T | None, ids: _T) -> _T:
    """Per-expert bias (gpt-oss), in place."""
    return cur if bias is None else g.op("add_id", cur.name + "_biased", cur.ne, cur, bias, ids)


# --- ggml-backend scheduler (ggml_backend_sched_split_graph, ggml-backend.cpp) -------------


def _batch_size(node: _T) -> int:
    """get_op_batch_size() in ggml-cuda.cu: the rows an op would process on the device."""
    if node.op == "get_rows":
        return 0
    if node.op == "mul_mat":
        return node.ne[1] if len(node.ne) > 1 else 1
    if node.op in ("mul_mat_id", "rope"):
        return node.ne[2] if len(node.ne) > 2 else 1
    return math.prod(node.ne[1:])


def _backend_from_cur(node: _T, opts: _Options) -> int:
    """Pass 1: pre-allocated tensors, views of them, inputs, and ops with weights (which an
    op-offloading device takes over when the batch is large enough)."""
    if node.buffer is not None:
        return node.buffer
    if node.view_src is not None and node.view_src.buffer is not None:
        return node.view_src.buffer
    if node.is_input:
        return CPU
    if node.op in ("rope", "flash_attn"):
        return -1
    for src in node.srcs:
        if src.weight and src.buffer is not None:
            offload = opts.op_offload and src.buffer == CPU
            if offload and _batch_size(node) >= OP_OFFLOAD_MIN_BATCH:
                return DEV
            return src.buffer
    return -1


def _expand(nodes: Iterable[_T], skip_cpu: bool) -> None:
    """Pass 2: give unassigned nodes the backend of the previous assigned node."""
    cur = -1
    for node in nodes:
        if node.op in _VIEW_OPS:
            continue
        if node.backend != -1:
            cur = -1 if skip_cpu and node.backend == CPU else node.backend
        elif cur != -1:
            node.backend = cur


def _assign_backends(g: _Graph) -> None:
    """Passes 1-4 of ggml_backend_sched_split_graph (all ops are taken as supported)."""
    for leaf in g.leafs:
        leaf.backend = CPU
    for node in g.nodes:
        node.backend = _backend_from_cur(node, g.opts)
    for skip_cpu in (True, False):
        _expand(g.nodes, skip_cpu)
        _expand(reversed(g.nodes), skip_cpu)
    for node in g.nodes:  # pass 4
        if node.backend == -1 and node.view_src is not None:
            node.backend = _tensor_backend(node.view_src)
        for src in node.srcs:
            if src.backend == -1:
                src.backend = _tensor_backend(src.view_src) if src.view_src else node.backend
        if node.backend == -1:
            node.backend = DEV


def _tensor_backend(t: _T) -> int:
    return t.buffer if t.buffer is not None else t.backend


@dataclass
class _Split:
    backend: int
    inputs: list[tuple[_T, _T]] = field(default_factory=list)  # (source, its copy)
    nodes: list[_T] = field(default_factory=list)


def _split_graph(g: _Graph) -> list[_T]:
    """Pass 5 and the graph copy: consecutive nodes of one backend form a split; a source
    from another backend is copied (once per backend) at the start of the first split that
    needs it; a weight from another backend starts a new split so its copy can be reused."""
    first = next((n.backend for n in g.nodes if n.op not in _VIEW_OPS), DEV)
    splits = [_Split(first)]
    copies: dict[tuple[int, int], _T] = {}
    for node in g.nodes:
        split = splits[-1]
        if node.op in _VIEW_OPS:
            split.nodes.append(node)
            continue
        new_weight = split.inputs and any(
            s.weight and _tensor_backend(s) != split.backend for s in node.srcs
        )
        if node.backend != split.backend or new_weight:
            split = _Split(node.backend)
            splits.append(split)
        for i, src in enumerate(node.srcs):
            if _tensor_backend(src) != split.backend:
                node.srcs[i] = _copy_of(src, split, copies)
        split.nodes.append(node)
    return _graph_copy(g, splits)


def _copy_of(src: _T, split: _Split, copies: dict[tuple[int, int], _T]) -> _T:
    """The split's backend copy of ``src`` (ggml_dup_tensor_layout: a strided view's span)."""
    key = (id(src), split.backend)
    copy = copies.get(key)
    if copy is None:
        ne, esize = src.ne, src.esize
        copy = _T(
            f"copy of {src.name}",
            "none",
            ne,
            esize,
            backend=split.backend,
            quant_pad=src.quant_pad,
            fixed_bytes=src.fixed_bytes,
        )
        copies[key] = copy
        split.inputs.append((src, copy))
    return copy


def _graph_copy(g: _Graph, splits: list[_Split]) -> list[_T]:
    """Each split's inputs first (a dependency on the source, then the copy), then its nodes;
    on CUDA, the alloc-dependency nodes that ggml-cuda's graph_optimize adds."""
    deps = {id(until): kept for until, kept in g.deps} if g.opts.cuda else {}
    order: list[_T] = []
    for split in splits:
        for src, copy in split.inputs:
            base = src.view_src if src.view_src is not None else src
            dep = _T(f"dep {src.name}", "none", src.ne, src.esize, [src], base, backend=src.backend)
            order += [dep, copy]
        for node in split.nodes:
            order.append(node)
            kept = deps.get(id(node))
            if kept is not None and node.backend == DEV:
                order.append(_T("alloc dep", "none", (0,), F32, list(kept), kept[0], backend=DEV))
    return order


# --- ggml-alloc (ggml_gallocr_alloc_graph_impl and ggml_dyn_tallocr, ggml-alloc.c) ---------


class _DynAlloc:
    """ggml_dyn_tallocr with one chunk: best fit among the free blocks, else the end block
    (which grows the buffer); freed blocks merge with their neighbours."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.free: list[list[int]] = [[0, 1 << 62]]  # [offset, size], sorted by offset
        self.max_size = 0

    def pad(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size: int) -> int:
        """Offset for ``size`` bytes (aligned)."""
        size = self.pad(size)
        best, best_size = len(self.free) - 1, -1
        for i, (_, block_size) in enumerate(self.free[:-1]):
            if block_size >= size and (best_size == -1 or block_size <= best_size):
                best, best_size = i, block_size
        block = self.free[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.free[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def release(self, offset: int, size: int) -> None:
        """Return a block, merging it with adjacent free blocks."""
        size = self.pad(size)
        for i, block in enumerate(self.free):
            if block[0] + block[1] == offset:
                block[1] += size
                if i + 1 < len(self.free) and block[0] + block[1] == self.free[i + 1][0]:
                    block[1] += self.free.pop(i + 1)[1]
                return
            if offset + size == block[0]:
                block[0], block[1] = offset, block[1] + size
                if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == offset:
                    self.free[i - 1][1] += self.free.pop(i)[1]
                return
        i = next((j for j, b in enumerate(self.free) if b[0] > offset), len(self.free))
        self.free.insert(i, [offset, size])


class _GAlloc:
    """ggml_gallocr: allocate each node before its use, in place over a dying parent when
    the op allows it, and free every tensor (but outputs) after its last consumer."""

    def __init__(self, opts: _Options) -> None:
        self.opts = opts
        self.allocs = {DEV: _DynAlloc(128 if opts.cuda else 32), CPU: _DynAlloc(32)}

    def size(self, t: _T, backend: int) -> int:
        """ggml_backend_buft_get_alloc_size: CUDA adds row padding and FA's F16 K/V."""
        size = t.nbytes
        if backend == DEV and self.opts.cuda:
            size += t.quant_pad + t.cuda_extra
        return size

    def allocate(self, t: _T, backend: int) -> None:
        """ggml_gallocr_allocate_node: once, not for views or pre-allocated tensors."""
        hn = t.alloc
        if t.buffer is not None or t.view_src is not None or hn.visited:
            return
        hn.visited = hn.allocated = True
        hn.backend = backend
        if t.op in _INPLACE_OPS and self._reuse_parent(t, hn):
            return
        hn.offset = self.allocs[backend].alloc(self.size(t, backend))

    def _reuse_parent(self, t: _T, hn: _State) -> bool:
        """In place: a parent of the same layout that this node is the last user of."""
        for parent in t.srcs:
            ph = parent.alloc
            if not ph.allocated or parent.is_output or parent.layout != t.layout:
                continue
            if ph.children == 1 and ph.views == 0 and ph.backend == hn.backend:
                hn.offset, ph.allocated = ph.offset, False
                return True
        return False

    def free(self, t: _T) -> None:
        """ggml_gallocr_free_node: outputs are never freed."""
        hn = t.alloc
        if t.is_output:
            return
        self.allocs[hn.backend].release(hn.offset, self.size(t, hn.backend))
        hn.allocated = False

    def run(self, leafs: Sequence[_T], order: Sequence[_T]) -> dict[int, int]:
        """ggml_gallocr_alloc_graph_impl; returns each backend's buffer size."""
        for leaf in leafs:
            self.allocate(leaf, leaf.backend)
        for node in order:
            if node.view_src is not None and node.op != "none":
                node.view_src.alloc.views += 1
            for src in node.srcs:
                src.alloc.children += 1
        for node in order:
            for src in node.srcs:
                self.allocate(src, node.backend)
            self.allocate(node, node.backend)
            for src in node.srcs:
                self._release_parent(src)
        return {b: a.max_size for b, a in self.allocs.items()}

    def _release_parent(self, parent: _T) -> None:
        """One user of ``parent`` is done; free it (or its view source) after the last."""
        ph = parent.alloc
        ph.children -= 1
        if ph.children or ph.views:
            return
        base = parent.view_src
        if base is not None:
            bh = base.alloc
            bh.views -= 1
            if bh.views == 0 and bh.children == 0 and bh.allocated:
                self.free(base)
        elif ph.allocated:
            self.free(parent)


def _simulate(facts: ModelFacts, run: _Run, place: _Placement, opts: _Options) -> dict[int, int]:
    """Build the reserve graph, schedule it, allocate it: the peak bytes per backend."""
    graph = _Graph(facts, run, place, opts)
    _build(graph)
    _assign_backends(graph)
    order = _split_graph(graph)
    return _GAlloc(opts).run(graph.leafs, order)
