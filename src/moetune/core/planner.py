"""Pure planning: the placement that fits a GPU budget, the context trade-off, RAM checks.

Two placements are planned for budget = target - headroom:
- ``--n-cpu-moe N``: the smallest N, applied as llama.cpp applies it (the FIRST N block
  indices, leading dense blocks included, which have no experts and so waste part of N);
- an ``-ot`` plan that keeps at least as much on the GPU: whole expert blocks go to the CPU
  from the LAST block backwards (as ``--fit`` moves them), leading dense blocks are never
  counted, and the boundary block may be split (only ``down`` on the CPU, else ``gate`` and
  ``down``: the order ``--fit`` tries, common/fit.cpp LAYER_FRACTION_GATE/UP). The same
  search from the first MoE block forwards is also tried, and the one that keeps more
  weights on the GPU wins: which blocks are on the CPU moves the compute buffer's peak.
Routers, shared experts, norms and attention always stay on the GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate, estimate_from_split
from moetune.core.placement import EXPS_REGEX, Override, Placement, WeightSplit, split_weights
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.roles import Role
from moetune.units import format_bytes

DEFAULT_HEADROOM_BYTES = 1536 * 1024**2  # 1.5 GiB: the seeds' "1-2 GB under the card's size"
CTX_STEP = 256  # llama.cpp pads n_ctx to 256 cells


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
    blocks = [layer.index for layer in facts.layers[:n] if layer.has_experts]
    return base.move_experts(_block_experts(_expert_parts_of(facts), blocks))


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


def predictor(
    facts: ModelFacts, settings: Settings, *, extras: Extras | None = None
) -> Callable[[int], int]:
    """The predicted GPU peak at ``--n-cpu-moe n``, as a function of n (memoised)."""
    base = split_weights(facts, Placement())
    cache: dict[int, int] = {}

    def predict(n: int) -> int:
        if n not in cache:
            weights = n_cpu_moe_split(facts, base, n)
            memory = estimate_from_split(facts, weights, settings, extras=extras)
            cache[n] = memory.gpu_bytes
        return cache[n]

    return predict


def plan_n_cpu_moe(
    facts: ModelFacts, budget_bytes: int, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """The smallest N for ``--n-cpu-moe N`` whose predicted GPU peak fits the budget."""
    base = split_weights(facts, Placement())
    for n in range(facts.n_layers + 1):
        weights = n_cpu_moe_split(facts, base, n)
        memory = estimate_from_split(facts, weights, settings, extras=extras)
        if memory.gpu_bytes <= budget_bytes:
            moved = tuple(layer.index for layer in facts.layers[:n] if layer.has_experts)
            return OffloadPlan(Placement.with_n_cpu_moe(n), memory, moved)
    raise does_not_fit(facts, budget_bytes, settings, extras=extras)


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


class _OverrideSearch(NamedTuple):
    facts: ModelFacts
    base: WeightSplit
    parts: Parts
    budget_bytes: int
    settings: Settings
    extras: Extras | None = None

    def memory(self, tensors: Sequence[TensorFacts]) -> MemoryEstimate:
        weights = self.base.move_experts(tensors)
        return estimate_from_split(self.facts, weights, self.settings, extras=self.extras)

    def run(self, order: Sequence[int]) -> OffloadPlan:
        for count in range(len(order) + 1):
            moved = list(order[:count])
            memory = self.memory(_block_experts(self.parts, moved))
            if memory.gpu_bytes <= self.budget_bytes:
                return self.refine(moved) or OffloadPlan(
                    Placement(overrides=ot_rules(moved, None, ())), memory, tuple(moved)
                )
        raise does_not_fit(self.facts, self.budget_bytes, self.settings, extras=self.extras)

    def refine(self, moved: list[int]) -> OffloadPlan | None:
        """Bring back part of the last block moved, if that still fits."""
        if not moved:
            return None
        boundary, rest = moved[-1], tuple(moved[:-1])
        for option in _partial_options(self.parts[boundary]):
            kept = [t for part in option for t in self.parts[boundary].get(part, [])]
            trial = self.memory(_block_experts(self.parts, rest) + kept)
            if trial.gpu_bytes <= self.budget_bytes:
                rules = ot_rules(rest, boundary, option)
                return OffloadPlan(Placement(overrides=rules), trial, rest, boundary, option)
        return None


def plan_override(
    facts: ModelFacts, budget_bytes: int, settings: Settings, *, extras: Extras | None = None
) -> OffloadPlan:
    """The ``-ot`` plan: experts of the last blocks to the CPU, the boundary block split."""
    base = split_weights(facts, Placement())
    parts = _expert_parts_of(facts)
    search = _OverrideSearch(facts, base, parts, budget_bytes, settings, extras)
    last_first = [layer.index for layer in reversed(facts.layers) if layer.has_experts]
    plan = search.run(last_first)
    # Which blocks sit on the CPU changes the compute buffer a little (the peak moves with
    # the graph), so moving the first blocks instead can keep more weights on the GPU.
    first = search.run(last_first[::-1])
    return first if first.memory.gpu_weights_bytes > plan.memory.gpu_weights_bytes else plan


def max_context(
    facts: ModelFacts,
    placement: Placement,
    budget_bytes: int,
    settings: Settings,
    *,
    extras: Extras | None = None,
) -> int | None:
    """The largest context (a multiple of 256, up to the training context) that fits."""
    weights = split_weights(facts, placement)
    limit = facts.context_length or 131072

    def fits(n_ctx: int) -> bool:
        trial = settings.model_copy(update={"n_ctx": n_ctx})
        return estimate_from_split(facts, weights, trial, extras=extras).gpu_bytes <= budget_bytes

    low, high = 1, max(limit // CTX_STEP, 1)
    if not fits(low * CTX_STEP):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid * CTX_STEP) else (low, mid - 1)
    return low * CTX_STEP


def plan_layers(
    facts: ModelFacts, budget_bytes: int, settings: Settings, *, extras: Extras | None = None
) -> tuple[int, MemoryEstimate]:
    """Classic layer offload (dense models, or the bench's comparison): the largest -ngl K."""
    for ngl in range(facts.n_layers + 1, -1, -1):
        memory = estimate(facts, Placement(n_gpu_layers=ngl), settings, extras=extras)
        if memory.gpu_bytes <= budget_bytes:
            return ngl, memory
    raise does_not_fit(facts, budget_bytes, settings, extras=extras)


def does_not_fit(
    facts: ModelFacts, budget_bytes: int, settings: Settings, *, extras: Extras | None = None
) -> DoesNotFitError:
    """The error for a budget no placement fits, with what would fit instead (computed)."""
    floor = estimate(facts, floor_placement(facts), settings, extras=extras)
    hints = [f"even with every expert on the CPU the GPU needs {format_bytes(floor.gpu_bytes)}"]
    hints += [fit.text for fit in context_fits(facts, budget_bytes, settings, extras=extras)] or [
        "a smaller quant of the model (or a bigger GPU) is needed"
    ]
    return DoesNotFitError(
        f"does not fit in {format_bytes(budget_bytes)} of GPU memory at -c {settings.n_ctx}",
        hint="; ".join(hints),
    )


def floor_placement(facts: ModelFacts) -> Placement:
    """What needs the least GPU memory: every expert on the CPU (a dense model: -ngl 0)."""
    return Placement.all_experts_on_cpu() if facts.is_moe else Placement(n_gpu_layers=0)


class ContextFit(NamedTuple):
    """The largest context that fits the budget with every expert on the CPU, at a cache type."""

    n_ctx: int
    cache_type: str

    @property
    def text(self) -> str:
        return f"the largest context that fits at {self.cache_type} is -c {self.n_ctx}"


def context_fits(
    facts: ModelFacts, budget_bytes: int, settings: Settings, *, extras: Extras | None = None
) -> list[ContextFit]:
    """The largest contexts that fit at the settings' cache type, and at q4_0 (when that is
    another type and gives more)."""
    found: list[ContextFit] = []
    for cache in dict.fromkeys((settings.type_k, "q4_0")):
        trial = settings.model_copy(update={"type_k": cache, "type_v": cache})
        try:
            best = max_context(facts, floor_placement(facts), budget_bytes, trial, extras=extras)
        except BadValueError:  # e.g. a head size q4_0 blocks do not divide
            best = None
        if best is not None and (not found or best > found[-1].n_ctx):
            found.append(ContextFit(best, cache))
    return found


def check_context(value: int) -> int:
    if value <= 0:
        raise BadValueError(f"context must be positive, got {value}")
    return value
