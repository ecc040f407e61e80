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
- an ``-ot`` plan that keeps at least as much on the devices: at the same split each device
  moves the fewest of its own experts to the CPU, its LAST blocks first (as ``--fit`` moves
  them) or its first blocks first (which blocks are on the CPU moves the compute buffer's
  peak), whichever keeps more; the boundary block may be split (only ``down`` on the CPU, else
  ``gate`` and ``down``: the order ``--fit`` tries, common/fit.cpp LAYER_FRACTION_GATE/UP);
  then the room left on any device takes experts back from the CPU
  (``-ot ...=<its buffer type>``). Leading dense blocks are never counted.
Routers, shared experts, norms and attention always stay on the devices.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from moetune.core.devices import DeviceSpec, bufts, single_device
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate_from_split, pipeline_parallel
from moetune.core.placement import (
    ALL_LAYERS,
    EXPS_REGEX,
    Override,
    Placement,
    WeightSplit,
    split_weights,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.roles import Role
from moetune.units import format_bytes

DEFAULT_HEADROOM_BYTES = 1536 * 1024**2  # 1.5 GiB: the seeds' "1-2 GB under the card's size"
CTX_STEP = 256  # llama.cpp pads n_ctx to 256 cells
CTX_MAX_UNSTATED = 131072  # what --ctx max tries at most when a model states no training context


class OffloadPlan(NamedTuple):
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


def _partial_options(parts: dict[str, list[TensorFacts]]) -> list[tuple[str, ...]]:
    """Which parts of the boundary block may go to the CPU, best (least moved) first."""
    if "gate_up" in parts:
        return [("down",)]
    return [("down",), ("gate", "down")]


class DeviceBudgets(NamedTuple):
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
        # an -ot fill's weights and estimate, by (counts, fill): the fill search asks the
        # same one again for each block it weighs against the room left
        self._fills: dict[tuple[tuple[int, ...], _Fill], tuple[WeightSplit, MemoryEstimate]] = {}

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

    def fill(self, counts: tuple[int, ...], fill: _Fill) -> tuple[WeightSplit, MemoryEstimate]:
        """The weights and the estimate of an -ot ``fill`` at the split ``counts``."""
        key = (counts, fill)
        found = self._fills.get(key)
        if found is None:
            weights = _fill_weights(self, counts, fill)
            found = self._fills[key] = (weights, self.memory(weights, overridden=True))
        return found

    @property
    def total_layers(self) -> int:
        """The layers offloaded, which -ts splits: the blocks and the output layer (-ngl K:
        the last K of them)."""
        return min(self.n_gpu_layers, self.facts.n_layers + 1)


def _largest(
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

        best = _largest(0, total - start, fits_upto)
        if best is None and not best_effort:
            return None
        counts.append(best or 0)
    counts.append(total - sum(counts))
    final = tuple(counts)
    memory = search.memory(search.with_cpu_blocks(final, cpu_blocks), overridden)
    return (final, memory) if best_effort or search.target.fits(memory) else None


def plan_n_cpu_moe(
    facts: ModelFacts, target: DeviceBudgets, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """``--n-cpu-moe N`` (``-ts`` on several devices): the smallest N whose layers can be
    split so that every device fits."""
    search = _Search(facts, target, settings, extras=extras)

    def at(n: int) -> tuple[tuple[int, ...], MemoryEstimate] | None:
        return distribute(search, moved_blocks(facts, n), overridden=n > 0)

    n_max = facts.n_layers if facts.is_moe else 0
    if at(n_max) is None:
        raise does_not_fit(facts, target, settings, extras=extras)
    n = n_max - (_largest(0, n_max, lambda k: at(n_max - k) is not None) or 0)
    while n > 0 and at(n - 1) is not None:  # not monotone everywhere: step down while it fits
        n -= 1
    found = at(n)
    assert found is not None
    counts, memory = found
    placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    return OffloadPlan(placement, memory, tuple(moved_blocks(facts, n)))


class _Fill(NamedTuple):
    """Where each block's experts are in an ``-ot`` plan: on the CPU (whole, or some parts),
    or on another device than the block's."""

    cpu_blocks: tuple[int, ...]
    partial: tuple[tuple[int, tuple[str, ...]], ...]  # (block, parts on the CPU)
    # (block, device, parts) for experts on another device than the block's (parts () = all)
    elsewhere: tuple[tuple[int, int, tuple[str, ...]], ...]


def _fill_weights(search: _Search, counts: tuple[int, ...], fill: _Fill) -> WeightSplit:
    weights = search.with_cpu_blocks(counts, fill.cpu_blocks)
    for block, parts in fill.partial:
        weights = weights.move_experts([t for p in parts for t in search.parts[block].get(p, [])])
    for block, device, parts in fill.elsewhere:
        tensors = (
            [t for p in parts for t in search.parts[block].get(p, [])]
            if parts
            else (_block_experts(search.parts, [block]))
        )
        weights = weights.move_experts(tensors, device)
    return weights


def _keep_on_device(
    search: _Search, counts: tuple[int, ...], device: int, fill: _Fill, both_orders: bool = True
) -> _Fill:
    """Move the fewest of ``device``'s own experts to the CPU for it to fit: its last blocks
    first (as ``--fit`` moves them) or (``both_orders``) its first blocks first (the compute
    buffer's peak moves with them), the boundary block split; whichever keeps more on it."""
    homes = search.base(counts).homes
    own = [
        b
        for b in reversed(range(search.facts.n_layers))
        if homes[b] == device and search.facts.layers[b].has_experts
    ]
    options = [_keep_in_order(search, counts, device, fill, own)]
    if both_orders:
        options.append(_keep_in_order(search, counts, device, fill, own[::-1]))
    return max(options, key=lambda f: search.fill(counts, f)[0].device_bytes[device])


def _keep_in_order(
    search: _Search, counts: tuple[int, ...], device: int, fill: _Fill, order: Sequence[int]
) -> _Fill:
    """``_keep_on_device`` moving the blocks of ``order`` to the CPU, in that order."""
    others = tuple(b for b in fill.cpu_blocks if b not in order)

    def trial(k: int, partial: tuple[tuple[int, tuple[str, ...]], ...] = ()) -> _Fill:
        return fill._replace(cpu_blocks=(*others, *order[:k]), partial=(*fill.partial, *partial))

    def fits(candidate: _Fill) -> bool:  # this device and those before it
        return search.target.fits(search.fill(counts, candidate)[1], upto=device + 1)

    n = len(order)
    k = n - (_largest(0, n, lambda j: fits(trial(n - j))) or 0)
    if k == 0 or not fits(trial(k)):
        return trial(k)
    boundary = order[k - 1]
    for option in _partial_options(search.parts[boundary]):
        candidate = trial(k - 1, ((boundary, option),))
        if fits(candidate):
            return candidate
    return trial(k)


def _use_room(search: _Search, counts: tuple[int, ...], fill: _Fill) -> _Fill:
    """Devices with room left take experts from the CPU: whole blocks, last blocks first,
    then single parts (``down``, ``gate``, ``up``) of what is still there. Only what is no
    bigger than the room left is tried."""
    for device in range(search.target.n):
        for block in sorted(fill.cpu_blocks, reverse=True):
            nbytes = _nbytes(_block_experts(search.parts, [block]))
            if nbytes > _room(search, counts, fill, device):
                continue
            moved = fill._replace(
                cpu_blocks=tuple(b for b in fill.cpu_blocks if b != block),
                elsewhere=(*fill.elsewhere, (block, device, ())),
            )
            if _fits(search, counts, moved):
                fill = moved
        taken = {(b, p) for b, _, parts in fill.elsewhere for p in parts}
        for block in sorted(fill.cpu_blocks, reverse=True):
            for part in ("down", "gate", "up", "gate_up"):
                if part not in search.parts[block] or (block, part) in taken:
                    continue
                if _nbytes(search.parts[block][part]) > _room(search, counts, fill, device):
                    continue
                moved = fill._replace(elsewhere=(*fill.elsewhere, (block, device, (part,))))
                if _fits(search, counts, moved):
                    fill = moved
                    taken.add((block, part))
    return fill


def _room(search: _Search, counts: tuple[int, ...], fill: _Fill, device: int) -> int:
    """What ``device`` has left under its budget with ``fill``."""
    memory = search.fill(counts, fill)[1]
    return search.target.budgets[device] - memory.devices[device].total_bytes


def _fits(search: _Search, counts: tuple[int, ...], fill: _Fill) -> bool:
    return search.target.fits(search.fill(counts, fill)[1])


def fill_rules(fill: _Fill) -> tuple[Override, ...]:
    """The ``-ot`` rules of a fill: experts to other devices first (first match wins), then
    whole blocks and parts to the CPU."""
    rules: list[Override] = []
    by_device: dict[int, list[int]] = {}
    some: dict[tuple[int, int], list[str]] = {}  # (block, device): the parts it takes
    for block, device, parts in fill.elsewhere:
        if parts:
            some.setdefault((block, device), []).extend(parts)
        else:
            by_device.setdefault(device, []).append(block)
    for (block, device), taken in some.items():
        pattern = f"blk\\.{block}\\.ffn_({'|'.join(taken)})_(ch|)exps"
        rules.append(Override(pattern, device))
    for device, blocks in sorted(by_device.items()):
        rules.append(Override(f"blk\\.{layer_set_regex(blocks)}{EXPS_REGEX}", device))
    rules.extend(ot_rules(fill.cpu_blocks, None, ()))
    for block, parts in fill.partial:
        rules.extend(ot_rules((), block, parts))
    return tuple(rules)


SHIFTS = (0, 1, -1, 2, -2)  # layers moved between neighbouring devices, tried in turn


def _shifted(counts: tuple[int, ...], boundary: int, shift: int) -> tuple[int, ...] | None:
    """``counts`` with ``shift`` layers moved from device ``boundary`` + 1 to ``boundary``."""
    moved = list(counts)
    moved[boundary] += shift
    moved[boundary + 1] -= shift
    return tuple(moved) if min(moved) >= 0 and moved[-1] > 0 else None


def _fill_at(
    search: _Search, counts: tuple[int, ...], both_orders: bool
) -> tuple[_Fill, MemoryEstimate]:
    fill = _Fill((), (), ())
    for device in range(search.target.n):
        fill = _keep_on_device(search, counts, device, fill, both_orders)
    fill = _use_room(search, counts, fill)
    return fill, search.fill(counts, fill)[1]


def plan_override(
    facts: ModelFacts,
    target: DeviceBudgets,
    settings: Settings,
    counts: tuple[int, ...] | None = None,
    *,
    extras: Extras | None = None,
) -> OffloadPlan:
    """``-ot`` (``-ts`` on several devices): at the split ``counts`` (default: the one the
    ``--n-cpu-moe`` plan finds) (and at splits a few layers either side
    of each boundary: a part of an expert block is the grain of what fits, so where the
    boundaries fall decides what room is left), each device keeps all of its own experts
    that fit and room left anywhere takes experts from the CPU; the split that keeps the
    most expert bytes on the devices wins."""
    search = _Search(facts, target, settings, extras=extras)
    if counts is None:
        counts = (
            (search.total_layers,)
            if target.n == 1
            else _split_of(facts, target, settings, extras=extras)
        )
    best: tuple[int, tuple[int, ...], _Fill, MemoryEstimate] | None = None
    candidates = [counts] + [
        c
        for b in range(target.n - 1)
        for s in SHIFTS[1:]
        if (c := _shifted(counts, b, s)) is not None
    ]
    for trial in candidates:
        fill, memory = _fill_at(search, trial, both_orders=trial == counts)
        if target.fits(memory) and (best is None or memory.gpu_expert_bytes > best[0]):
            best = (memory.gpu_expert_bytes, trial, fill, memory)
    if best is None:
        raise does_not_fit(facts, target, settings, extras=extras)
    _, counts, fill, memory = best
    placement = Placement(overrides=fill_rules(fill), tensor_split=counts_split(counts))
    partial = fill.partial[0] if fill.partial else (None, ())
    return OffloadPlan(placement, memory, fill.cpu_blocks, partial[0], partial[1])


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
        trial = settings.model_copy(update={"n_ctx": steps * CTX_STEP})
        search = _Search(facts, target, trial, ngl, extras=extras)
        result = distribute(search, blocks, overridden=bool(blocks))
        if result is not None:
            found[steps] = result[0]
        return result is not None

    # the training context often fits: tried first, it ends the search at once
    best = _largest(1, max(limit // CTX_STEP, 1), fits, top_first=True)
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


class ContextFit(NamedTuple):
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
        trial = settings.model_copy(update={"type_k": cache, "type_v": cache})
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
