"""Pure planning over a device list (one device is a list of one): the placement that keeps
every device within its budget, the context trade-off, the floor.

Two placements are planned, each device within its own budget (checked on each device, which
llama.cpp's ``--fit`` does not do):
- ``--n-cpu-moe N`` (with ``-ts`` on several devices): the smallest N, applied as llama.cpp
  applies it (the FIRST N block indices, leading dense blocks included, which have no experts
  and so waste part of N), for which the layers can be split so that each device fits. The
  split is found front to back: device 0 takes as many layers as fit (``-ts`` values are layer
  counts, so the split is exact), then device 1, and the last device takes the rest and the
  output layer;
- an ``-ot`` plan, its split and each expert part's home (``gate``, ``up``, ``gate_up``,
  ``down`` of each block: on its block's device, another device, or the CPU) chosen together.
  At a split, each device in turn is filled to its budget before the next: its own blocks'
  experts whole (front first, or back first: which blocks are on the CPU moves the compute
  buffer's peak), then single parts of them, then what the devices before it left on the CPU
  (the previous device's last block first: ``--fit`` overflows ``ffn_down`` of a block to the
  next device, common/fit.cpp LAYER_FRACTION_GATE) and then the model's last blocks; the
  estimate then checks every device (one that ends over gives back what it took last, room
  left takes more). Every position of each boundary of the split is tried in turn (a layer
  moved between devices moves its attention, norms and KV cache, which decides the room left
  for experts), until a pass over the boundaries changes nothing. The placement with the most
  expert bytes on the devices wins; between two that keep the same bytes, the one whose token
  crosses between homes (devices, CPU) fewer times, then the one with more layers on the
  first devices. This reaches where ``--fit`` puts the experts (full blocks first on each
  device, a block split with its ``ffn_down`` or ``gate``/``down`` on the next device or the
  CPU, the rest of its blocks' experts on the CPU; ``--fit`` moves the block's router and
  shared expert with them, moetune keeps those on the block's device) and more (parts of any
  block on any device). Leading dense blocks are never counted.
Routers, shared experts, norms and attention always stay on the devices.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import NamedTuple

from moetune.core.devices import DeviceSpec, bufts, single_device
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate_from_split, pipeline_parallel
from moetune.core.placement import (
    ALL_LAYERS,
    CPU,
    EXPS_REGEX,
    SKIPPED,
    Override,
    Placement,
    WeightSplit,
    split_weights,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.roles import Role
from moetune.record import record
from moetune.units import format_bytes

DEFAULT_HEADROOM_BYTES = 1536 * 1024**2  # 1.5 GiB: the seeds' "1-2 GB under the card's size"
CTX_STEP = 256  # llama.cpp pads n_ctx to 256 cells
CTX_MAX_UNSTATED = 131072  # what --ctx max tries at most when a model states no training context


@record(frozen=True)
class OffloadPlan:
    """One way to place the model, with its estimate."""

    placement: Placement
    memory: MemoryEstimate
    moved_layers: tuple[int, ...]  # blocks whose experts are all on the CPU
    partial_layer: int | None = None  # block with only some expert tensors on the CPU
    partial_parts: tuple[str, ...] = ()  # which parts of it are on the CPU


Parts = dict[int, dict[str, list[TensorFacts]]]


def _expert_parts(facts: ModelFacts) -> Parts:
    """Each block's routed-expert tensors by part (up, gate, down, gate_up)."""
    parts: Parts = defaultdict(lambda: defaultdict(list))
    for tensor in facts.tensors:
        if tensor.role is Role.EXPERTS and tensor.layer is not None and tensor.expert_part:
            parts[tensor.layer][tensor.expert_part].append(tensor)
    return parts


def _nbytes(tensors: Sequence[TensorFacts]) -> int:
    return sum(t.nbytes or 0 for t in tensors)


def _block_experts(parts: Parts, blocks: Sequence[int]) -> list[TensorFacts]:
    return [t for block in blocks for tensors in parts[block].values() for t in tensors]


def n_cpu_moe_split(facts: ModelFacts, base: WeightSplit, n: int) -> WeightSplit:
    """The weight split of ``--n-cpu-moe n`` without regexes (tests check it against them)."""
    return base.move_experts(_block_experts(_expert_parts_of(facts), moved_blocks(facts, n)))


