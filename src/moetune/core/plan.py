"""A whole plan: the placement for a budget, the RAM check, and, when it does not fit, what
fails (the GPU or the RAM) and what would fit instead, every figure computed.

The budget is ``--target-vram`` when given, else the device's memory minus ``--headroom``:
one meaning for plan, run and bench.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from typing import ClassVar

from moetune.core.calibrate import Measured, SpeedFit, fit_of, fitted_forecast
from moetune.core.command import (
    args_for,
    buft_notes,
    command_env,
    pass_through_int,
    server_argv,
)
from moetune.core.devices import DeviceSpec
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.goal import FORECAST_DEPTH, FORECAST_PROMPT
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import ALL_LAYERS, Placement
from moetune.core.planner import (
    DEFAULT_HEADROOM_BYTES,
    DeviceBudgets,
    OffloadPlan,
    context_fits,
    ctx_max_stop,
    fixed_split,
    floor_plan,
    max_context,
    override_beside,
    plan_layers,
    plan_n_cpu_moe,
)
from moetune.core.speed import (
    DeviceFigures,
    Forecast,
    MachineFigures,
    op_offload_of,
    placement_layout,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.record import HIDDEN, OMIT_EMPTY, record
from moetune.units import format_bytes

SERVER_ALL_LAYERS = 99  # what moetune writes for "every layer": -ngl 99


@record(kw_only=True)
class RamCheck:
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


@record(kw_only=True)
class DeviceCheck:
    """llama-fit-params's projection of one device beside moetune's prediction of the same
    dry run (one sequence, every token an output), MiB as llama.cpp prints them."""

    device: str
    projected_mib: int  # model + context + compute
    predicted_mib: int
    model_mib: tuple[int, int]  # (projected, predicted)
    context_mib: tuple[int, int]
    compute_mib: tuple[int, int]
    agrees: bool  # within the fidelity bounds


@record(kw_only=True)
class PlanRequest:
    """Everything a plan depends on besides the model; sizes in bytes. The devices are one or
    more (one device is a list of one), each with a --target-vram (None: its total minus its
    --headroom) and a --headroom."""

    model_path: str  # a file, or a -hf name / -mu URL (model_flag)
    model_flag: str = "-m"
    # in llama.cpp's order, each with its total_bytes: given (--vram), a hardware profile, or
    # detected
    devices: tuple[DeviceSpec, ...]
    target_vram: tuple[int | None, ...] = ()  # per device: the budget itself, when given
    headrooms: tuple[int, ...] = (DEFAULT_HEADROOM_BYTES,)  # per device (the last repeats)
    settings: Settings
    ctx_max: bool = False  # --ctx max: the largest context that fits
    n_cpu_moe: int | None = None  # fixed N (with --ctx max: the context for this N)
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    physical_cores: int | None = None
    threads: int | None = None  # the command's -t (None: the physical cores; the frontier's)
    gpu_free_bytes: int | None = None  # one device: its detected free memory
    device_args: tuple[str, ...] = ()  # what selects them for llama-server (--rpc A,B; -dev)
    pass_through: tuple[str, ...] = ()  # the rest of the command (after --: a projector, a draft)
    # what those load beside the model (jobs/loader.py read the files), beside the settings
    extras: Extras | None = field(default=None, repr=False, metadata=HIDDEN)
    # the machine's figures the speed forecast uses (None: none known)
    figures: MachineFigures | None = field(default=None, metadata=HIDDEN)
    # measured speeds of this model the forecast is calibrated on (jobs/speed.measured_of)
    measured: tuple[Measured, ...] = field(default=(), repr=False, metadata=HIDDEN)

    def target_vram_of(self, index: int) -> int | None:
        return self.target_vram[index] if index < len(self.target_vram) else None

    def headroom_of(self, index: int) -> int:
        return self.headrooms[min(index, len(self.headrooms) - 1)]

    @property
    def budgets(self) -> tuple[int, ...]:
        """Each device's budget: its --target-vram, else its total minus its headroom."""
        found = []
        for i, device in enumerate(self.devices):
            given = self.target_vram_of(i)
            found.append(
                given if given is not None else (device.total_bytes or 0) - self.headroom_of(i)
            )
        return tuple(found)


