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

from pydantic import BaseModel

from moetune.core.command import args_for, server_argv
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate, estimate_from_split
from moetune.core.placement import EXPS_REGEX, Override, Placement, WeightSplit, split_weights
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.roles import Role
from moetune.units import format_bytes

DEFAULT_HEADROOM_BYTES = 1536 * 1024**2  # 1.5 GiB: the seeds' "1-2 GB under the card's size"
MIN_USEFUL_CTX = 2048
CTX_STEP = 256  # llama.cpp pads n_ctx to 256 cells


class OffloadPlan(NamedTuple):
    """One way to place the model, with its estimate."""

    placement: Placement
    memory: MemoryEstimate
    moved_layers: tuple[int, ...]  # blocks whose experts are all on the CPU
    partial_layer: int | None = None  # block with only some expert tensors on the CPU
    partial_parts: tuple[str, ...] = ()  # which parts of it are on the CPU


def _expert_parts(facts: ModelFacts) -> dict[int, dict[str, int]]:
    """Bytes of each block's routed-expert tensors by part (up, gate, down, gate_up)."""
    parts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for tensor in facts.tensors:
        if tensor.role is Role.EXPERTS and tensor.layer is not None and tensor.expert_part:
            parts[tensor.layer][tensor.expert_part] += tensor.nbytes or 0
    return parts


def _moved(base: WeightSplit, moved_bytes: int, cpu_layers: Sequence[int]) -> WeightSplit:
    return base._replace(
        gpu_expert_bytes=base.gpu_expert_bytes - moved_bytes,
        cpu_expert_bytes=base.cpu_expert_bytes + moved_bytes,
        cpu_expert_layers=tuple(sorted(set(base.cpu_expert_layers) | set(cpu_layers))),
    )


def n_cpu_moe_split(facts: ModelFacts, base: WeightSplit, n: int) -> WeightSplit:
    """The weight split of ``--n-cpu-moe n`` without regexes (tests check it against them)."""
    layers = [layer for layer in facts.layers[:n] if layer.has_experts]
    moved = sum(layer.expert_bytes for layer in layers)
    return _moved(base, moved, [layer.index for layer in layers])


def predictor(facts: ModelFacts, settings: Settings) -> Callable[[int], int]:
    """The predicted GPU peak at ``--n-cpu-moe n``, as a function of n (memoised)."""
    base = split_weights(facts, Placement())
    cache: dict[int, int] = {}

    def predict(n: int) -> int:
        if n not in cache:
            memory = estimate_from_split(facts, n_cpu_moe_split(facts, base, n), settings)
            cache[n] = memory.gpu_bytes
        return cache[n]

    return predict


def plan_n_cpu_moe(facts: ModelFacts, budget_bytes: int, settings: Settings) -> OffloadPlan:
    """The smallest N for ``--n-cpu-moe N`` whose predicted GPU peak fits the budget."""
    base = split_weights(facts, Placement())
    for n in range(facts.n_layers + 1):
        memory = estimate_from_split(facts, n_cpu_moe_split(facts, base, n), settings)
        if memory.gpu_bytes <= budget_bytes:
            moved = tuple(layer.index for layer in facts.layers[:n] if layer.has_experts)
            return OffloadPlan(Placement.with_n_cpu_moe(n), memory, moved)
    raise _does_not_fit(facts, budget_bytes, settings)


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


def _partial_options(parts: dict[str, int]) -> list[tuple[str, ...]]:
    """Which parts of the boundary block may go to the CPU, best (least moved) first."""
    if "gate_up" in parts:
        return [("down",)]
    return [("down",), ("gate", "down")]