def _expert_parts_of(facts: ModelFacts) -> Parts:
    """``_expert_parts``, computed once per model."""
    found = _PARTS.get(id(facts))
    if found is None or found[0] is not facts:
        found = (facts, _expert_parts(facts))
        _PARTS[id(facts)] = found
        while len(_PARTS) > 8:
            _PARTS.pop(next(iter(_PARTS)))
    return found[1]


_PARTS: dict[int, tuple[ModelFacts, Parts]] = {}


def layer_set_regex(layers: Sequence[int]) -> str:
    """A compact, comma-free regex matching exactly these block indices: ``(3|4|1[0-9])``."""
    remaining = sorted(set(layers))
    parts: list[str] = []
    tens: dict[int, list[int]] = defaultdict(list)
    for index in remaining:
        tens[index // 10].append(index % 10)
    for ten, units in sorted(tens.items()):
        prefix = str(ten) if ten else ""
        if len(units) == 1:
            parts.append(f"{prefix}{units[0]}")
        elif units == list(range(units[0], units[-1] + 1)):
            parts.append(f"{prefix}[{units[0]}-{units[-1]}]")
        else:
            parts.append(f"{prefix}[{''.join(map(str, units))}]")
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def ot_rules(
    moved: Sequence[int], partial: int | None, parts: Sequence[str]
) -> tuple[Override, ...]:
    rules: list[Override] = []
    if moved:
        rules.append(Override(f"blk\\.{layer_set_regex(moved)}{EXPS_REGEX}"))
    if partial is not None and parts:
        alternation = "|".join(parts)
        rules.append(Override(f"blk\\.{partial}\\.ffn_({alternation})_(ch|)exps"))
    return tuple(rules)


@record(frozen=True)
class DeviceBudgets:
    """The devices a plan is for, in llama.cpp's order, and the peak each may reach."""

    devices: tuple[DeviceSpec, ...]
    budgets: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.devices)

    def over(self, memory: MemoryEstimate, upto: int | None = None) -> list[int]:
        """The devices (among the first ``upto``) whose predicted peak is over budget."""
        count = self.n if upto is None else upto
        return [i for i in range(count) if memory.devices[i].total_bytes > self.budgets[i]]

    def fits(self, memory: MemoryEstimate, upto: int | None = None) -> bool:
        return not self.over(memory, upto)

    def describe(self) -> str:
        """``in 12 GiB of GPU memory`` (one device), ``on RPC0 12 GiB, RPC1 8 GiB``."""
        if self.n == 1:
            return f"in {format_bytes(self.budgets[0])} of GPU memory"
        return "on " + ", ".join(
            f"{d.name} {format_bytes(b)}" for d, b in zip(self.devices, self.budgets, strict=True)
        )

    @property
    def bufts(self) -> tuple[str, ...]:
        """The devices' buffer types, for the ``-ot`` rules that name them."""
        return bufts(self.devices)

    def with_budgets(self, budgets: Sequence[int]) -> DeviceBudgets:
        return DeviceBudgets(self.devices, tuple(budgets))

    @classmethod
    def one(cls, budget_bytes: int, settings: Settings) -> DeviceBudgets:
        """The one device ``settings`` describes (its kind, overhead, correction)."""
        return cls(single_device(settings), (budget_bytes,))


def counts_split(counts: Sequence[int]) -> tuple[float, ...]:
    """``-ts`` values that put exactly ``counts[i]`` layers (the output layer last) on device i
    (none on one device: it takes them all)."""
    return tuple(float(c) for c in counts) if len(counts) > 1 else ()


def moved_blocks(facts: ModelFacts, n: int) -> list[int]:
    """The blocks whose experts ``--n-cpu-moe n`` puts on the CPU (its first n, with experts)."""
    return [layer.index for layer in facts.layers[:n] if layer.has_experts]


