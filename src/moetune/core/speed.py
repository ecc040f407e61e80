"""The speed model: what one generated token and one prompt ubatch move and compute on each
device, on the host link and in RAM for a placement, and the time of it from a machine's
figures (llama.cpp build 11434).

Per ubatch of ``U`` tokens at depth ``d`` (a generated token is a ubatch of one), each home
(a device, or the CPU) reads:

- its dense weights in full: attention, norms, router, shared experts, dense FFN blocks; the
  output layer only in a ubatch that computes logits (one row: the prompt's last token);
- its routed experts' touched share: each token picks ``n_used`` of ``n_expert`` experts, so
  a ubatch touches ``1 - (1 - n_used/n_expert)^(U^a)`` of them in expectation
  (``n_used/n_expert`` for one token; core/routing.py): ``a = 1`` is uniform routing, what
  most routers show; gpt-oss's concentrates its picks (``a = 0.398``, fitted on public
  copy-all / copy-used pairs: gpt-oss-120b at ubatch 4096 touches 64 % of its experts, not
  all);
- its KV cache at the depth: full-attention layers ``d + U`` cells, sliding-window layers the
  window (``min(d + U, n_swa + U - 1)``), and a recurrent layer one sequence's state.

Weights in host memory run where ggml's scheduler puts their op (ggml-backend.cpp,
``ggml_backend_sched_backend_id_from_cur``): on the first CUDA device when its
``offload_op`` takes the op (ggml-cuda.cu: the op's batch, ``ne[1]`` of a matmul and
``ne[2]`` of MUL_MAT_ID, rows otherwise, reaches ``GGML_OP_OFFLOAD_MIN_BATCH``: 32 unless the
environment sets it, ``Settings.op_offload_min_batch``), else on the CPU. Offloaded, a
weight is copied over that device's host link once per ubatch: a MUL_MAT_ID input only its
used experts (``ggml_backend_sched_compute_splits``), anything else whole (a routed-expert
bias, ADD_ID, whose batch is ``n_used * U`` rows, included), and the device reads the copy.
On the CPU (``--no-op-offload``, an RPC-only device set, or a batch below the threshold:
every generated token, and with a threshold above the ubatch every prompt ubatch) the
weights are read from RAM. The CPU layers' KV cache is in RAM and their attention runs on
the CPU.

Compute: 2 FLOPs per active parameter per token (routed experts: ``n_used/n_expert`` of
theirs), and attention ``2 * n_head * (head_k + head_v)`` per token per cell it sees.

Left out: the input layer (``token_embd``: one row per token) and other global tensors
besides the output layer (RoPE factors), a few KiB a token; the activations between devices;
the KV cache's writes.

Time: each term's amount over its figure times its efficiency; the terms add up (the layers
run one after another, and a split waits for its copies). A generated token is bound by
memory: its terms are each device's reads and the RAM's (its compute, a few GFLOP, is far
below any device's rate; it is in the traffic, not in the time). A prompt adds the host
links, each device's compute and the CPU's. A term whose figure is unknown makes the
forecast unknown and names the figure. ``forecast`` takes the efficiencies it is given
(default 1.0: the figures themselves); core/calibrate.py's ``fitted_forecast`` gives it a
calibration's, or where there is none (``uncalibrated``) core/prior.py's typical ones.

Threads (``-t``, the layout's ``n_threads``): the RAM term's rate and the CPU's compute are
scaled by what that many threads reach of the figures (core/threads.py: a saturating law for
the RAM read, the physical cores for compute); at the physical cores, or where the threads or
the cores are unknown, the figures themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, fields, replace
from itertools import pairwise
from math import prod
from typing import Any, Literal

from moetune.core.backends import rules
from moetune.core.compute.params import run_params
from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.core.figures import FigureSource, Provenance
from moetune.core.flags import pairs
from moetune.core.kvcache import cache_for, state_bytes
from moetune.core.memory import weights_on
from moetune.core.noise import loo_text
from moetune.core.placement import CPU, SKIPPED, Placement, WeightSplit
from moetune.core.routing import routing_exponent, touched_share
from moetune.core.settings import OP_OFFLOAD_MIN_BATCH, Settings
from moetune.core.threads import cpu_thread_share, ram_thread_share
from moetune.gguf.roles import Role
from moetune.record import HIDDEN, OMIT_EMPTY, record, require

UNCALIBRATED = "uncalibrated"


@record(frozen=True)
class HomeLoad:
    """What one home (a device, or the CPU) holds and runs, in the speed model's parts."""

    dense_bytes: int = 0  # every token runs through them (shared experts included)
    dense_params: int = 0
    head_bytes: int = 0  # the output layer: run on the output rows only
    head_params: int = 0
    expert_bytes: int = 0  # routed-expert matrices (MUL_MAT_ID)
    expert_params: int = 0
    expert_bias_bytes: int = 0  # routed-expert biases (ADD_ID), [n_ff, n_expert]
    expert_bias_params: int = 0
    kv_cell_bytes: int = 0  # KV bytes of one cell, over its full-attention layers
    swa_cell_bytes: int = 0  # ... over its sliding-window layers
    state_bytes: int = 0  # one sequence's recurrent state
    attn_flops_per_cell: int = 0  # per token per cell seen, full-attention layers
    swa_flops_per_cell: int = 0  # ... sliding-window layers