class _OverrideSearch(NamedTuple):
    facts: ModelFacts
    base: WeightSplit
    parts: dict[int, dict[str, int]]
    budget_bytes: int
    settings: Settings

    def memory(self, moved_bytes: int, layers: Sequence[int]) -> MemoryEstimate:
        return estimate_from_split(
            self.facts, _moved(self.base, moved_bytes, layers), self.settings
        )

    def run(self, order: Sequence[int]) -> OffloadPlan:
        for count in range(len(order) + 1):
            moved = list(order[:count])
            moved_bytes = sum(sum(self.parts[i].values()) for i in moved)
            memory = self.memory(moved_bytes, moved)
            if memory.gpu_bytes <= self.budget_bytes:
                return self.refine(moved, moved_bytes) or OffloadPlan(
                    Placement(overrides=ot_rules(moved, None, ())), memory, tuple(moved)
                )
        raise _does_not_fit(self.facts, self.budget_bytes, self.settings)

    def refine(self, moved: list[int], moved_bytes: int) -> OffloadPlan | None:
        """Bring back part of the last block moved, if that still fits."""
        if not moved:
            return None
        boundary, rest = moved[-1], tuple(moved[:-1])
        whole = sum(self.parts[boundary].values())
        for option in _partial_options(self.parts[boundary]):
            kept = moved_bytes - whole + sum(self.parts[boundary].get(p, 0) for p in option)
            trial = self.memory(kept, moved)
            if trial.gpu_bytes <= self.budget_bytes:
                rules = ot_rules(rest, boundary, option)
                return OffloadPlan(Placement(overrides=rules), trial, rest, boundary, option)
        return None


def plan_override(facts: ModelFacts, budget_bytes: int, settings: Settings) -> OffloadPlan:
    """The ``-ot`` plan: experts of the last blocks to the CPU, the boundary block split."""
    base = split_weights(facts, Placement())
    search = _OverrideSearch(facts, base, _expert_parts(facts), budget_bytes, settings)
    last_first = [layer.index for layer in reversed(facts.layers) if layer.has_experts]
    plan = search.run(last_first)
    # Which blocks sit on the CPU changes the compute buffer a little (the peak moves with
    # the graph), so moving the first blocks instead can keep more weights on the GPU.
    first = search.run(last_first[::-1])
    return first if first.memory.gpu_weights_bytes > plan.memory.gpu_weights_bytes else plan


def max_context(
    facts: ModelFacts, placement: Placement, budget_bytes: int, settings: Settings
) -> int | None:
    """The largest context (a multiple of 256, up to the training context) that fits."""
    weights = split_weights(facts, placement)
    limit = facts.context_length or 131072

    def fits(n_ctx: int) -> bool:
        trial = settings.model_copy(update={"n_ctx": n_ctx})
        return estimate_from_split(facts, weights, trial).gpu_bytes <= budget_bytes

    low, high = 1, max(limit // CTX_STEP, 1)
    if not fits(low * CTX_STEP):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid * CTX_STEP) else (low, mid - 1)
    return low * CTX_STEP


def plan_layers(
    facts: ModelFacts, budget_bytes: int, settings: Settings
) -> tuple[int, MemoryEstimate]:
    """Classic layer offload (dense models, or the bench's comparison): the largest -ngl K."""
    for ngl in range(facts.n_layers + 1, -1, -1):
        memory = estimate(facts, Placement(n_gpu_layers=ngl), settings)
        if memory.gpu_bytes <= budget_bytes:
            return ngl, memory
    raise _does_not_fit(facts, budget_bytes, settings)


def _does_not_fit(facts: ModelFacts, budget_bytes: int, settings: Settings) -> DoesNotFitError:
    floor = estimate(facts, Placement.all_experts_on_cpu(), settings)
    small = settings.model_copy(update={"n_ctx": min(MIN_USEFUL_CTX, settings.n_ctx)})
    small_q4 = small.model_copy(update={"type_k": "q4_0", "type_v": "q4_0"})
    floor_small = estimate(facts, Placement.all_experts_on_cpu(), small_q4)
    hints = [f"even with every expert on the CPU the GPU needs {format_bytes(floor.gpu_bytes)}"]
    if floor_small.gpu_bytes <= budget_bytes:
        hints.append(f"it fits at -c {small.n_ctx} with q4_0 KV cache")
    else:
        hints.append("a smaller quant of the model (or a bigger GPU) is needed")
    return DoesNotFitError(
        f"does not fit in {format_bytes(budget_bytes)} of GPU memory at -c {settings.n_ctx}",
        hint="; ".join(hints),
    )


def check_context(value: int) -> int:
    if value <= 0:
        raise BadValueError(f"context must be positive, got {value}")
    return value


class RamCheck(BaseModel):
    """CPU-resident weights and host buffers against the host's RAM."""

    needed_bytes: int
    available_bytes: int | None
    total_bytes: int | None
    status: str  # ok | warn | fail | unknown
    message: str