@record(kw_only=True)
class PlacementResult:
    """One placement: its llama-server flags, predicted memory and command."""

    n_cpu_moe: int | None
    override_tensor: list[str]
    n_gpu_layers: int  # as the command writes it (-ngl 99 for every layer)
    n_ctx: int
    memory: MemoryEstimate
    command: list[str]
    moved_layers: list[int]
    partial_layer: int | None = None
    partial_parts: list[str] = field(default_factory=list)
    fits: bool  # on the GPU, within the budget (several devices: each within its own)
    tensor_split: list[float] = field(default_factory=list)  # -ts (several devices)
    placement: Placement = field(metadata=HIDDEN)  # what the command says, for llama.cpp
    # what the command's -ot rules name differently from llama.cpp's devices (buft_notes):
    # printed under it, not in the JSON
    notes: list[str] = field(default_factory=list, metadata=HIDDEN)
    # the variables the command sets before llama-server (command_env: the op-offload
    # threshold where the settings name one)
    env: dict[str, str] = field(default_factory=dict, metadata=OMIT_EMPTY)


@record(kw_only=True)
class PlanResult:
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("fits",)

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
    # the -ot plan is the first command (see ``first``): it keeps more on the devices and N
    # was not fixed (--n-cpu-moe)
    override_first: bool = False
    ram: RamCheck
    threads: int | None
    ubatch_hint: str | None
    warnings: list[str]
    fails: str | None = None  # "gpu" or "ram": what does not fit
    reason: str | None = None  # one sentence, with the figure that fails
    # what would fit instead, every figure computed
    suggestions: list[str] = field(default_factory=list)
    nearest: PlacementResult | None = None  # the nearest plan that does fit
    # several devices: their names and budgets, and the one with the least room left
    device_names: list[str] = field(default_factory=list)
    device_budgets: list[int] = field(default_factory=list)
    limiting_device: str | None = None
    # llama.cpp's own dry run of the recommended command
    checks: list[DeviceCheck] = field(default_factory=list)
    checked: str = "prediction"  # "llama.cpp", "prediction" (devices not here), "skipped"
    forecast: Forecast | None = None  # the recommended placement's speed (when it fits)
    # --ctx max stopped at the training context, not at the budget: what it says (None: it
    # did not); in --json at the top level only
    ctx_note: str | None = field(default=None, metadata=HIDDEN)
    # device -> where its runtime overhead came from, when it was measured on the card (a
    # hardware profile's); not in the JSON's plan (payloads.plan_payload adds it when present)
    overhead_sources: dict[str, str] = field(default_factory=dict, metadata=HIDDEN)

    @property
    def fits(self) -> bool:
        return self.fails is None

    @property
    def first(self) -> PlacementResult:
        """The placement whose command a plan prints first, and the one alias and export
        take: the ``-ot`` form where it keeps more on the devices (``override_first``), else
        ``--n-cpu-moe N`` (``-ngl K`` for a dense model); the memory, the RAM check, the
        llama.cpp check and the forecast are of it. ``core.frontier`` starts from it and
        picks another only for an objective."""
        if self.override_first and self.alternative is not None:
            return self.alternative
        return self.recommended

    @property
    def simpler(self) -> PlacementResult | None:
        """The ``--n-cpu-moe`` form where the ``-ot`` form is first (printed beside it, with
        what it gives up); else None."""
        return self.recommended if self.override_first else None


def placement_result(
    req: PlanRequest, plan: OffloadPlan, settings: Settings, target: DeviceBudgets
) -> PlacementResult:
    placement = plan.placement
    args = args_for(
        req.model_path,
        settings,
        placement,
        threads=req.threads or req.physical_cores,
        pass_through=(*req.device_args, *req.pass_through),
        bufts=target.bufts,
        model_flag=req.model_flag,
    )
    ngl = placement.n_gpu_layers
    command = server_argv(args)
    return PlacementResult(
        n_cpu_moe=placement.n_cpu_moe,
        override_tensor=[]
        if placement.n_cpu_moe is not None
        else [o.arg(args.bufts) for o in placement.overrides],
        n_gpu_layers=SERVER_ALL_LAYERS if ngl >= ALL_LAYERS else ngl,
        n_ctx=settings.n_ctx,
        memory=plan.memory,
        command=command,
        notes=buft_notes(command),
        moved_layers=list(plan.moved_layers),
        partial_layer=plan.partial_layer,
        partial_parts=list(plan.partial_parts),
        fits=target.fits(plan.memory),
        tensor_split=list(placement.tensor_split),
        placement=placement,
        env=command_env(settings),
    )