@record(frozen=True)
class SpeedLayout:
    """A placement as the speed model reads it: each device's load and the CPU's."""

    devices: tuple[HomeLoad, ...]
    cpu: HomeLoad
    device_names: tuple[str, ...]
    n_expert: int
    n_expert_used: int
    n_swa: int  # the sliding window (0: none)
    n_cells: int  # KV cells per sequence's stream: the most a token can see
    n_ubatch: int  # the ubatch llama.cpp runs (-ub, at most -b)
    offload_to: int | None  # the device that runs host weights' big-batch ops (None: none)
    # home changes along one forward pass (each block's other weights, then its experts, then
    # the output layer): each is a copy of the activations and a wait; a calibration's cost
    n_hops: int = 0
    n_blocks: int = 0  # the model's blocks (a fixed time per block: core/prior.py)
    routing_exponent: float = 1.0  # the router's a (core/routing.py; 1.0: uniform)
    n_threads: int | None = None  # -t (None: the physical cores; core/threads.py)
    # GGML_OP_OFFLOAD_MIN_BATCH: an op on host weights whose batch reaches it is offloaded
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH

    def offloads(self, batch: int) -> bool:
        """Whether an op of ``batch`` on host weights runs on ``offload_to`` (its weights
        copied over the link), not on the CPU."""
        return self.offload_to is not None and batch >= self.op_offload_min_batch

    def touched(self, n_tokens: int) -> float:
        """The expected share of a block's routed experts that ``n_tokens`` tokens touch."""
        return touched_share(self.n_expert_used, self.n_expert, n_tokens, self.routing_exponent)


@record(frozen=True)
class Traffic:
    """What one ubatch moves and computes; bytes and FLOPs."""

    n_tokens: int
    device_weight_bytes: tuple[float, ...]  # each device's own weights read
    device_kv_bytes: tuple[float, ...]  # each device's KV cache (and recurrent state) read
    link_bytes: tuple[float, ...]  # host weights copied over each device's host link
    ram_weight_bytes: float  # weights the CPU reads from RAM
    ram_kv_bytes: float  # the CPU layers' KV cache read
    device_flops: tuple[float, ...]  # its own layers' and the host weights' ops it runs
    cpu_flops: float

    @property
    def device_memory_bytes(self) -> tuple[float, ...]:
        """Each device's memory reads: its weights, its cache and the copies it received."""
        return tuple(
            w + kv + link
            for w, kv, link in zip(
                self.device_weight_bytes, self.device_kv_bytes, self.link_bytes, strict=True
            )
        )

    @property
    def ram_bytes(self) -> float:
        return self.ram_weight_bytes + self.ram_kv_bytes

    def __add__(self, other: object) -> Traffic:
        assert isinstance(other, Traffic)
        return Traffic(
            n_tokens=self.n_tokens + other.n_tokens,
            device_weight_bytes=_plus(self.device_weight_bytes, other.device_weight_bytes),
            device_kv_bytes=_plus(self.device_kv_bytes, other.device_kv_bytes),
            link_bytes=_plus(self.link_bytes, other.link_bytes),
            ram_weight_bytes=self.ram_weight_bytes + other.ram_weight_bytes,
            ram_kv_bytes=self.ram_kv_bytes + other.ram_kv_bytes,
            device_flops=_plus(self.device_flops, other.device_flops),
            cpu_flops=self.cpu_flops + other.cpu_flops,
        )