def check_ram(memory: MemoryEstimate, ram_total: int | None, ram_available: int | None) -> RamCheck:
    """Warn when the CPU side would page (the under-1-tok/s cliff), refuse when impossible."""
    needed = memory.host_bytes
    if ram_total is None:
        return RamCheck(
            needed_bytes=needed,
            available_bytes=None,
            total_bytes=None,
            status="unknown",
            message="host RAM unknown: pass --ram to check it",
        )
    available = ram_available if ram_available is not None else ram_total
    if needed > ram_total:
        status, message = (
            "fail",
            (
                f"needs {format_bytes(needed)} of RAM but the host has {format_bytes(ram_total)}: "
                "experts would be read from disk on every token (far under 1 tok/s); "
                "use a smaller quant or more RAM"
            ),
        )
    elif needed > available:
        status, message = (
            "warn",
            (
                f"needs {format_bytes(needed)} of RAM, {format_bytes(available)} available: "
                "it will page (mmap re-reading experts from disk); close other programs "
                "or use a smaller quant"
            ),
        )
    else:
        status, message = "ok", f"{format_bytes(needed)} of {format_bytes(available)} available"
    return RamCheck(
        needed_bytes=needed,
        available_bytes=available,
        total_bytes=ram_total,
        status=status,
        message=message,
    )


class PlanRequest(BaseModel):
    """Everything a plan depends on besides the model; sizes in bytes."""

    model_path: str
    target_bytes: int  # GPU memory moetune may fill (total VRAM or --target-vram)
    headroom_bytes: int = DEFAULT_HEADROOM_BYTES
    settings: Settings
    ctx_max: bool = False  # --ctx max: the largest context that fits
    n_cpu_moe: int | None = None  # fixed N (with --ctx max: the context for this N)
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    physical_cores: int | None = None
    gpu_free_bytes: int | None = None  # detected free VRAM (other processes use the rest)


class PlacementResult(BaseModel):
    """One placement: its llama-server flags, predicted memory and command."""

    n_cpu_moe: int | None
    override_tensor: list[str]
    n_gpu_layers: int
    memory: MemoryEstimate
    command: list[str]
    moved_layers: list[int]
    partial_layer: int | None = None
    partial_parts: list[str] = []


class PlanResult(BaseModel):
    model: str
    architecture: str
    is_moe: bool
    target_bytes: int
    headroom_bytes: int
    budget_bytes: int
    settings: Settings
    training_context: int | None
    recommended: PlacementResult  # --n-cpu-moe N (or -ngl K for a dense model)
    alternative: PlacementResult | None  # the -ot plan
    override_gain_bytes: int  # weights the -ot plan keeps on the GPU beyond the N plan
    ram: RamCheck
    threads: int | None
    ubatch_hint: str | None
    warnings: list[str]
    fits: bool


def _placement_result(
    req: PlanRequest, plan: OffloadPlan, settings: Settings, threads: int | None
) -> PlacementResult:
    placement = plan.placement
    args = args_for(req.model_path, settings, placement, threads=threads)
    return PlacementResult(
        n_cpu_moe=placement.n_cpu_moe,
        override_tensor=[]
        if placement.n_cpu_moe is not None
        else [o.arg for o in placement.overrides],
        n_gpu_layers=placement.n_gpu_layers,
        memory=plan.memory,
        command=server_argv(args),
        moved_layers=list(plan.moved_layers),
        partial_layer=plan.partial_layer,
        partial_parts=list(plan.partial_parts),
    )


def _context_for(facts: ModelFacts, req: PlanRequest, budget: int) -> Settings:
    """--ctx max: the largest context that fits at the given N, or at the training context
    with the smallest N, or (if even that is impossible) with every expert on the CPU."""
    settings = req.settings
    if not req.ctx_max:
        return settings
    if req.n_cpu_moe is not None:
        placement = Placement.with_n_cpu_moe(req.n_cpu_moe)
    else:
        placement = Placement.all_experts_on_cpu() if facts.is_moe else Placement(n_gpu_layers=0)
    best = max_context(facts, placement, budget, settings)
    if best is None:
        raise _does_not_fit(facts, budget, settings.model_copy(update={"n_ctx": CTX_STEP}))
    return settings.model_copy(update={"n_ctx": best})