def plan_target(req: PlanRequest) -> DeviceBudgets:
    """The devices and their budgets; a budget the headroom leaves nothing of is refused."""
    budgets = req.budgets
    for i, (device, budget) in enumerate(zip(req.devices, budgets, strict=True)):
        if budget <= 0:
            one = len(req.devices) == 1
            raise BadValueError(
                f"{'the device' if one else device.name}'s {format_bytes(device.total_bytes)} "
                f"leaves nothing after {'the' if one else 'its'} "
                f"{format_bytes(req.headroom_of(i))} headroom",
                hint="pass --target-vram"
                + ("" if one else " for it")
                + ", or a smaller --headroom",
            )
    return DeviceBudgets(req.devices, budgets)


FORCE_HINT = "add --force if that is meant"


def device_label(device: DeviceSpec) -> str:
    """A device as an error names it: ``CUDA0 (NVIDIA GeForce RTX 4090)``, ``RPC0
    (127.0.0.1:50052)``, or its name alone."""
    return f"{device.name} ({device.description})" if device.description else device.name


def check_targets(devices: Sequence[DeviceSpec], targets: Sequence[int | None]) -> None:
    """Each ``--target-vram`` given (None: none for that device) against its device: one above
    the device's total, or above what is free on it where that is known, is refused (a
    target is the peak the device may reach, and it cannot reach more than it has). The
    caller skips this for ``--force``."""
    for device, target in zip(devices, targets, strict=False):
        if target is None:
            continue
        label, total, free = device_label(device), device.total_bytes, device.free_bytes
        if total is not None and target > total:
            raise BadValueError(
                f"--target-vram {format_bytes(target)} is more than {label} has: "
                f"{format_bytes(total)}",
                hint=f"give at most {format_bytes(total)} for it, or {FORCE_HINT}",
            )
        if free is not None and target > free:
            raise BadValueError(
                f"--target-vram {format_bytes(target)} is more than is free on {label}: "
                f"{format_bytes(free)}" + (f" of {format_bytes(total)}" if total else ""),
                hint="close what holds the rest, give at most "
                f"{format_bytes(free)} for it, or {FORCE_HINT}",
            )


def _context_for(facts: ModelFacts, req: PlanRequest, target: DeviceBudgets) -> Settings:
    """--ctx max: the largest context that fits at the given N, or with every expert on the
    CPU (the smallest N is then planned at it); 256 when not even that fits."""
    if not req.ctx_max:
        return req.settings
    found = max_context(facts, target, req.settings, req.n_cpu_moe, extras=req.extras)
    return replace(req.settings, n_ctx=found[0] if found else 256)


def _main_plan(
    facts: ModelFacts,
    req: PlanRequest,
    target: DeviceBudgets,
    settings: Settings,
    *,
    brief: bool = False,
) -> tuple[OffloadPlan, OffloadPlan | None]:
    """The N plan (or -ngl K for a dense model) and the -ot plan (when it keeps more on the
    devices; never with ``brief``); the placement that needs the least device memory when
    nothing fits."""
    if not facts.is_moe:
        try:
            return plan_layers(facts, target, settings, extras=req.extras), None
        except DoesNotFitError:
            return floor_plan(facts, target, settings, extras=req.extras), None
    if req.n_cpu_moe is not None:
        main = fixed_split(facts, target, settings, req.n_cpu_moe, extras=req.extras)
    else:
        try:
            main = plan_n_cpu_moe(facts, target, settings, extras=req.extras)
        except DoesNotFitError:
            return floor_plan(facts, target, settings, extras=req.extras), None
    if brief:
        return main, None
    return main, override_beside(facts, target, settings, main, extras=req.extras)


def override_first(req: PlanRequest, alt: OffloadPlan | None) -> bool:
    """Whether the ``-ot`` plan is the first command: wherever there is one (``_main_plan``
    gives it only where it keeps more weights on the devices than the ``--n-cpu-moe`` plan,
    so a tie keeps the simpler form first), unless ``--n-cpu-moe`` fixed N."""
    return alt is not None and req.n_cpu_moe is None


