"""A whole plan: the placement for a budget, the RAM check, and, when it does not fit, what
fails (the GPU or the RAM) and what would fit instead, every figure computed.

The budget is ``--target-vram`` when given, else the device's memory minus ``--headroom``:
one meaning for plan, run and bench.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field, computed_field

from moetune.core.command import args_for, server_argv
from moetune.core.devices import DeviceSpec, bufts
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import ALL_LAYERS, Placement
from moetune.core.planner import (
    DEFAULT_HEADROOM_BYTES,
    ContextFit,
    OffloadPlan,
    context_fits,
    floor_placement,
    max_context,
    plan_layers,
    plan_n_cpu_moe,
    plan_override,
)
from moetune.core.split import (
    Target,
    _Search,
    counts_split,
    distribute,
    plan_split,
    plan_split_override,
    split_max_context,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.units import format_bytes

SERVER_ALL_LAYERS = 99  # what moetune writes for "every layer": -ngl 99


class RamCheck(BaseModel):
    """CPU-resident weights and host buffers against the host's RAM."""

    needed_bytes: int
    available_bytes: int | None  # the one RAM figure a plan compares with (given or detected)
    total_bytes: int | None
    status: str  # ok | warn | fail | unknown
    message: str


def check_ram(memory: MemoryEstimate, ram_total: int | None, ram_available: int | None) -> RamCheck:
    """Refuse when the CPU side needs more than the RAM available (it would be read from disk
    on every token: the under-1-tok/s cliff); warn when only the total would hold it."""
    needed = memory.host_bytes
    if ram_total is None:
        unknown = "host RAM unknown: pass --ram to check it"
        return RamCheck(
            needed_bytes=needed,
            available_bytes=None,
            total_bytes=None,
            status="unknown",
            message=unknown,
        )
    available = ram_available if ram_available is not None else ram_total
    short = f"needs {format_bytes(needed)} of RAM, {format_bytes(available)} available"
    if needed > ram_total:
        status, message = (
            "fail",
            (f"{short}: experts would be read from disk on every token (far under 1 tok/s)"),
        )
    elif needed > available:
        status, message = (
            "warn",
            (f"{short}: it will page (mmap re-reading experts from disk); close other programs"),
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


class DeviceCheck(BaseModel):
    """llama-fit-params's projection of one device beside moetune's prediction of the same
    dry run (one sequence, every token an output), MiB as llama.cpp prints them."""

    device: str
    projected_mib: int  # model + context + compute
    predicted_mib: int
    model_mib: tuple[int, int]  # (projected, predicted)
    context_mib: tuple[int, int]
    compute_mib: tuple[int, int]
    agrees: bool  # within the fidelity bounds


class PlanRequest(BaseModel):
    """Everything a plan depends on besides the model; sizes in bytes."""

    model_path: str  # a file, or a -hf name / -mu URL (model_flag)
    model_flag: str = "-m"
    device_bytes: int  # the GPU's memory: given (--vram), a hardware profile, or detected
    target_bytes: int | None = None  # --target-vram: the peak allowed, the budget itself
    headroom_bytes: int = DEFAULT_HEADROOM_BYTES  # without a target: budget = device - this
    settings: Settings
    ctx_max: bool = False  # --ctx max: the largest context that fits
    n_cpu_moe: int | None = None  # fixed N (with --ctx max: the context for this N)
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    physical_cores: int | None = None
    gpu_free_bytes: int | None = None  # detected free VRAM (other processes use the rest)
    # Two or more devices, in llama.cpp's order (each with its total_bytes), and per device
    # the --target-vram (None: total - headroom) and the --headroom.
    devices: tuple[DeviceSpec, ...] = ()
    device_targets: tuple[int | None, ...] = ()
    device_headrooms: tuple[int, ...] = ()
    device_args: tuple[str, ...] = ()  # what selects them for llama-server (--rpc A,B; -dev)
    pass_through: tuple[str, ...] = ()  # the rest of the command (after --: a projector, a draft)

    @property
    def budget_bytes(self) -> int:
        if self.target_bytes is not None:
            return self.target_bytes
        return self.device_bytes - self.headroom_bytes

    @property
    def multi(self) -> bool:
        return len(self.devices) > 1

    @property
    def budgets(self) -> tuple[int, ...]:
        """Each device's budget: its target, else its total minus its headroom."""
        if not self.multi:
            return (self.budget_bytes,)
        found = []
        for i, device in enumerate(self.devices):
            target = self.device_targets[i] if i < len(self.device_targets) else None
            headroom = (
                self.device_headrooms[i] if i < len(self.device_headrooms) else self.headroom_bytes
            )
            found.append(target if target is not None else (device.total_bytes or 0) - headroom)
        return tuple(found)


class PlacementResult(BaseModel):
    """One placement: its llama-server flags, predicted memory and command."""

    n_cpu_moe: int | None
    override_tensor: list[str]
    n_gpu_layers: int  # as the command writes it (-ngl 99 for every layer)
    n_ctx: int
    memory: MemoryEstimate
    command: list[str]
    moved_layers: list[int]
    partial_layer: int | None = None
    partial_parts: list[str] = []
    fits: bool  # on the GPU, within the budget (several devices: each within its own)
    tensor_split: list[float] = []  # -ts (several devices)
    placement: Placement = Field(exclude=True)  # what the command says, for llama.cpp's check


class PlanResult(BaseModel):
    model: str
    architecture: str
    is_moe: bool
    device_bytes: int
    target_bytes: int | None
    headroom_bytes: int
    budget_bytes: int
    settings: Settings
    training_context: int | None
    recommended: PlacementResult  # --n-cpu-moe N (or -ngl K for a dense model)
    alternative: PlacementResult | None  # the -ot plan, when it keeps more on the GPU
    override_gain_bytes: int  # weights the -ot plan keeps on the GPU beyond the N plan
    ram: RamCheck
    threads: int | None
    ubatch_hint: str | None
    warnings: list[str]
    fails: str | None = None  # "gpu" or "ram": what does not fit
    reason: str | None = None  # one sentence, with the figure that fails
    suggestions: list[str] = []  # what would fit instead, every figure computed
    nearest: PlacementResult | None = None  # the nearest plan that does fit
    # several devices: their names and budgets, and the one with the least room left
    device_names: list[str] = []
    device_budgets: list[int] = []
    limiting_device: str | None = None
    checks: list[DeviceCheck] = []  # llama.cpp's own dry run of the recommended command
    checked: str = "prediction"  # "llama.cpp", "prediction" (devices not here), "skipped"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fits(self) -> bool:
        return self.fails is None


def _placement_result(
    req: PlanRequest, plan: OffloadPlan, settings: Settings, budgets: Sequence[int]
) -> PlacementResult:
    placement = plan.placement
    args = args_for(
        req.model_path,
        settings,
        placement,
        threads=req.physical_cores,
        pass_through=(*req.device_args, *req.pass_through),
        bufts=bufts(req.devices),
        model_flag=req.model_flag,
    )
    ngl = placement.n_gpu_layers
    fits = all(d.total_bytes <= b for d, b in zip(plan.memory.devices, budgets, strict=True))
    return PlacementResult(
        n_cpu_moe=placement.n_cpu_moe,
        override_tensor=[]
        if placement.n_cpu_moe is not None
        else [o.arg(args.bufts) for o in placement.overrides],
        n_gpu_layers=SERVER_ALL_LAYERS if ngl >= ALL_LAYERS else ngl,
        n_ctx=settings.n_ctx,
        memory=plan.memory,
        command=server_argv(args),
        moved_layers=list(plan.moved_layers),
        partial_layer=plan.partial_layer,
        partial_parts=list(plan.partial_parts),
        fits=fits,
        tensor_split=list(placement.tensor_split),
        placement=placement,
    )


def _context_for(facts: ModelFacts, req: PlanRequest, budget: int) -> Settings:
    """--ctx max: the largest context that fits at the given N, or with every expert on the
    CPU (the smallest N is then planned at it); 256 when not even that fits."""
    settings = req.settings
    if not req.ctx_max:
        return settings
    placement = (
        Placement.with_n_cpu_moe(req.n_cpu_moe)
        if req.n_cpu_moe is not None
        else floor_placement(facts)
    )
    best = max_context(facts, placement, budget, settings)
    return settings.model_copy(update={"n_ctx": best or 256})


def _fixed_n(facts: ModelFacts, n: int, settings: Settings) -> OffloadPlan:
    if n > facts.n_layers:
        raise BadValueError(
            f"--n-cpu-moe {n}: the model has {facts.n_layers} blocks",
            hint=f"use 0 to {facts.n_layers}",
        )
    placement = Placement.with_n_cpu_moe(n)
    moved = tuple(layer.index for layer in facts.layers[:n] if layer.has_experts)
    return OffloadPlan(placement, estimate(facts, placement, settings), moved)


def _main_plan(
    facts: ModelFacts,
    req: PlanRequest,
    budget: int,
    settings: Settings,
) -> tuple[OffloadPlan, OffloadPlan | None]:
    """The N plan (or -ngl K for a dense model) and the -ot plan; the placement that needs the
    least GPU memory when nothing fits."""
    if not facts.is_moe:
        try:
            ngl, memory = plan_layers(facts, budget, settings)
        except DoesNotFitError:
            ngl, memory = 0, estimate(facts, Placement(n_gpu_layers=0), settings)
        return OffloadPlan(Placement(n_gpu_layers=ngl), memory, ()), None
    if req.n_cpu_moe is not None:
        main = _fixed_n(facts, req.n_cpu_moe, settings)
    else:
        try:
            main = plan_n_cpu_moe(facts, budget, settings)
        except DoesNotFitError:
            return _fixed_n(facts, facts.n_layers, settings), None
    try:
        alt = plan_override(facts, budget, settings)
    except DoesNotFitError:
        return main, None
    if alt.memory.gpu_weights_bytes <= main.memory.gpu_weights_bytes:
        return main, None  # the -ot form keeps nothing more on the GPU
    return main, alt


def _warnings(facts: ModelFacts, settings: Settings, plans: Sequence[OffloadPlan]) -> list[str]:
    warnings = []
    if facts.context_length and settings.n_ctx > facts.context_length:
        warnings.append(
            f"context {settings.n_ctx} is beyond the training context {facts.context_length}: "
            "quality may drop unless the model uses RoPE scaling"
        )
    if not plans[0].memory.cache_exact:
        warnings.append(
            f"architecture {facts.architecture!r} is one moetune has not been taught: its KV "
            "cache (full context on every layer, the largest heads) and compute buffers "
            "(+50 %, at least 64 MiB) are conservative estimates, not exact"
        )
    return warnings


def _ubatch_hint(
    facts: ModelFacts, plan: OffloadPlan, budget: int, settings: Settings
) -> str | None:
    """Seed finding: with experts on the CPU, -ub 2048 speeds up prefill of long prompts."""
    if not facts.is_moe or not plan.moved_layers or settings.n_ubatch >= 2048:
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
        f"{format_bytes(req.device_bytes - free)}); close them or pass a lower --target-vram"
    ]