def _plus(a: Sequence[float], b: Sequence[float]) -> tuple[float, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


# --- the layout of a placement ------------------------------------------------------------------


def _params(tensor: TensorFacts) -> int:
    return prod(tensor.shape) if tensor.shape else 0


def _add_tensor(parts: dict[str, int], tensor: TensorFacts) -> None:
    """Count ``tensor`` into the parts of its home (the output layer, routed-expert matrices
    and biases, everything else of a block)."""
    if tensor.layer is None:
        if tensor.role not in (Role.OUTPUT, Role.OUTPUT_NORM):
            return  # token_embd: one row per token; RoPE factors: a few KiB
        kind = "head"
    elif tensor.role is Role.EXPERTS:
        kind = "expert" if len(tensor.shape) >= 3 else "expert_bias"
    else:
        kind = "dense"
    parts[f"{kind}_bytes"] += tensor.nbytes or 0
    parts[f"{kind}_params"] += _params(tensor)


def _add_cache(parts: dict[str, int], facts: ModelFacts, settings: Settings, il: int) -> None:
    """Count block ``il``'s cache and attention into the parts of its home."""
    dims = facts.dims
    cache = cache_for(facts, settings)
    parts["state_bytes"] += state_bytes(dims, il)
    layer = cache.layers[il]
    if not layer.n_cells:
        return
    cell = layer.kv_bytes // (layer.n_cells * cache.n_stream)  # rows: cells x streams
    flops = 2 * dims.n_head[il] * (dims.head_k[layer.is_swa] + dims.head_v[layer.is_swa])
    bytes_key, flops_key = (
        ("swa_cell_bytes", "swa_flops_per_cell")
        if layer.is_swa
        else ("kv_cell_bytes", "attn_flops_per_cell")
    )
    parts[bytes_key] += cell
    parts[flops_key] += flops


def _hops(facts: ModelFacts, weights: WeightSplit) -> int:
    """Home changes along one forward pass: block by block, its other weights' home, then its
    routed experts' (where the first tensor of each is), then the output layer's."""
    blocks: dict[int, dict[bool, int]] = {}
    for tensor, home in zip(facts.tensors, weights.tensor_homes(facts.tensors), strict=True):
        if home != SKIPPED and tensor.layer is not None:
            blocks.setdefault(tensor.layer, {}).setdefault(tensor.role is Role.EXPERTS, home)
    order = [home for il in sorted(blocks) for _, home in sorted(blocks[il].items())]
    order.append(weights.homes[-1])
    return sum(a != b for a, b in pairwise(order))


Weighed = dict[int, dict[str, int]]  # each home's tensor parts (HomeLoad's fields)


def _weighed(facts: ModelFacts, weights: WeightSplit, n_devices: int) -> tuple[Weighed, int]:
    """Each home's tensor parts under ``weights``, and the hops along a forward pass; the
    last few are kept (the frontier forecasts one split at every ubatch)."""
    key = (id(facts), weights, n_devices)
    found = _WEIGHED.get(key)
    if found is not None and found[0] is facts:
        return found[1], found[2]
    names = [f.name for f in fields(HomeLoad)]
    homes: Weighed = {i: dict.fromkeys(names, 0) for i in (*range(n_devices), CPU)}
    for tensor, home in zip(facts.tensors, weights.tensor_homes(facts.tensors), strict=True):
        if home != SKIPPED:
            _add_tensor(homes[home], tensor)
    hops = _hops(facts, weights)
    _WEIGHED[key] = (facts, homes, hops)
    while len(_WEIGHED) > 64:
        _WEIGHED.pop(next(iter(_WEIGHED)))
    return homes, hops


_WEIGHED: dict[tuple[int, WeightSplit, int], tuple[ModelFacts, Weighed, int]] = {}


def layout_of(
    facts: ModelFacts,
    weights: WeightSplit,
    settings: Settings,
    devices: Sequence[DeviceSpec],
    *,
    op_offload: bool = True,
) -> SpeedLayout:
    """The speed model's view of ``weights`` (a split over ``devices``) at ``settings``;
    ``op_offload=False`` is ``--no-op-offload``."""
    weighed, hops = _weighed(facts, weights, len(devices))
    homes = {home: dict(parts) for home, parts in weighed.items()}
    for il in range(facts.n_layers):
        home = weights.homes[il]
        if home != SKIPPED:
            _add_cache(homes[home], facts, settings, il)
    cache = cache_for(facts, settings)
    offloading = [i for i, device in enumerate(devices) if rules(device.kind).op_offload]
    run = run_params(settings.n_ctx, settings.n_ubatch, settings.n_batch, 1, None)
    return SpeedLayout(
        devices=tuple(HomeLoad(**homes[i]) for i in range(len(devices))),
        cpu=HomeLoad(**homes[CPU]),
        device_names=tuple(device.name for device in devices),
        n_expert=facts.n_experts,
        n_expert_used=facts.n_experts_used,
        n_swa=facts.dims.n_swa,
        n_cells=cache.n_ctx_seq,
        n_ubatch=run.n_ubatch,
        offload_to=offloading[0] if op_offload and offloading else None,
        n_hops=hops,
        n_blocks=facts.n_layers,
        routing_exponent=routing_exponent(facts.architecture),
        op_offload_min_batch=settings.offload_min_batch,
    )


def op_offload_of(pass_through: Sequence[str]) -> bool:
    """Whether llama-server offloads host weights' ops: the last ``--op-offload`` or
    ``--no-op-offload`` among its arguments (on by default)."""
    found = [p.key for p in pairs(pass_through) if p.is_("--op-offload")]
    return not found or found[-1] == "--op-offload"


def placement_layout(
    facts: ModelFacts,
    placement: Placement,
    settings: Settings,
    devices: Sequence[DeviceSpec],
    *,
    op_offload: bool = True,
) -> SpeedLayout:
    """``layout_of`` for a placement, split over ``devices`` as the memory model splits it."""
    weights = weights_on(facts, placement, devices)
    return layout_of(facts, weights, settings, devices, op_offload=op_offload)


# --- traffic ------------------------------------------------------------------------------------


def _cells_seen(depth: int, n_tokens: int, window: int) -> float:
    """Cells the ubatch's tokens see, summed over them: token ``t`` (1..n) at position
    ``depth + t - 1`` sees ``min(depth + t, window)``."""
    full = min(max(window - depth, 0), n_tokens)  # tokens that see every cell before them
    return full * depth + full * (full + 1) / 2 + (n_tokens - full) * window


def _own_weights(
    layout: SpeedLayout, load: HomeLoad, n_tokens: int, n_outputs: int
) -> tuple[float, float]:
    """(bytes read, FLOPs) of ``load``'s weights computing a ubatch where they are."""
    touched = layout.touched(n_tokens)
    share = layout.touched(1)
    read = (
        load.dense_bytes
        + (load.head_bytes if n_outputs else 0)
        + touched * (load.expert_bytes + load.expert_bias_bytes)
    )
    params = (
        load.dense_params * n_tokens
        + load.head_params * n_outputs
        + share * (load.expert_params + load.expert_bias_params) * n_tokens
    )
    return read, 2 * params


def _own_cache(
    layout: SpeedLayout, load: HomeLoad, n_tokens: int, depth: int
) -> tuple[float, float]:
    """(bytes read, FLOPs) of ``load``'s cache and attention over a ubatch at ``depth``."""
    window = layout.n_swa or layout.n_cells
    cells = min(depth + n_tokens, layout.n_cells)
    swa_cells = min(depth + n_tokens, window + n_tokens - 1, layout.n_cells)
    read = load.kv_cell_bytes * cells + load.swa_cell_bytes * swa_cells + load.state_bytes
    flops = load.attn_flops_per_cell * _cells_seen(
        depth, n_tokens, layout.n_cells
    ) + load.swa_flops_per_cell * _cells_seen(depth, n_tokens, window)
    return read, flops


def _seqs_cache(
    layout: SpeedLayout, load: HomeLoad, n_tokens: int, depth: int, n_seqs: int
) -> tuple[float, float]:
    """``_own_cache`` of a ubatch whose ``n_tokens`` tokens are of ``n_seqs`` sequences, each
    at ``depth`` with its own cells: each sequence's share read from its own cache."""
    if n_seqs <= 1:
        return _own_cache(layout, load, n_tokens, depth)
    read, flops = _own_cache(layout, load, n_tokens // n_seqs, depth)
    return n_seqs * read, n_seqs * flops


def ubatch_traffic(
    layout: SpeedLayout, n_tokens: int, depth: int = 0, n_outputs: int = 0, *, n_seqs: int = 1
) -> Traffic:
    """One ubatch of ``n_tokens`` tokens after ``depth`` cached ones, ``n_outputs`` of them
    with logits; ``n_seqs``: its tokens are of that many sequences (concurrent streams), each
    after ``depth`` cached ones of its own (the weights are read once for all of them)."""
    n = len(layout.devices)
    weights, kv, flops = [0.0] * n, [0.0] * n, [0.0] * n
    for i, load in enumerate(layout.devices):
        weights[i], weight_flops = _own_weights(layout, load, n_tokens, n_outputs)
        kv[i], attention = _seqs_cache(layout, load, n_tokens, depth, n_seqs)
        flops[i] = weight_flops + attention
    link = [0.0] * n
    cpu = layout.cpu
    touched, share = layout.touched(n_tokens), layout.touched(1)
    head = cpu.head_bytes if n_outputs else 0
    # the CPU's weights by op: (its batch, bytes the op reads, bytes a copy moves, FLOPs)
    ops = (
        (n_tokens, cpu.dense_bytes, cpu.dense_bytes, 2 * cpu.dense_params * n_tokens),
        (n_outputs, head, head, 2 * cpu.head_params * n_outputs),
        (
            n_tokens,
            touched * cpu.expert_bytes,
            touched * cpu.expert_bytes,
            2 * share * cpu.expert_params * n_tokens,
        ),
        (
            layout.n_expert_used * n_tokens,
            touched * cpu.expert_bias_bytes,
            cpu.expert_bias_bytes,
            2 * share * cpu.expert_bias_params * n_tokens,
        ),
    )
    ram_weights = cpu_flops = 0.0
    target = layout.offload_to
    for batch, read, copied, op_flops in ops:
        if target is not None and layout.offloads(batch):
            link[target] += copied
            flops[target] += op_flops
        else:
            ram_weights += read
            cpu_flops += op_flops
    ram_kv, attention = _seqs_cache(layout, cpu, n_tokens, depth, n_seqs)
    return Traffic(
        n_tokens=n_tokens,
        device_weight_bytes=tuple(weights),
        device_kv_bytes=tuple(kv),
        link_bytes=tuple(link),
        ram_weight_bytes=ram_weights,
        ram_kv_bytes=ram_kv,
        device_flops=tuple(flops),
        cpu_flops=cpu_flops + attention,
    )


def token_traffic(layout: SpeedLayout, depth: int = 0) -> Traffic:
    """One generated token at ``depth``: a ubatch of one token with its logits."""
    return ubatch_traffic(layout, 1, depth, n_outputs=1)


def streams_traffic(layout: SpeedLayout, n_streams: int, depth: int = 0) -> Traffic:
    """One decode step of ``n_streams`` concurrent streams, each at ``depth``: llama-server
    puts one token of each slot into one ubatch of ``n_streams`` tokens, each with its logits
    (the touched share at ``U = n_streams``; from the op-offload threshold on, the CPU's
    weights copied over the host link)."""
    return ubatch_traffic(layout, n_streams, depth, n_outputs=n_streams, n_seqs=n_streams)


def prompt_traffic(layout: SpeedLayout, n_prompt: int, depth: int = 0) -> Traffic:
    """A prompt of ``n_prompt`` tokens after ``depth`` cached ones, in ubatches of the
    layout's size; the last token gets logits."""
    total: Traffic | None = None
    done = 0
    while done < n_prompt:
        n = min(layout.n_ubatch, n_prompt - done)
        last = done + n >= n_prompt
        one = ubatch_traffic(layout, n, depth + done, n_outputs=1 if last else 0)
        total = one if total is None else total + one
        done += n
    return total if total is not None else ubatch_traffic(layout, 0, depth)


# --- time from figures --------------------------------------------------------------------------


def _positive_or_none(record: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(record, name)
        require(record, name, value is None or value > 0, "positive or unknown")


@record(frozen=True, kw_only=True)
class DeviceFigures:
    """One device's figures; None where unknown."""

    memory_bytes_per_s: float | None = None
    link_bytes_per_s: float | None = None  # PCIe; an RPC device: its network
    flops_per_s: float | None = None

    def __post_init__(self) -> None:
        _positive_or_none(self, ("memory_bytes_per_s", "link_bytes_per_s", "flops_per_s"))


@record(frozen=True, kw_only=True)
class MachineFigures:
    """What the time of each term comes from: one entry per device, in the plan's order."""

    devices: tuple[DeviceFigures, ...]
    ram_bytes_per_s: float | None = None
    cpu_flops_per_s: float | None = None
    # the thread term (core/threads.py): the physical cores (what the RAM and CPU figures are
    # the rate of), and the share of the RAM figure one thread reads (None: typical)
    physical_cores: int | None = field(default=None, metadata=OMIT_EMPTY)
    ram_single_thread_share: float | None = field(default=None, metadata=OMIT_EMPTY)
    # where each figure came from (core/figures.py); none: the figures' callers did not say
    sources: tuple[FigureSource, ...] = field(default=(), metadata=HIDDEN)

    def __post_init__(self) -> None:
        _positive_or_none(self, ("ram_bytes_per_s", "cpu_flops_per_s", "physical_cores"))
        share = self.ram_single_thread_share
        require(self, "ram_single_thread_share", share is None or 0 < share <= 1, "in (0, 1]")

    def ram_share(self, layout: SpeedLayout) -> float:
        """The share of the RAM figure ``layout``'s threads read at (core/threads.py)."""
        return ram_thread_share(layout.n_threads, self.physical_cores, self.ram_single_thread_share)

    def cpu_share(self, layout: SpeedLayout) -> float:
        """The share of the CPU FLOP/s ``layout``'s threads reach (core/threads.py)."""
        return cpu_thread_share(layout.n_threads, self.physical_cores)

    def without(self, provenance: Provenance) -> MachineFigures:
        """These figures with those of ``provenance`` unknown (a calibration fits an
        effective rate for an assumed figure rather than a share of it)."""
        drop = [s for s in self.sources if s.provenance == provenance]
        if not drop:
            return self
        names = {"memory": "memory_bytes_per_s", "link": "link_bytes_per_s", "flops": "flops_per_s"}
        devices = list(self.devices)
        ram, cpu = self.ram_bytes_per_s, self.cpu_flops_per_s
        for source in drop:
            if source.quantity == "ram":
                ram = None
            elif source.quantity == "cpu":
                cpu = None
            elif source.device is not None and source.device < len(devices):
                devices[source.device] = replace(
                    devices[source.device], **{names[source.quantity]: None}
                )
        kept = tuple(s for s in self.sources if s.provenance != provenance)
        # the rest as they are (the cores and the single-thread share: the thread term's)
        return replace(
            self, devices=tuple(devices), ram_bytes_per_s=ram, cpu_flops_per_s=cpu, sources=kept
        )


@record(frozen=True, kw_only=True)
class Efficiency:
    """The share of each figure a term reaches (0 < factor <= 1), fitted by calibration on
    ``points`` measurements; 1.0 each and no points: uncalibrated."""

    device_memory: float = 1.0
    ram: float = 1.0
    link: float = 1.0
    device_compute: float = 1.0
    cpu_compute: float = 1.0
    points: int = 0

    def __post_init__(self) -> None:
        for name in ("device_memory", "ram", "link", "device_compute", "cpu_compute"):
            require(self, name, 0 < getattr(self, name) <= 1, "in (0, 1]")
        require(self, "points", self.points >= 0, "0 or more")


# "overhead": a calibration's fixed time per token or per ubatch (core/calibrate.py)
Kind = Literal["device_memory", "ram", "link", "device_compute", "cpu_compute", "overhead"]


@record(kw_only=True)
class TermTime:
    """One term: what it moves (bytes) or computes (FLOPs), and its time."""

    term: str  # "CUDA0 memory", "RAM", "CUDA0 link", "CUDA0 compute", "CPU compute"
    kind: Kind
    amount: float
    seconds: float | None  # None: its figure is unknown
    figure: str  # the figure it needs
    # the share of its figure the term's threads reach (core/threads.py; 1.0: all of it): a
    # fitted rate of a figure missing is divided by it too
    share: float = field(default=1.0, metadata=HIDDEN)


@record(frozen=True, kw_only=True)
class ForecastCalibration:
    """What a forecast rests on: no points (``uncalibrated``), or the points of a fit and its
    leave-one-out error (relative, of tok/s; None: too few points to leave one out):
    ``own_points`` of the model forecast, the rest of ``other_models`` (measured on the same
    machine: core/calibrate.py)."""

    points: int = 0
    median_error: float | None = None
    max_error: float | None = None
    own_points: int = 0
    other_models: tuple[str, ...] = ()  # their file names
    # a fit not used (core/noise.py): its points disagree, its leave-one-out median error
    # beyond the bound; the forecast is uncalibrated
    refused_points: int = field(default=0, metadata=OMIT_EMPTY)
    refused_error: float | None = field(default=None, metadata=OMIT_EMPTY)

    @property
    def label(self) -> str:
        """``uncalibrated``, ``calibrated on 6 points, leave-one-out error 8.1 % (max 14 %)``,
        ``calibrated on 12 points (8 of this model, 4 of 1 other model), ...``; ``not
        calibrated: its 10 points disagree (leave-one-out error 50 %, bound 25 %)``."""
        if self.refused_error is not None:
            return (
                f"not calibrated: its {self.refused_points} measured points disagree "
                f"({loo_text(self.refused_error)})"
            )
        if not self.points:
            return UNCALIBRATED
        text = f"calibrated on {self.points} points"
        if self.other_models:
            n = len(self.other_models)
            others = f"{n} other model{'s' if n > 1 else ''}"
            if self.own_points:
                rest = self.points - self.own_points
                text += f" ({self.own_points} of this model, {rest} of {others})"
            else:
                text += f" of {others}"
        if self.median_error is None or self.max_error is None:
            return text + ", too few to leave one out"
        return (
            f"{text}, leave-one-out error {self.median_error:.1%} (max {self.max_error:.0%})"
        ).replace("%", " %")


@record(kw_only=True)
class Forecast:
    """Decode tok/s at a depth and prefill tok/s for a prompt, with the terms behind them."""

    decode_tok_s: float | None
    prefill_tok_s: float | None
    depth: int
    n_prompt: int
    n_ubatch: int
    decode_terms: list[TermTime]  # one generated token
    prefill_terms: list[TermTime]  # the whole prompt
    missing: list[str]  # the figures it lacks
    calibration: ForecastCalibration = ForecastCalibration()
    # the figures its terms used, with where each came from (core/figures.py)
    figures: list[FigureSource] = field(default_factory=list, metadata=OMIT_EMPTY)
    # uncalibrated: the typical relative error of tok/s (core/prior.py UNCALIBRATED_ERROR)
    expected_error: float | None = field(default=None, metadata=OMIT_EMPTY)
    # --parallel N: the decode of N concurrent streams (0: one stream, not asked for), each
    # stream's tok/s (``decode_tok_s``) and all of theirs together (N times it)
    streams: int = field(default=0, metadata=OMIT_EMPTY)
    decode_tps_per_stream: float | None = field(default=None, metadata=OMIT_EMPTY)
    decode_tps_aggregate: float | None = field(default=None, metadata=OMIT_EMPTY)

    def with_decode(self, decode_tok_s: float | None, **changes: Any) -> Forecast:
        """This forecast with ``decode_tok_s`` (one stream's) and the rates of its streams
        derived from it, and ``changes``."""
        found = replace(self, decode_tok_s=decode_tok_s, **changes)
        if not found.streams:
            return found
        aggregate = None if decode_tok_s is None else decode_tok_s * found.streams
        return replace(found, decode_tps_per_stream=decode_tok_s, decode_tps_aggregate=aggregate)


def _term(
    term: str, kind: Kind, amount: float, figure: str, rate: float | None, *, share: float = 1.0
) -> TermTime:
    seconds = 0.0 if amount <= 0 else None if rate is None else amount / (rate * share)
    return TermTime(
        term=term, kind=kind, amount=amount, seconds=seconds, figure=figure, share=share
    )


def _memory_terms(
    layout: SpeedLayout, traffic: Traffic, machine: MachineFigures, eff: Efficiency
) -> list[TermTime]:
    terms = []
    for name, amount, figures in zip(
        layout.device_names, traffic.device_memory_bytes, machine.devices, strict=True
    ):
        rate = figures.memory_bytes_per_s
        terms.append(
            _term(
                f"{name} memory",
                "device_memory",
                amount,
                f"{name} memory bandwidth",
                rate * eff.device_memory if rate else None,
            )
        )
    ram = machine.ram_bytes_per_s
    share = machine.ram_share(layout)
    terms.append(
        _term(
            "RAM",
            "ram",
            traffic.ram_bytes,
            "RAM bandwidth",
            ram * eff.ram if ram else None,
            share=share,
        )
    )
    return terms


def _prompt_terms(
    layout: SpeedLayout, traffic: Traffic, machine: MachineFigures, eff: Efficiency
) -> list[TermTime]:
    terms = _memory_terms(layout, traffic, machine, eff)
    for name, link, flops, figures in zip(
        layout.device_names, traffic.link_bytes, traffic.device_flops, machine.devices, strict=True
    ):
        rate = figures.link_bytes_per_s
        terms.append(
            _term(
                f"{name} link",
                "link",
                link,
                f"{name} host link bandwidth",
                rate * eff.link if rate else None,
            )
        )
        rate = figures.flops_per_s
        terms.append(
            _term(
                f"{name} compute",
                "device_compute",
                flops,
                f"{name} FLOP/s",
                rate * eff.device_compute if rate else None,
            )
        )
    cpu = machine.cpu_flops_per_s
    terms.append(
        _term(
            "CPU compute",
            "cpu_compute",
            traffic.cpu_flops,
            "CPU FLOP/s",
            cpu * eff.cpu_compute if cpu else None,
            share=machine.cpu_share(layout),
        )
    )
    return terms


def rate_of(n_tokens: int, terms: Sequence[TermTime]) -> float | None:
    times = [term.seconds for term in terms]
    if any(t is None for t in times):
        return None
    total = sum(t for t in times if t is not None)
    return n_tokens / total if total > 0 else None


def missing_figures(*terms: Sequence[TermTime]) -> list[str]:
    """The figures the terms lack (each once, in order)."""
    return list(dict.fromkeys(t.figure for part in terms for t in part if t.seconds is None))


def forecast(
    layout: SpeedLayout,
    machine: MachineFigures,
    *,
    depth: int = 0,
    n_prompt: int = 512,
    prefill_depth: int | None = None,
    efficiency: Efficiency | None = None,
    streams: int | None = None,
) -> Forecast:
    """Decode tok/s of a token at ``depth``, prefill tok/s of an ``n_prompt``-token prompt
    after ``prefill_depth`` cached ones (default: ``depth``; ubatch: the layout's), from
    ``machine``'s figures; ``streams`` (``--parallel N``): the decode of that many concurrent
    streams, each at ``depth`` (``decode_tok_s`` one stream's; None: one, not asked for)."""
    if len(machine.devices) != len(layout.devices):
        raise ValueError(
            f"figures for {len(machine.devices)} devices, the layout has {len(layout.devices)}"
        )
    eff = efficiency or Efficiency()
    decode = decode_terms(layout, machine, eff, depth=depth, streams=streams or 1)
    before = depth if prefill_depth is None else prefill_depth
    prefill = _prompt_terms(layout, prompt_traffic(layout, n_prompt, before), machine, eff)
    missing = missing_figures(decode, prefill)
    return Forecast(
        decode_tok_s=None,
        prefill_tok_s=rate_of(n_prompt, prefill),
        depth=depth,
        n_prompt=n_prompt,
        n_ubatch=layout.n_ubatch,
        decode_terms=decode,
        prefill_terms=prefill,
        missing=missing,
        calibration=ForecastCalibration(points=eff.points, own_points=eff.points),
        figures=used_sources(machine, decode, prefill),
        streams=streams or 0,
    ).with_decode(rate_of(1, decode))


def decode_terms(
    layout: SpeedLayout,
    machine: MachineFigures,
    eff: Efficiency,
    *,
    depth: int = 0,
    streams: int = 1,
) -> list[TermTime]:
    """The terms of one decode step of ``streams`` concurrent streams at ``depth`` (each
    stream gets one token of it). One stream: the memory reads alone (a token's compute runs
    under its reads). Several: one ubatch of that many tokens (``streams_traffic``), its reads,
    its host links (from the op-offload threshold on, the CPU's weights are copied) and the
    compute of the streams beyond the first (the first's runs under the reads, as one
    stream's does): the same terms at one stream, growing with the streams."""
    if streams <= 1:
        return _memory_terms(layout, token_traffic(layout, depth), machine, eff)
    traffic = streams_traffic(layout, streams, depth)
    beyond = (streams - 1) / streams
    traffic = replace(
        traffic,
        device_flops=tuple(f * beyond for f in traffic.device_flops),
        cpu_flops=traffic.cpu_flops * beyond,
    )
    return _prompt_terms(layout, traffic, machine, eff)


def used_sources(machine: MachineFigures, *terms: Sequence[TermTime]) -> list[FigureSource]:
    """The sources of the figures the terms used (a term that moves or computes something)."""
    used = {t.figure for part in terms for t in part if t.amount > 0}
    return [s for s in machine.sources if s.figure in used]