class _Search:
    """Estimates for one model, target and settings, with the weight splits they start from."""

    def __init__(
        self,
        facts: ModelFacts,
        target: DeviceBudgets,
        settings: Settings,
        n_gpu_layers: int = ALL_LAYERS,
        *,
        extras: Extras | None = None,
    ) -> None:
        self.facts, self.target, self.settings = facts, target, settings
        self.extras = extras
        self.n_gpu_layers = n_gpu_layers
        self.parts: Parts = _expert_parts_of(facts)
        self._bases: dict[tuple[int, ...], WeightSplit] = {}
        # the estimates of -ot packings tried: a split and each slot's home, in slot order
        self.packed: dict[tuple[tuple[int, ...], tuple[tuple[Slot, int], ...]], MemoryEstimate] = {}

    def base(self, counts: tuple[int, ...]) -> WeightSplit:
        found = self._bases.get(counts)
        if found is None:
            placement = Placement(self.n_gpu_layers, tensor_split=counts_split(counts))
            found = split_weights(self.facts, placement, self.target.n)
            self._bases[counts] = found
        return found

    def memory(self, weights: WeightSplit, overridden: bool) -> MemoryEstimate:
        pipeline = pipeline_parallel(weights, overridden)
        return estimate_from_split(
            self.facts,
            weights,
            self.settings,
            self.target.devices,
            pipeline=pipeline,
            extras=self.extras,
        )

    def with_cpu_blocks(self, counts: tuple[int, ...], blocks: Sequence[int]) -> WeightSplit:
        return self.base(counts).move_experts(_block_experts(self.parts, blocks))

    @property
    def total_layers(self) -> int:
        """The layers offloaded, which -ts splits: the blocks and the output layer (-ngl K:
        the last K of them)."""
        return min(self.n_gpu_layers, self.facts.n_layers + 1)