class _Failure(BaseModel):
    fails: str
    reason: str
    suggestions: list[str]
    nearest: PlacementResult | None = None


def _gpu_failure(
    facts: ModelFacts, req: PlanRequest, main: OffloadPlan, budget: int, settings: Settings
) -> _Failure:
    """The GPU cannot hold the placement: the figures, and the nearest plan that fits."""
    need = main.memory.gpu_bytes
    reason = (
        f"the GPU needs {format_bytes(need)} at -c {settings.n_ctx} "
        f"{'with every expert on the CPU' if facts.is_moe and req.n_cpu_moe is None else ''}"
        f" but the budget is {format_bytes(budget)}"
    ).replace("  ", " ")
    suggestions: list[str] = []
    nearest = None
    if req.n_cpu_moe is not None:
        try:
            smallest = plan_n_cpu_moe(facts, budget, settings)
            suggestions.append(f"--n-cpu-moe {smallest.placement.n_cpu_moe} fits")
            nearest = _placement_result(req, smallest, settings, (budget,))
        except DoesNotFitError:
            pass
    fits = context_fits(facts, budget, settings)
    suggestions += [fit.text for fit in fits]
    if nearest is None and fits:
        first = fits[0]
        at = settings.model_copy(
            update={"n_ctx": first.n_ctx, "type_k": first.cache_type, "type_v": first.cache_type}
        )
        plan, _ = _main_plan(facts, req.model_copy(update={"n_cpu_moe": None}), budget, at)
        nearest = _placement_result(req, plan, at, (budget,))
    if not fits:
        suggestions.append("not even -c 256 fits: a smaller quant of the model or a bigger GPU")
    return _Failure(fails="gpu", reason=reason, suggestions=suggestions, nearest=nearest)


