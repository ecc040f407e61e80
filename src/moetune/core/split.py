"""Plans over several devices: the ``-ts`` split and where the experts go, with every device
within its own budget (checked on each device, which llama.cpp's ``--fit`` does not do).

Two plans, as on one device:
- ``-ts`` with ``--n-cpu-moe N``: the smallest N for which the layers can be split so that
  each device fits. The split is found front to back: device 0 takes as many layers as fit
  (``-ts`` values are layer counts, so the split is exact), then device 1, and the last
  device takes the rest and the output layer;
- ``-ts`` with ``-ot``: the same split, then each device keeps as many of its own layers'
  experts as fit (its last blocks go to the CPU first, the boundary block split), and the
  room left on any device takes experts from the CPU (``-ot ...=<its buffer type>``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from moetune.core.devices import DeviceSpec, bufts
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate_from_split, pipeline_parallel
from moetune.core.placement import (
    ALL_LAYERS,
    EXPS_REGEX,
    Override,
    Placement,
    WeightSplit,
    split_weights,
)
from moetune.core.planner import (
    OffloadPlan,
    Parts,
    _block_experts,
    _expert_parts_of,
    _nbytes,
    _partial_options,
    layer_set_regex,
)
from moetune.errors import DoesNotFitError
from moetune.units import format_bytes


class Target(NamedTuple):
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
        return ", ".join(
            f"{d.name} {format_bytes(b)}" for d, b in zip(self.devices, self.budgets, strict=True)
        )


def counts_split(counts: Sequence[int]) -> tuple[float, ...]:
    """``-ts`` values that put exactly ``counts[i]`` layers (the output layer last) on device i."""
    return tuple(float(c) for c in counts)


class _Search:
    """Estimates for one model, target and settings, with the weight splits they start from."""

    def __init__(
        self,
        facts: ModelFacts,
        target: Target,
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


def _largest(low: int, high: int, ok: Callable[[int], bool]) -> int | None:
    """The largest value in [low, high] for which ``ok`` holds (``ok`` true up to a point)."""
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


def plan_split(
    facts: ModelFacts, target: Target, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """``-ts`` with ``--n-cpu-moe N``: the smallest N whose layers can be split to fit."""
    search = _Search(facts, target, settings, extras=extras)

    def at(n: int) -> tuple[tuple[int, ...], MemoryEstimate] | None:
        blocks = [layer.index for layer in facts.layers[:n] if layer.has_experts]
        return distribute(search, blocks, overridden=n > 0)

    n_max = facts.n_layers if facts.is_moe else 0
    if at(n_max) is None:
        raise split_does_not_fit(facts, target, settings)
    n = n_max - (_largest(0, n_max, lambda k: at(n_max - k) is not None) or 0)
    while n > 0 and at(n - 1) is not None:  # not monotone everywhere: step down while it fits
        n -= 1
    found = at(n)
    assert found is not None
    counts, memory = found
    moved = tuple(layer.index for layer in facts.layers[:n] if layer.has_experts)
    placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    return OffloadPlan(placement, memory, moved)


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
    return max(options, key=lambda f: _fill_weights(search, counts, f).device_bytes[device])


def _keep_in_order(
    search: _Search, counts: tuple[int, ...], device: int, fill: _Fill, order: Sequence[int]
) -> _Fill:
    """``_keep_on_device`` moving the blocks of ``order`` to the CPU, in that order."""
    others = tuple(b for b in fill.cpu_blocks if b not in order)

    def trial(k: int, partial: tuple[tuple[int, tuple[str, ...]], ...] = ()) -> _Fill:
        return fill._replace(cpu_blocks=(*others, *order[:k]), partial=(*fill.partial, *partial))

    def fits(candidate: _Fill) -> bool:  # this device and those before it
        memory = search.memory(_fill_weights(search, counts, candidate), overridden=True)
        return search.target.fits(memory, upto=device + 1)

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
    memory = search.memory(_fill_weights(search, counts, fill), overridden=True)
    return search.target.budgets[device] - memory.devices[device].total_bytes


def _fits(search: _Search, counts: tuple[int, ...], fill: _Fill) -> bool:
    memory = search.memory(_fill_weights(search, counts, fill), overridden=True)
    return search.target.fits(memory)


def fill_rules(fill: _Fill, homes: Sequence[int]) -> tuple[Override, ...]:
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
    if fill.cpu_blocks:
        rules.append(Override(f"blk\\.{layer_set_regex(fill.cpu_blocks)}{EXPS_REGEX}"))
    for block, parts in fill.partial:
        rules.append(Override(f"blk\\.{block}\\.ffn_({'|'.join(parts)})_(ch|)exps"))
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
    return fill, search.memory(_fill_weights(search, counts, fill), overridden=True)


def plan_split_override(
    facts: ModelFacts,
    target: Target,
    settings: Settings,
    counts: tuple[int, ...],
    *,
    extras: Extras | None = None,
) -> OffloadPlan:
    """``-ts`` with ``-ot``: at the split ``counts`` (and at splits a few layers either side
    of each boundary: a part of an expert block is the grain of what fits, so where the
    boundaries fall decides what room is left), each device keeps all of its own experts
    that fit and room left anywhere takes experts from the CPU; the split that keeps the
    most expert bytes on the devices wins."""
    search = _Search(facts, target, settings, extras=extras)
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
        raise split_does_not_fit(facts, target, settings)
    _, counts, fill, memory = best
    weights = _fill_weights(search, counts, fill)
    placement = Placement(
        overrides=fill_rules(fill, weights.homes), tensor_split=counts_split(counts)
    )
    partial = fill.partial[0] if fill.partial else (None, ())
    return OffloadPlan(placement, memory, fill.cpu_blocks, partial[0], partial[1])


def split_max_context(
    facts: ModelFacts,
    target: Target,
    settings: Settings,
    n_cpu_moe: int | None = None,
    *,
    extras: Extras | None = None,
) -> tuple[int, tuple[int, ...]] | None:
    """The largest context (a multiple of 256, up to the training context) at which the
    layers can be split to fit, at ``--n-cpu-moe n_cpu_moe`` (default: every expert on the
    CPU), with the split found there."""
    limit = facts.context_length or 131072
    n = facts.n_layers if n_cpu_moe is None else n_cpu_moe
    blocks = [layer.index for layer in facts.layers[:n] if layer.has_experts]
    found: dict[int, tuple[int, ...]] = {}

    def fits(steps: int) -> bool:
        trial = settings.model_copy(update={"n_ctx": steps * 256})
        search = _Search(facts, target, trial, extras=extras)
        result = distribute(search, blocks, overridden=bool(blocks))
        if result is not None:
            found[steps] = result[0]
        return result is not None

    best = _largest(1, max(limit // 256, 1), fits)
    return None if best is None else (best * 256, found[best])


def split_does_not_fit(facts: ModelFacts, target: Target, settings: Settings) -> DoesNotFitError:
    """No split fits: the devices and their budgets, and what the floor needs."""
    return DoesNotFitError(
        f"does not fit on {target.describe()} at -c {settings.n_ctx}, even with every "
        "expert on the CPU",
        hint="lower --ctx, use --cache-type q4_0, add a device, or a smaller quant",
    )


def bufts_of(target: Target) -> tuple[str, ...]:
    """The devices' buffer types, for the ``-ot`` rules that name them."""
    return bufts(target.devices)


def split_layers(
    facts: ModelFacts, target: Target, settings: Settings, *, extras: Extras | None = None
) -> tuple[int, Distribution] | None:
    """Classic layer offload over several devices: the largest -ngl K whose K layers can be
    split to fit (None: not even one)."""
    for ngl in range(facts.n_layers + 1, 0, -1):
        search = _Search(facts, target, settings, ngl, extras=extras)
        found = distribute(search, [], overridden=False)
        if found is not None:
            return ngl, found
    return None