def _warnings(
    facts: ModelFacts, settings: Settings, plans: Sequence[OffloadPlan], extras: Extras | None
) -> list[str]:
    draft = extras.draft if extras else None
    warnings = [*facts.warnings, *(draft.facts.warnings if draft else ())]
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
    facts: ModelFacts,
    plan: OffloadPlan,
    target: DeviceBudgets,
    settings: Settings,
    extras: Extras | None,
) -> str | None:
    """Seed finding: with experts on the CPU, -ub 2048 speeds up prefill of long prompts."""
    if not facts.is_moe or not plan.moved_layers or settings.n_ubatch >= 2048:
        return None
    bigger = replace(settings, n_ubatch=2048, n_batch=2048)
    memory = estimate(facts, plan.placement, bigger, target.devices, extras=extras)
    advice = "for long prompts add -ub 2048 -b 2048 (faster prefill with experts on the CPU"
    if target.fits(memory):
        return f"{advice}; GPU peak {format_bytes(memory.gpu_bytes)}, still fits)"
    try:
        over = plan.placement.n_cpu_moe  # over one device's budget at -ub 2048 (above)
        wider = plan_n_cpu_moe(facts, target, bigger, extras=extras, over=over)
    except DoesNotFitError:
        return None
    return f"{advice}; it needs --n-cpu-moe {wider.placement.n_cpu_moe} to fit)"


def _free_warning(req: PlanRequest, memory: MemoryEstimate) -> list[str]:
    free = req.gpu_free_bytes
    if free is None or free >= memory.gpu_bytes:
        return []
    total = sum(d.total_bytes or 0 for d in req.devices)
    return [
        f"the GPU has only {format_bytes(free)} free now (other processes hold "
        f"{format_bytes(total - free)}); close them or pass a lower --target-vram"
    ]


@record(kw_only=True)
class _Failure:
    fails: str
    reason: str
    suggestions: list[str]
    nearest: PlacementResult | None = None


def _gpu_failure(
    facts: ModelFacts,
    req: PlanRequest,
    main: OffloadPlan,
    target: DeviceBudgets,
    settings: Settings,
    *,
    brief: bool = False,
) -> _Failure:
    """A device cannot hold the placement: the figures, and (unless ``brief``) the nearest
    plan that fits."""
    where = "with every expert on the CPU" if facts.is_moe and req.n_cpu_moe is None else ""
    if target.n == 1:
        need = main.memory.gpu_bytes
        reason = (
            f"the GPU needs {format_bytes(need)} at -c {settings.n_ctx} {where}"
            f" but the budget is {format_bytes(target.budgets[0])}"
        )
    else:
        parts = [
            f"{target.devices[i].name} needs {format_bytes(main.memory.devices[i].total_bytes)}"
            f" of {format_bytes(target.budgets[i])}"
            for i in target.over(main.memory)
        ]
        reason = f"at -c {settings.n_ctx} {where}: {'; '.join(parts)}"
    reason = reason.replace("  ", " ")
    if brief:
        return _Failure(fails="gpu", reason=reason, suggestions=[])
    suggestions: list[str] = []
    nearest = None
    if req.n_cpu_moe is not None:
        try:
            smallest = plan_n_cpu_moe(facts, target, settings, extras=req.extras)
            suggestions.append(f"--n-cpu-moe {smallest.placement.n_cpu_moe} fits")
            nearest = placement_result(req, smallest, settings, target)
        except DoesNotFitError:
            pass
    fits = context_fits(facts, target, settings, extras=req.extras)
    suggestions += [fit.text for fit in fits]
    if nearest is None and fits:
        first = fits[0]
        at = replace(settings, n_ctx=first.n_ctx, type_k=first.cache_type, type_v=first.cache_type)
        plan, _ = _main_plan(facts, replace(req, n_cpu_moe=None), target, at)
        nearest = placement_result(req, plan, at, target)
    if not fits:
        suggestions.append(
            "not even -c 256 fits: a smaller quant of the model or "
            + ("a bigger GPU" if target.n == 1 else "more or bigger devices")
        )
    return _Failure(fails="gpu", reason=reason, suggestions=suggestions, nearest=nearest)


def _ram_failure(main: OffloadPlan, ram: RamCheck) -> _Failure:
    """The devices hold the placement but the RAM cannot hold what stays on the CPU."""
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


def _limiting(memory: MemoryEstimate, target: DeviceBudgets) -> str:
    """The device with the least room left (the one that stopped the plan)."""
    rooms = [b - d.total_bytes for d, b in zip(memory.devices, target.budgets, strict=True)]
    return target.devices[rooms.index(min(rooms))].name