def _ram_failure(main: OffloadPlan, ram: RamCheck) -> _Failure:
    """The GPU holds the placement but the RAM cannot hold what stays on the CPU."""
    assert ram.available_bytes is not None
    more = ram.needed_bytes - ram.available_bytes
    n = main.placement.n_cpu_moe
    placement = f"--n-cpu-moe {n}" if n is not None else "this placement"
    return _Failure(
        fails="ram",
        reason=f"the CPU side {ram.message}",
        suggestions=[
            f"{format_bytes(more)} more RAM would fit {placement}",
            "or a smaller quant of the model (its experts take the RAM)",
        ],
    )


def make_plan(facts: ModelFacts, req: PlanRequest) -> PlanResult:
    """The placement(s) that fit the budget, with checks; when none fits, what fails and the
    nearest plan that fits."""
    if req.multi:
        return _multi_plan(facts, req)
    budget = req.budget_bytes
    if budget <= 0:
        raise BadValueError(
            f"the device's {format_bytes(req.device_bytes)} leaves nothing after the "
            f"{format_bytes(req.headroom_bytes)} headroom",
            hint="pass --target-vram, or a smaller --headroom",
        )
    settings = _context_for(facts, req, budget)
    main, alt = _main_plan(facts, req, budget, settings)
    ram = check_ram(main.memory, req.ram_total_bytes, req.ram_available_bytes)
    failure = None
    if main.memory.gpu_bytes > budget:
        failure = _gpu_failure(facts, req, main, budget, settings)
    elif ram.status == "fail":
        failure = _ram_failure(main, ram)
    gain = alt.memory.gpu_weights_bytes - main.memory.gpu_weights_bytes if alt else 0
    return PlanResult(
        model=req.model_path,
        architecture=facts.architecture,
        is_moe=facts.is_moe,
        device_bytes=req.device_bytes,
        target_bytes=req.target_bytes,
        headroom_bytes=req.headroom_bytes,
        budget_bytes=budget,
        settings=settings,
        training_context=facts.context_length,
        recommended=_placement_result(req, main, settings, (budget,)),
        alternative=_placement_result(req, alt, settings, (budget,)) if alt else None,
        override_gain_bytes=gain,
        ram=ram,
        threads=req.physical_cores,
        ubatch_hint=None if failure else _ubatch_hint(facts, main, budget, settings),
        warnings=_warnings(facts, settings, [main]) + _free_warning(req, main.memory),
        fails=failure.fails if failure else None,
        reason=failure.reason if failure else None,
        suggestions=failure.suggestions if failure else [],
        nearest=failure.nearest if failure else None,
    )


