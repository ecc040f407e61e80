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

Modules: ``params`` (the ubatch, the placement, the options), ``ir`` (tensors and the graph
being built), step 1 in ``graph`` with ``inputs``, ``attention``, ``gdn`` and ``ffn``, step 2
in ``sched``, step 3 and the driver in ``alloc``.

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
Several devices (``compute_for``): each device is a backend (0, 1, ... in llama.cpp's order,
the CPU last), the split sends a layer's activations to the next device as a copy in that
device's buffer, the op offload of host weights goes to the first CUDA device, and pipeline
parallelism (several devices, every layer offloaded, no tensor overrides) keeps 4 copies of
every graph input and split input, allocated first and never freed (simulate only).
Not modelled: a non-unified cache (explicit ``-np N`` without ``--kv-unified``),
ggml-cuda's shared-expert reordering and top-k fusion deps (small tensors), and graph
details of architectures other than the llama-like, MLA and gated-delta-net families (they
get the generic block).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from moetune.core.compute.params import CPU, DEV, DEVICE_KINDS, Options, Placement, run_params
from moetune.core.compute.replay import replay_for
from moetune.core.facts import ModelFacts
from moetune.core.settings import Settings

__all__ = ["ComputeEstimate", "compute_for", "estimate_compute"]


class ComputeEstimate(NamedTuple):
    """Predicted compute buffers: each offload device's, and the host's (CPU or CUDA_Host)."""

    devices: tuple[int, ...]
    host_bytes: int

    @property
    def device_bytes(self) -> int:
        """All devices together (one device: its buffer)."""
        return sum(self.devices)


def _options(
    settings_kinds: Sequence[str],
    *,
    flash_attn: bool,
    type_k: str,
    type_v: str,
    op_offload: bool = True,
    n_copies: int = 1,
) -> Options:
    for kind in settings_kinds:
        if kind not in DEVICE_KINDS:
            raise ValueError(f"device_kind must be one of {DEVICE_KINDS}, got {kind!r}")
    cuda = tuple(kind == "cuda" for kind in settings_kinds)
    return Options(
        flash_attn=flash_attn,
        type_k=type_k.lower(),
        type_v=type_v.lower(),
        cuda=cuda,
        op_offload=op_offload and any(cuda),
        n_copies=n_copies,
    )


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
    run = run_params(n_ctx, n_ubatch, n_batch, n_seq, n_outputs)
    blocks = range(cpu_expert_layers) if cpu_expert_blocks is None else cpu_expert_blocks
    n_dev = facts.n_layers if layers_on_device is None else min(layers_on_device, facts.n_layers)
    placement = Placement.single(
        facts.n_layers, facts.n_layers - max(n_dev, 0), blocks, output_on_device, facts.tensors
    )
    options = _options(
        (device_kind,), flash_attn=flash_attn, type_k=type_k, type_v=type_v, op_offload=op_offload
    )
    peaks = replay_for(facts, run, options).peaks(placement)
    return _margin(facts, ComputeEstimate(devices=(peaks[DEV],), host_bytes=peaks[CPU]))


def compute_for(
    facts: ModelFacts,
    settings: Settings,
    *,
    homes: tuple[int, ...],
    moves: frozenset[tuple[str, int]],
    kinds: Sequence[str],
    pipeline: bool = False,
) -> ComputeEstimate:
    """The compute buffers llama-server reserves at ``settings`` for a placement over devices
    of ``kinds``: each layer's home (a device index, else the CPU; the output layer last),
    and the expert tensors that live elsewhere than their layer. ``pipeline``: llama.cpp's
    pipeline parallelism is on (4 copies of every split input)."""
    run = run_params(
        settings.n_ctx,
        settings.n_ubatch,
        settings.n_batch,
        settings.n_seq,
        None if settings.all_outputs else settings.n_outputs,
    )
    options = _options(
        kinds,
        flash_attn=settings.flash_attn,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_copies=4 if pipeline else 1,
    )
    placement = Placement(homes, moves)
    peaks = replay_for(facts, run, options).peaks(placement)
    return _margin(
        facts,
        ComputeEstimate(devices=tuple(peaks[i] for i in range(len(kinds))), host_bytes=peaks[CPU]),
    )


# An architecture moetune has not been taught (no known record in core/archs.py) is replayed
# with the generic block; its buffers get half as much again, and at least 64 MiB, on top.
UNTAUGHT_MARGIN_SHARE, UNTAUGHT_MARGIN_BYTES = 0.5, 64 * 1024 * 1024


def untaught_margin(n_bytes: int) -> int:
    """The generic block's peak plus the safety margin (0 stays 0: an unused buffer)."""
    if n_bytes <= 0:
        return n_bytes
    return n_bytes + max(int(n_bytes * UNTAUGHT_MARGIN_SHARE), UNTAUGHT_MARGIN_BYTES)


def _margin(facts: ModelFacts, found: ComputeEstimate) -> ComputeEstimate:
    if facts.dims.known:
        return found
    return ComputeEstimate(
        devices=tuple(untaught_margin(b) for b in found.devices),
        host_bytes=untaught_margin(found.host_bytes),
    )