def largest(
    low: int, high: int, ok: Callable[[int], bool], *, top_first: bool = False
) -> int | None:
    """The largest value in [low, high] for which ``ok`` holds (``ok`` true up to a point).
    ``top_first``: ``high`` is tried first (one call where it holds: where it often does)."""
    if top_first and ok(high):
        return high
    if not ok(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if ok(mid) else (low, mid - 1)
    return low


Distribution = tuple[tuple[int, ...], MemoryEstimate]  # layer counts per device, the estimate


def distribute(
    search: _Search, cpu_blocks: Sequence[int], overridden: bool, best_effort: bool = False
) -> Distribution | None:
    """Layer counts per device, front to back, each device taking as many as fit; None when
    the last device cannot hold what is left (``best_effort``: the split all the same)."""
    n, total = search.target.n, search.total_layers
    counts: list[int] = []
    for i in range(n - 1):
        start = sum(counts)

        def fits_upto(c: int, i: int = i, start: int = start) -> bool:
            trial = (*counts, c, total - start - c, *([0] * (n - i - 2)))
            weights = search.with_cpu_blocks(trial, cpu_blocks)
            return search.target.fits(search.memory(weights, overridden), upto=i + 1)

        best = largest(0, total - start, fits_upto)
        if best is None and not best_effort:
            return None
        counts.append(best or 0)
    counts.append(total - sum(counts))
    final = tuple(counts)
    memory = search.memory(search.with_cpu_blocks(final, cpu_blocks), overridden)
    return (final, memory) if best_effort or search.target.fits(memory) else None


def plan_n_cpu_moe(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    *,
    extras: Extras | None = None,
    over: int | None = None,
) -> OffloadPlan:
    """``--n-cpu-moe N`` (``-ts`` on several devices): the smallest N whose layers can be
    split so that every device fits. The search starts from a guess (``over``: an N likely
    not to fit, the plan's own N at a larger ubatch, say; else the N the weights point to,
    ``_weights_guess``) and gallops from it, up where it does not fit (N+1, N+2, N+4, ...)
    and down where it does, then bisects the last step: a few estimates where a bisection of
    the whole range takes one per halving of every block."""
    search = _Search(facts, target, settings, extras=extras)
    tried: dict[int, Distribution | None] = {}

    def at(n: int) -> Distribution | None:  # each N once: the bisection and the steps meet
        if n not in tried:
            tried[n] = distribute(search, moved_blocks(facts, n), overridden=n > 0)
        return tried[n]

    n_max = facts.n_layers if facts.is_moe else 0
    if over is None and n_max > 0:
        top = at(n_max)
        if top is None:
            raise does_not_fit(facts, target, settings, extras=extras)
        over = _weights_guess(search, top[1], n_max)
    if over is not None and over < n_max and at(over) is None:
        low, step = over, 1
        while low + step < n_max and at(low + step) is None:
            low, step = low + step, step * 2
        high = min(low + step, n_max)
    elif over is not None and over < n_max:  # it fits: down from it
        high, step = over, 1
        while high - step >= 0 and at(high - step) is not None:
            high, step = high - step, step * 2
        low = max(high - step, -1)
    else:
        low, high = -1, n_max
    if at(high) is None:
        raise does_not_fit(facts, target, settings, extras=extras)
    n = high - (largest(0, high - low - 1, lambda k: at(high - k) is not None) or 0)
    while n > 0 and at(n - 1) is not None:  # not monotone everywhere: step down while it fits
        n -= 1
    found = at(n)
    assert found is not None
    counts, memory = found
    placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    return OffloadPlan(placement, memory, tuple(moved_blocks(facts, n)))


def _weights_guess(search: _Search, top: MemoryEstimate, n_max: int) -> int:
    """The N the weights alone point to: from every expert on the CPU (``top``), the experts
    of the last blocks brought back while the devices' room left lasts (a device's cache and
    compute buffer change little with N)."""
    room = sum(
        budget - device.total_bytes
        for budget, device in zip(search.target.budgets, top.devices, strict=False)
    )
    n = n_max
    while n > 0:
        block = search.facts.layers[n - 1]
        parts = search.parts.get(block.index, {}) if block.has_experts else {}
        size = sum(_nbytes(tensors) for tensors in parts.values())
        if size > room:
            break
        room -= size
        n -= 1
    return n


Slot = tuple[int, str]  # one part (gate, up, gate_up, down) of one block's routed experts
PART_ORDER = ("gate", "up", "gate_up", "down")  # the order a block runs them in
ROUNDS = 3  # passes over the boundaries of the split (each one scanned whole)


class _Slots:
    """The routed-expert parts an ``-ot`` plan places (NextN blocks are not loaded, dense
    blocks have none), with their sizes."""

    def __init__(self, search: _Search) -> None:
        self.blocks = sorted(search.parts)
        self.parts = {
            block: tuple(p for p in PART_ORDER if p in search.parts[block]) for block in self.blocks
        }
        self.size = {
            (block, part): _nbytes(search.parts[block][part])
            for block in self.blocks
            for part in self.parts[block]
        }

    def of(self, block: int) -> list[Slot]:
        return [(block, part) for part in self.parts[block]]


Where = dict[Slot, int]  # each slot's home: a device, or CPU


class _Packed(NamedTuple):
    """A checked ``-ot`` packing: the split, each slot's home, the estimate, the crossings."""

    counts: tuple[int, ...]
    where: tuple[tuple[Slot, int], ...]
    memory: MemoryEstimate
    crossings: int

    def key(self) -> tuple[int, int, tuple[int, ...]]:
        """More expert bytes on the devices first, then fewer device crossings per token,
        then more layers on the first devices (a tie broken the same way from any start)."""
        return (self.memory.gpu_expert_bytes, -self.crossings, self.counts)


def _placed(search: _Search, counts: tuple[int, ...], where: Where) -> WeightSplit:
    """The weight split of ``counts`` with every slot at its home in ``where``."""
    weights = search.base(counts)
    moved: dict[int, list[TensorFacts]] = defaultdict(list)
    for (block, part), home in where.items():
        if home != weights.homes[block]:
            moved[home].extend(search.parts[block][part])
    for home in sorted(moved):
        weights = weights.move_experts(moved[home], home)
    return weights


def _memory_of(search: _Search, counts: tuple[int, ...], where: Where) -> MemoryEstimate:
    key = (counts, tuple(where.items()))
    found = search.packed.get(key)
    if found is None:  # both orders of a split start from the same floor and the same full
        weights = _placed(search, counts, where)
        found = search.packed[key] = search.memory(weights, overridden=bool(weights.moves))
    return found


def crossings(facts: ModelFacts, homes: Sequence[int], where: Where) -> int:
    """Home changes along one token's pass: each block's other weights, then its expert parts
    in the order they run (``where``: their homes), then the output layer."""
    parts: dict[int, list[int]] = defaultdict(list)
    for (block, _), home in where.items():  # in the order the parts run
        parts[block].append(home)
    seq: list[int] = []
    for block in range(facts.n_layers):
        if homes[block] == SKIPPED:
            continue
        seq.append(homes[block])
        seq.extend(parts.get(block, ()))
    seq.append(homes[-1])
    return sum(a != b for a, b in pairwise(seq))


def _greedy(
    slots: _Slots, homes: Sequence[int], rooms: list[int], where: Where, order: int
) -> list[list[Slot]]:
    """Fill each device in turn up to its room (bytes alone): its own blocks' experts whole
    (front first, or ``order`` -1: back first), then single parts of them, then what other
    devices left on the CPU (the previous devices' last blocks first, then the model's last
    blocks), whole then in parts, largest first. Returns what each device took, in order."""
    taken: list[list[Slot]] = [[] for _ in rooms]

    def take(device: int, group: Sequence[Slot]) -> None:
        size = sum(slots.size[s] for s in group)
        if group and size <= rooms[device]:
            for slot in group:
                where[slot] = device
            rooms[device] -= size
            taken[device].extend(group)

    for device in range(len(rooms)):
        own = [b for b in slots.blocks if homes[b] == device][::order]
        others = sorted(
            (b for b in slots.blocks if homes[b] != device),
            key=lambda b: (homes[b] > device, abs(homes[b] - device), -b),
        )
        for blocks in (own, others):
            for block in blocks:
                if all(where[s] == CPU for s in slots.of(block)):
                    take(device, slots.of(block))
            for block in blocks:
                for slot in sorted(slots.of(block), key=lambda s: -slots.size[s]):
                    if where[slot] == CPU:
                        take(device, [slot])
    return taken


def _top_up(slots: _Slots, rooms: list[int], where: Where) -> bool:
    """Any part still on the CPU that fits a device's room, largest first; True if any."""
    left = sorted((s for s, h in where.items() if h == CPU), key=lambda s: (-slots.size[s], s))
    moved = False
    for device, room in enumerate(rooms):
        left_here = room
        for slot in left:
            if where[slot] == CPU and slots.size[slot] <= left_here:
                where[slot], left_here, moved = device, left_here - slots.size[slot], True
    return moved


def _pack(search: _Search, slots: _Slots, counts: tuple[int, ...], order: int) -> _Packed | None:
    """The packing of ``counts``: filled by bytes from the estimate with every expert on the
    CPU, then checked by the estimate itself; a device that ends over gives back what it took
    last, room left takes more. None when even the floor of this split does not fit."""
    homes = search.base(counts).homes
    target = search.target
    floor_where = dict.fromkeys(slots.size, CPU)
    floor = _memory_of(search, counts, floor_where)
    if not target.fits(floor):
        return None
    rooms = _rooms(target, floor)
    if sum(slots.size.values()) <= sum(rooms) + floor.gpu_compute_bytes:
        home_where = {slot: homes[slot[0]] for slot in slots.size}
        full = _memory_of(search, counts, home_where)  # nothing moved: no rule at all
        if target.fits(full):
            return _Packed(
                counts, tuple(home_where.items()), full, crossings(search.facts, homes, {})
            )
    where = dict(floor_where)
    taken = _greedy(slots, homes, rooms, where, order)
    memory = _memory_of(search, counts, where)
    for _ in range(4):
        over = target.over(memory)
        if not over:
            break
        for device in over:
            excess = memory.devices[device].total_bytes - target.budgets[device]
            while excess > 0 and taken[device]:
                slot = taken[device].pop()
                where[slot] = CPU
                excess -= slots.size[slot]
        memory = _memory_of(search, counts, where)
    if not target.fits(memory):
        where, memory = floor_where, floor
    more = dict(where)
    if _top_up(slots, _rooms(target, memory), more):
        trial = _memory_of(search, counts, more)
        if target.fits(trial):
            where, memory = more, trial
    return _Packed(counts, tuple(where.items()), memory, crossings(search.facts, homes, where))


def _rooms(target: DeviceBudgets, memory: MemoryEstimate) -> list[int]:
    return [b - d.total_bytes for b, d in zip(target.budgets, memory.devices, strict=True)]


def _boundary_moves(counts: tuple[int, ...], boundary: int) -> list[tuple[int, ...]]:
    """Every split that moves layers across ``boundary`` (between its device and the next),
    nearest to ``counts`` first; the last device keeps at least the output layer."""
    pair = counts[boundary] + counts[boundary + 1]
    last = boundary + 1 == len(counts) - 1
    options = sorted(range(pair - last + 1), key=lambda c: (abs(c - counts[boundary]), c))
    moves = []
    for c in options:
        moved = list(counts)
        moved[boundary], moved[boundary + 1] = c, pair - c
        moves.append(tuple(moved))
    return moves


def _best_pack(search: _Search, start: tuple[int, ...]) -> _Packed | None:
    """The best packing over the splits: from ``start``, each boundary in turn is scanned
    over every position (the others held) and the best taken, until a pass changes nothing."""
    slots = _Slots(search)
    found: dict[tuple[int, ...], _Packed | None] = {}

    def at(counts: tuple[int, ...]) -> _Packed | None:
        if counts not in found:
            packs = [p for order in (1, -1) if (p := _pack(search, slots, counts, order))]
            found[counts] = max(packs, key=_Packed.key, default=None)
        return found[counts]

    best = at(start)
    for _ in range(ROUNDS if search.target.n > 1 else 0):
        before = best
        for boundary in range(search.target.n - 1):
            for counts in _boundary_moves(best.counts if best else start, boundary):
                trial = at(counts)
                if trial is not None and (best is None or trial.key() > best.key()):
                    best = trial
        if best is before:
            break
    return best


def pack_rules(packed: _Packed, homes: Sequence[int]) -> tuple[Override, ...]:
    """The ``-ot`` rules of a packing: experts to other devices first (whole blocks in one
    rule per device, parts per block), then to the CPU (the same way); the first match wins,
    and each tensor matches one rule."""
    parts_of: dict[int, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    count: dict[int, int] = defaultdict(int)
    for (block, part), home in packed.where:
        count[block] += 1
        if home != homes[block]:
            parts_of[block][home].append(part)
    rules: list[Override] = []
    for target in [*sorted({h for by in parts_of.values() for h in by if h != CPU}), CPU]:
        moved = {b: len(by.get(target, ())) for b, by in parts_of.items()}
        whole = [b for b, k in moved.items() if k == count[b]]
        some = [(b, parts_of[b][target]) for b, k in moved.items() if 0 < k < count[b]]
        if whole:
            rules.append(Override(f"blk\\.{layer_set_regex(whole)}{EXPS_REGEX}", target))
        for block, parts in sorted(some):
            rules.append(Override(f"blk\\.{block}\\.ffn_({'|'.join(parts)})_(ch|)exps", target))
    return tuple(rules)


def plan_override(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    counts: tuple[int, ...] | None = None,
    *,
    extras: Extras | None = None,
) -> OffloadPlan:
    """``-ot`` (``-ts`` on several devices): the split and each expert part's home chosen
    together. At a split, each device in turn is filled to its budget: its own blocks'
    experts whole, then parts of them, then what the devices before it left on the CPU
    (``ffn_down`` of the previous device's last block, as ``--fit`` overflows it) and the
    model's last blocks; the estimate checks each device. Every position of each boundary
    of the split is tried, from ``counts`` (default: the ``--n-cpu-moe`` plan's split); the
    most expert bytes on the devices win, then the fewest device crossings per token."""
    search = _Search(facts, target, settings, extras=extras)
    if counts is None:
        counts = (
            (search.total_layers,)
            if target.n == 1
            else _split_of(facts, target, settings, extras=extras)
        )
    best = _best_pack(search, counts)
    if best is None:
        raise does_not_fit(facts, target, settings, extras=extras)
    homes = search.base(best.counts).homes
    where = dict(best.where)
    slots = _Slots(search)
    cpu_blocks = tuple(b for b in slots.blocks if all(where[s] == CPU for s in slots.of(b)))
    partial = next(
        (
            (b, tuple(p for p in slots.parts[b] if where[(b, p)] == CPU))
            for b in slots.blocks
            if b not in cpu_blocks and any(where[s] == CPU for s in slots.of(b))
        ),
        (None, ()),
    )
    placement = Placement(overrides=pack_rules(best, homes), tensor_split=counts_split(best.counts))
    return OffloadPlan(placement, best.memory, cpu_blocks, partial[0], partial[1])


def override_beside(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    main: OffloadPlan,
    *,
    extras: Extras | None = None,
) -> OffloadPlan | None:
    """The ``-ot`` plan from the split of ``main`` (the ``--n-cpu-moe`` plan) where it keeps
    more weights on the devices than ``main``; None where it keeps nothing more (a tie keeps
    the simpler form) or does not fit."""
    counts = tuple(int(c) for c in main.placement.tensor_split) or None
    try:
        alt = plan_override(facts, target, settings, counts, extras=extras)
    except DoesNotFitError:
        return None
    return alt if alt.memory.gpu_weights_bytes > main.memory.gpu_weights_bytes else None


def _split_of(
    facts: ModelFacts, target: DeviceBudgets, settings: Settings, *, extras: Extras | None = None
) -> tuple[int, ...]:
    """The split of the ``--n-cpu-moe`` plan."""
    found = plan_n_cpu_moe(facts, target, settings, extras=extras).placement.tensor_split
    return tuple(int(c) for c in found)


def fixed_split(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    n: int,
    n_gpu_layers: int = ALL_LAYERS,
    *,
    extras: Extras | None = None,
) -> OffloadPlan:
    """``--n-cpu-moe n`` (``-ngl n_gpu_layers``) at the split that gives every device its
    largest share front to back (in proportion to the budgets when none fits)."""
    if n > facts.n_layers:
        raise BadValueError(
            f"--n-cpu-moe {n}: the model has {facts.n_layers} blocks",
            hint=f"use 0 to {facts.n_layers}",
        )
    search = _Search(facts, target, settings, n_gpu_layers, extras=extras)
    blocks = moved_blocks(facts, n)
    found = distribute(search, blocks, overridden=n > 0)
    counts = found[0] if found else even_split(search.total_layers, target)
    weights = search.with_cpu_blocks(counts, blocks)
    placement = Placement.with_n_cpu_moe(n, n_gpu_layers, tensor_split=counts_split(counts))
    return OffloadPlan(placement, search.memory(weights, n > 0), tuple(blocks))


def even_split(total: int, target: DeviceBudgets) -> tuple[int, ...]:
    """``total`` layers in proportion to the budgets (what to show when no split fits)."""
    weights = [max(b, 1) for b in target.budgets]
    counts = [total * w // sum(weights) for w in weights]
    counts[-1] += total - sum(counts)
    return tuple(counts)


def ctx_max_limit(facts: ModelFacts) -> int:
    """The largest context ``--ctx max`` tries: the training context (else CTX_MAX_UNSTATED),
    down to a multiple of CTX_STEP."""
    limit = facts.context_length or CTX_MAX_UNSTATED
    return max(limit // CTX_STEP, 1) * CTX_STEP


def ctx_max_stop(facts: ModelFacts, n_ctx: int) -> str | None:
    """What ``--ctx max`` says when it stopped at its limit rather than at the budget (more
    may fit): where it stopped, and how to go past it; None when the budget stopped it."""
    if n_ctx < ctx_max_limit(facts):
        return None
    where = (
        f"the training context, {n_ctx} tokens"
        if facts.context_length
        else f"{n_ctx} tokens, the most it tries when the model states no training context"
    )
    return (
        f"--ctx max stopped at {where}; more may fit: give --ctx N above it to plan past it "
        "(quality may drop unless the model uses RoPE scaling)"
    )


def max_context(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    n_cpu_moe: int | None = None,
    *,
    extras: Extras | None = None,
) -> tuple[int, tuple[int, ...]] | None:
    """The largest context (a multiple of 256, up to the training context) at which the
    layers can be split to fit, at ``--n-cpu-moe n_cpu_moe`` (default: the floor, every
    expert on the CPU; a dense model: -ngl 0), with the split found there."""
    limit = ctx_max_limit(facts)
    floor = n_cpu_moe is None
    n = facts.n_layers if floor else n_cpu_moe or 0
    ngl = 0 if floor and not facts.is_moe else ALL_LAYERS
    blocks = moved_blocks(facts, n)
    found: dict[int, tuple[int, ...]] = {}

    def fits(steps: int) -> bool:
        trial = replace(settings, n_ctx=steps * CTX_STEP)
        search = _Search(facts, target, trial, ngl, extras=extras)
        result = distribute(search, blocks, overridden=bool(blocks))
        if result is not None:
            found[steps] = result[0]
        return result is not None

    # the training context often fits: tried first, it ends the search at once
    best = largest(1, max(limit // CTX_STEP, 1), fits, top_first=True)
    return None if best is None else (best * CTX_STEP, found[best])


def plan_layers(
    facts: ModelFacts, target: DeviceBudgets, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """Classic layer offload (dense models, or the bench's comparison): the largest -ngl K
    whose K layers can be split to fit."""
    for ngl in range(facts.n_layers + 1, -1, -1):
        found = distribute(
            _Search(facts, target, settings, ngl, extras=extras), [], overridden=False
        )
        if found is not None:
            counts, memory = found
            return OffloadPlan(Placement(ngl, tensor_split=counts_split(counts)), memory, ())
    raise does_not_fit(facts, target, settings, extras=extras)


def floor_plan(
    facts: ModelFacts, target: DeviceBudgets, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """What needs the least device memory: every expert on the CPU (a dense model: -ngl 0),
    at the split that fits best."""
    if facts.is_moe:
        return fixed_split(facts, target, settings, facts.n_layers, extras=extras)
    found = distribute(
        _Search(facts, target, settings, 0, extras=extras), [], False, best_effort=True
    )
    assert found is not None
    return OffloadPlan(Placement(n_gpu_layers=0), found[1], ())


def does_not_fit(
    facts: ModelFacts, target: DeviceBudgets, settings: Settings, *, extras: Extras | None = None
) -> DoesNotFitError:
    """The error for budgets no placement fits, with what would fit instead (computed)."""
    floor = floor_plan(facts, target, settings, extras=extras).memory
    needs = [format_bytes(d.total_bytes) for d in floor.devices]
    if target.n == 1:
        hints = [f"even with every expert on the CPU the GPU needs {needs[0]}"]
    else:
        names = (f"{d.name} {need}" for d, need in zip(target.devices, needs, strict=True))
        hints = [f"even with every expert on the CPU the devices need {', '.join(names)}"]
    hints += [fit.text for fit in context_fits(facts, target, settings, extras=extras)] or [
        "a smaller quant of the model (or a bigger GPU) is needed"
    ]
    return DoesNotFitError(
        f"does not fit {target.describe()} at -c {settings.n_ctx}", hint="; ".join(hints)
    )


@record(frozen=True)
class ContextFit:
    """The largest context that fits the budget with every expert on the CPU, at a cache type."""

    n_ctx: int
    cache_type: str

    @property
    def text(self) -> str:
        return f"the largest context that fits at {self.cache_type} is -c {self.n_ctx}"


def context_fits(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    n_cpu_moe: int | None = None,
    *,
    extras: Extras | None = None,
) -> list[ContextFit]:
    """The largest contexts that fit at the settings' cache type, and at q4_0 (when that is
    another type and gives more), at the floor (or at ``--n-cpu-moe n_cpu_moe``)."""
    found: list[ContextFit] = []
    for cache in dict.fromkeys((settings.type_k, "q4_0")):
        trial = replace(settings, type_k=cache, type_v=cache)
        try:
            context = max_context(facts, target, trial, n_cpu_moe, extras=extras)
        except BadValueError:  # e.g. a head size q4_0 blocks do not divide
            context = None
        best = context[0] if context else None
        if best is not None and (not found or best > found[-1].n_ctx):
            found.append(ContextFit(best, cache))
    return found


def check_context(value: int) -> int:
    if value <= 0:
        raise BadValueError(f"context must be positive, got {value}")
    return value