# --- several devices ---------------------------------------------------------------------------


def _target(req: PlanRequest) -> Target:
    budgets = req.budgets
    for device, budget in zip(req.devices, budgets, strict=True):
        if budget <= 0:
            raise BadValueError(
                f"{device.name}'s {format_bytes(device.total_bytes)} leaves nothing after its "
                "headroom",
                hint="pass --target-vram for it, or a smaller --headroom",
            )
    return Target(req.devices, budgets)


def _multi_context(facts: ModelFacts, req: PlanRequest, target: Target) -> Settings:
    """--ctx max over several devices (at --n-cpu-moe N if given, else every expert on the
    CPU); 256 when not even that fits."""
    if not req.ctx_max:
        return req.settings
    found = split_max_context(facts, target, req.settings, req.n_cpu_moe)
    return req.settings.model_copy(update={"n_ctx": found[0] if found else 256})


def _fixed_split(facts: ModelFacts, target: Target, settings: Settings, n: int) -> OffloadPlan:
    """--n-cpu-moe N given: the split for it (every device at its largest share)."""
    if n > facts.n_layers:
        raise BadValueError(
            f"--n-cpu-moe {n}: the model has {facts.n_layers} blocks",
            hint=f"use 0 to {facts.n_layers}",
        )
    search = _Search(facts, target, settings)
    blocks = [layer.index for layer in facts.layers[:n] if layer.has_experts]
    found = distribute(search, blocks, overridden=n > 0)
    counts = found[0] if found else even_split(facts, target)
    weights = search.with_cpu_blocks(counts, blocks)
    placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    return OffloadPlan(placement, search.memory(weights, n > 0), tuple(blocks))