def _fixed_or_planned(
    facts: ModelFacts, req: PlanRequest, budget: int, settings: Settings
) -> OffloadPlan:
    if req.n_cpu_moe is None:
        return plan_n_cpu_moe(facts, budget, settings)
    placement = Placement.with_n_cpu_moe(req.n_cpu_moe)
    moved = tuple(layer.index for layer in facts.layers[: req.n_cpu_moe] if layer.has_experts)
    return OffloadPlan(placement, estimate(facts, placement, settings), moved)


def _warnings(facts: ModelFacts, settings: Settings, plans: Sequence[OffloadPlan]) -> list[str]:
    warnings = []
    if facts.context_length and settings.n_ctx > facts.context_length:
        warnings.append(
            f"context {settings.n_ctx} is beyond the training context {facts.context_length}: "
            "quality may drop unless the model uses RoPE scaling"
        )
    if not plans[0].memory.cache_exact:
        warnings.append(f"KV cache of architecture {facts.architecture!r} is estimated, not exact")
    return warnings


def _ubatch_hint(
    facts: ModelFacts, plan: OffloadPlan, budget: int, settings: Settings
) -> str | None:
    """Seed finding: with experts on the CPU, -ub 2048 speeds up prefill of long prompts."""
    if not plan.moved_layers or settings.n_ubatch >= 2048:
        return None
    bigger = settings.model_copy(update={"n_ubatch": 2048, "n_batch": 2048})
    memory = estimate(facts, plan.placement, bigger)
    advice = "for long prompts add -ub 2048 -b 2048 (faster prefill with experts on the CPU"
    if memory.gpu_bytes <= budget:
        return f"{advice}; GPU peak {format_bytes(memory.gpu_bytes)}, still fits)"
    try:
        wider = plan_n_cpu_moe(facts, budget, bigger)
    except DoesNotFitError:
        return None
    return f"{advice}; it needs --n-cpu-moe {wider.placement.n_cpu_moe} to fit)"


def _free_warning(req: PlanRequest, memory: MemoryEstimate) -> list[str]:
    free = req.gpu_free_bytes
    if free is None or free >= memory.gpu_bytes:
        return []
    return [
        f"the GPU has only {format_bytes(free)} free now (other processes hold "
        f"{format_bytes(req.target_bytes - free)}); close them or pass a lower --target-vram"
    ]


def make_plan(facts: ModelFacts, req: PlanRequest) -> PlanResult:
    """The placement(s) that fit ``req.target_bytes - req.headroom_bytes``, with checks."""
    budget = req.target_bytes - req.headroom_bytes
    if budget <= 0:
        raise BadValueError(
            f"the target {format_bytes(req.target_bytes)} leaves nothing after the "
            f"{format_bytes(req.headroom_bytes)} headroom"
        )
    settings = _context_for(facts, req, budget)
    threads = req.physical_cores
    if facts.is_moe:
        main = _fixed_or_planned(facts, req, budget, settings)
        alt = plan_override(facts, budget, settings)
        if alt.memory.gpu_weights_bytes < main.memory.gpu_weights_bytes:
            rules = ot_rules(main.moved_layers, None, ())
            alt = OffloadPlan(Placement(overrides=rules), main.memory, main.moved_layers)
    else:
        ngl, memory = plan_layers(facts, budget, settings)
        main, alt = OffloadPlan(Placement(n_gpu_layers=ngl), memory, ()), None
    ram = check_ram(main.memory, req.ram_total_bytes, req.ram_available_bytes)
    recommended = _placement_result(req, main, settings, threads)
    alternative = _placement_result(req, alt, settings, threads) if alt else None
    gain = alt.memory.gpu_weights_bytes - main.memory.gpu_weights_bytes if alt else 0
    return PlanResult(
        model=req.model_path,
        architecture=facts.architecture,
        is_moe=facts.is_moe,
        target_bytes=req.target_bytes,
        headroom_bytes=req.headroom_bytes,
        budget_bytes=budget,
        settings=settings,
        training_context=facts.context_length,
        recommended=recommended,
        alternative=alternative,
        override_gain_bytes=gain,
        ram=ram,
        threads=threads,
        ubatch_hint=_ubatch_hint(facts, main, budget, settings) if facts.is_moe else None,
        warnings=_warnings(facts, settings, [main]) + _free_warning(req, main.memory),
        fits=main.memory.gpu_bytes <= budget and ram.status != "fail",
    )