def speed_basis(req: PlanRequest) -> tuple[MachineFigures, SpeedFit | None]:
    """What every forecast of this request rests on: the machine's figures, and the fit of
    its measured points (None: fewer than two, uncalibrated). Made once per plan."""
    figures = req.figures or MachineFigures(devices=tuple(DeviceFigures() for _ in req.devices))
    if figures.physical_cores is None and req.physical_cores:  # the thread term's cores
        figures = replace(figures, physical_cores=req.physical_cores)
    return figures, fit_of(req.measured, figures)


def command_threads(req: PlanRequest) -> int | None:
    """The threads a plan's command runs with: a ``-t`` after ``--``, else the request's
    (None: llama.cpp's default, the physical cores)."""
    given = pass_through_int(req.pass_through, "-t", "--threads")
    return given if given is not None else req.threads or req.physical_cores


def plan_forecast(
    facts: ModelFacts,
    req: PlanRequest,
    placement: Placement,
    settings: Settings,
    basis: tuple[MachineFigures, SpeedFit | None],
    *,
    depth: int = FORECAST_DEPTH,
    n_prompt: int = FORECAST_PROMPT,
) -> Forecast:
    """The speed of ``placement`` on ``basis`` (figures, and the fit of the measured points
    where there are two or more): decode at ``depth``, prefill of an ``n_prompt``-token
    prompt from an empty cache."""
    figures, fit = basis
    layout = placement_layout(
        facts, placement, settings, req.devices, op_offload=op_offload_of(req.pass_through)
    )
    layout = replace(layout, n_threads=command_threads(req))
    return fitted_forecast(
        layout,
        figures,
        fit,
        depth=depth,
        n_prompt=n_prompt,
        prefill_depth=0,
        streams=settings.streams,
    )


def make_plan(facts: ModelFacts, req: PlanRequest, *, brief: bool = False) -> PlanResult:
    """The placement(s) that keep every device within its budget, with checks; when none
    fits, what fails and the nearest plan that fits. ``brief``: only what a repository's
    table of quants shows (the recommended placement, whether it fits and why not): no -ot
    alternative, ubatch hint, forecast, or what would fit instead."""
    target = plan_target(req)
    settings = _context_for(facts, req, target)
    main, alt = _main_plan(facts, req, target, settings, brief=brief)
    override = override_first(req, alt)
    first = alt if override and alt is not None else main
    ram = check_ram(first.memory, req.ram_total_bytes, req.ram_available_bytes)
    failure = None
    if not target.fits(main.memory):
        failure = _gpu_failure(facts, req, main, target, settings, brief=brief)
    elif ram.status == "fail":
        failure = _ram_failure(first, ram)
    gain = alt.memory.gpu_weights_bytes - main.memory.gpu_weights_bytes if alt else 0
    several = target.n > 1  # the per-device fields, only where there are several
    return PlanResult(
        model=req.model_path,
        architecture=facts.architecture,
        is_moe=facts.is_moe,
        device_bytes=sum(d.total_bytes or 0 for d in req.devices),
        target_bytes=None if several else req.target_vram_of(0),
        headroom_bytes=req.headroom_of(0),
        budget_bytes=sum(target.budgets),
        settings=settings,
        training_context=facts.context_length,
        recommended=placement_result(req, main, settings, target),
        alternative=placement_result(req, alt, settings, target) if alt else None,
        override_gain_bytes=gain,
        override_first=override,
        ram=ram,
        threads=req.physical_cores,
        ubatch_hint=None
        if failure or brief
        else _ubatch_hint(facts, main, target, settings, req.extras),
        warnings=_warnings(facts, settings, [main], req.extras) + _free_warning(req, first.memory),
        fails=failure.fails if failure else None,
        reason=failure.reason if failure else None,
        suggestions=failure.suggestions if failure else [],
        nearest=failure.nearest if failure else None,
        device_names=[d.name for d in req.devices] if several else [],
        device_budgets=list(target.budgets) if several else [],
        limiting_device=_limiting(first.memory, target) if several else None,
        forecast=(
            None
            if failure or brief
            else plan_forecast(facts, req, first.placement, settings, speed_basis(req))
        ),
        ctx_note=ctx_max_stop(facts, settings.n_ctx) if req.ctx_max else None,
        overhead_sources={d.name: d.overhead_source for d in req.devices if d.overhead_source},
    )