def even_split(facts: ModelFacts, target: Target) -> tuple[int, ...]:
    """Layer counts in proportion to the budgets (what to show when no split fits)."""
    total = facts.n_layers + 1
    weights = [max(b, 1) for b in target.budgets]
    counts = [total * w // sum(weights) for w in weights]
    counts[-1] += total - sum(counts)
    return tuple(counts)


def _multi_main(
    facts: ModelFacts, req: PlanRequest, target: Target, settings: Settings
) -> tuple[OffloadPlan, OffloadPlan | None]:
    """The -ts/--n-cpu-moe plan and the -ts/-ot plan (when it keeps more on the devices)."""
    if req.n_cpu_moe is not None or not facts.is_moe:
        return _fixed_split(facts, target, settings, req.n_cpu_moe or 0), None
    try:
        main = plan_split(facts, target, settings)
    except DoesNotFitError:
        return _fixed_split(facts, target, settings, facts.n_layers), None
    counts = tuple(int(c) for c in main.placement.tensor_split)
    try:
        alt = plan_split_override(facts, target, settings, counts)
    except DoesNotFitError:
        return main, None
    if alt.memory.gpu_weights_bytes <= main.memory.gpu_weights_bytes:
        return main, None
    return main, alt


def _limiting(memory: MemoryEstimate, target: Target) -> str:
    """The device with the least room left (the one that stopped the plan)."""
    rooms = [b - d.total_bytes for d, b in zip(memory.devices, target.budgets, strict=True)]
    return target.devices[rooms.index(min(rooms))].name


def _multi_failure(
    facts: ModelFacts, req: PlanRequest, main: OffloadPlan, target: Target, settings: Settings
) -> _Failure:
    over = target.over(main.memory)
    parts = [
        f"{target.devices[i].name} needs {format_bytes(main.memory.devices[i].total_bytes)}"
        f" of {format_bytes(target.budgets[i])}"
        for i in over
    ]
    where = "with every expert on the CPU" if facts.is_moe and req.n_cpu_moe is None else ""
    reason = f"at -c {settings.n_ctx} {where}: {'; '.join(parts)}".replace("  ", " ")
    fits: list[ContextFit] = []
    for cache in dict.fromkeys((settings.type_k, "q4_0")):
        trial = settings.model_copy(update={"type_k": cache, "type_v": cache})
        found = split_max_context(facts, target, trial, req.n_cpu_moe)
        if found is not None and (not fits or found[0] > fits[-1].n_ctx):
            fits.append(ContextFit(found[0], cache))
    suggestions = [fit.text for fit in fits] or [
        "not even -c 256 fits: a smaller quant, or more or bigger devices"
    ]
    nearest = None
    if fits:
        at = settings.model_copy(
            update={
                "n_ctx": fits[0].n_ctx,
                "type_k": fits[0].cache_type,
                "type_v": fits[0].cache_type,
            }
        )
        plan = (
            plan_split(facts, target, at)
            if req.n_cpu_moe is None
            else _fixed_split(facts, target, at, req.n_cpu_moe)
        )
        nearest = _placement_result(req, plan, at, target.budgets)
    return _Failure(fails="gpu", reason=reason, suggestions=suggestions, nearest=nearest)


def _multi_plan(facts: ModelFacts, req: PlanRequest) -> PlanResult:
    """``make_plan`` over several devices: the split, and each device within its budget."""
    target = _target(req)
    settings = _multi_context(facts, req, target)
    main, alt = _multi_main(facts, req, target, settings)
    ram = check_ram(main.memory, req.ram_total_bytes, req.ram_available_bytes)
    failure = None
    if not target.fits(main.memory):
        failure = _multi_failure(facts, req, main, target, settings)
    elif ram.status == "fail":
        failure = _ram_failure(main, ram)
    gain = alt.memory.gpu_weights_bytes - main.memory.gpu_weights_bytes if alt else 0
    total = sum(d.total_bytes or 0 for d in req.devices)
    return PlanResult(
        model=req.model_path,
        architecture=facts.architecture,
        is_moe=facts.is_moe,
        device_bytes=total,
        target_bytes=None,
        headroom_bytes=req.headroom_bytes,
        budget_bytes=sum(target.budgets),
        settings=settings,
        training_context=facts.context_length,
        recommended=_placement_result(req, main, settings, target.budgets),
        alternative=_placement_result(req, alt, settings, target.budgets) if alt else None,
        override_gain_bytes=gain,
        ram=ram,
        threads=req.physical_cores,
        ubatch_hint=None,
        warnings=_warnings(facts, settings, [main]),
        fails=failure.fails if failure else None,
        reason=failure.reason if failure else None,
        suggestions=failure.suggestions if failure else [],
        nearest=failure.nearest if failure else None,
        device_names=[d.name for d in req.devices],
        device_budgets=list(target.budgets),
        limiting_device=_limiting(main.memory, target),
    )
