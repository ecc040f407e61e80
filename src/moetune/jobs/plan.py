"""What ``moetune plan`` computes: the request for a model on a device set, the plan, llama.cpp's
check of it where the devices are here, every quant of a repository (``plan user/model``), and
the plan alias and export fall back to when nothing is tuned (``predicted_plan``)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from moetune.errors import BadValueError, MoetuneError, NoGpuError
from moetune.units import Ctx, RamRate, Sizes, Workload

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from moetune.core.calibrate import Measured
    from moetune.core.facts import ModelFacts
    from moetune.core.frontier import Frontier
    from moetune.core.goal import Goal
    from moetune.core.plan import PlanRequest, PlanResult
    from moetune.core.ram import RamFigure
    from moetune.core.speed import MachineFigures
    from moetune.core.together import TogetherPlan
    from moetune.hub import ModelName, Quant, RepoListing
    from moetune.jobs.devices import DeviceSet
    from moetune.jobs.models import Model
    from moetune.jobs.quants import QuantsResult
    from moetune.records.speed import SpeedModel, SpeedPoint

DEFAULT_UBATCH = 512  # llama.cpp's -ub


def predicted_plan(
    chosen: Model,
    *,
    vram: Sizes | None = None,
    gpu: str | None = None,
    rpc: str | None = None,
    targets: Sizes | None = None,
    ctx: Ctx | None = None,
    cache_type: str,
    pass_through: tuple[str, ...] = (),
    missing: MoetuneError | None = None,
    ram: int | None = None,
    parallel: int | None = None,
) -> tuple[PlanResult, str]:
    """The plan `moetune plan MODEL` makes with these options and the defaults (for a command
    that falls back to it when nothing is tuned: alias, export), and which devices it is for;
    ``rpc``: RPC servers among them (``--rpc``), ``targets``: ``--target-vram`` (checked
    against each device), ``ram``: the host RAM it plans for (``--ram``; default: this
    machine's), ``parallel``: ``--parallel N``. ``missing``: why nothing was tuned, said in
    the NO_GPU error when there is no GPU to plan for either."""
    from moetune.core.plan import make_plan
    from moetune.jobs.devices import plan_devices

    try:
        found = plan_devices(
            vram=vram, rpc=rpc, gpu_index=None, gpu_profile=gpu, overhead=None, server=None
        )
    except NoGpuError as exc:
        if missing is None:
            raise
        hint = (missing.hint + "; " if missing.hint else "") + "or give --gpu ID or --vram SIZE"
        # what stops it is the GPU: nothing to plan for (the missing profile is why it plans)
        raise NoGpuError(f"{missing.message}, and no GPU here to plan for", hint=hint) from exc
    inputs = plan_inputs(
        found,
        pass_through=pass_through,
        ctx=ctx,
        cache_type=cache_type,
        targets=targets,
        ram=ram,
        parallel=parallel,
    )
    return make_plan(chosen.facts, plan_request(chosen, inputs)), found.source


def plan_inputs(
    found: DeviceSet,
    *,
    pass_through: tuple[str, ...],
    ctx: Ctx | None,
    cache_type: str,
    targets: Sizes | None,
    ram: int | None,
    headroom: Sizes | None = None,
    force: bool = False,
    ubatch: int = DEFAULT_UBATCH,
    parallel: int | None = None,
    n_cpu_moe: int | None = None,
) -> PlanInputs:
    """What a plan on ``found`` is asked for, from the options of ``moetune plan`` (their
    defaults: what alias and export plan for): ``targets`` (``--target-vram``, checked
    against each device unless ``force``), ``headroom`` (default: plan's 1.5G), ``ram``
    (``--ram``; default: this machine's)."""
    from moetune.core.plan import check_targets
    from moetune.core.planner import DEFAULT_HEADROOM_BYTES
    from moetune.jobs.devices import host_ram
    from moetune.units import per_device

    n = len(found.devices)
    per_target = tuple(per_device(targets, n, "--target-vram") or ())
    if not force:
        check_targets(found.devices, per_target)
    if headroom is None:
        headrooms = (DEFAULT_HEADROOM_BYTES,) * n
    else:
        headrooms = tuple(per_device(headroom, n, "--headroom") or headroom)
    return PlanInputs(
        found=found,
        pass_through=pass_through,
        ctx=ctx,
        cache_type=cache_type,
        ubatch=ubatch,
        parallel=parallel,
        n_cpu_moe=n_cpu_moe,
        targets=per_target,
        headrooms=headrooms,
        ram=host_ram(ram),
    )


class PlanInputs(NamedTuple):
    """What a plan is asked for, apart from the model."""

    found: DeviceSet
    pass_through: tuple[str, ...]
    ctx: Ctx | None
    cache_type: str
    ubatch: int
    parallel: int | None
    n_cpu_moe: int | None
    targets: tuple[int, ...]
    headrooms: tuple[int, ...]
    ram: tuple[int | None, int | None, int | None]
    figures: MachineFigures | None = None  # what the speed forecast knows of the machine
    speed_points: tuple[SpeedPoint, ...] = ()  # measured speeds it is calibrated on
    speed_model: SpeedModel | None = None  # the model planned, as its points name it


def machine_figures(found: DeviceSet, ram: RamFigure | None, cores: int | None) -> MachineFigures:
    """The figures a plan's forecast has, each with where it came from
    (``jobs.figures.machine_figures``): a device's hardware profile (``--gpu``, ``--vram
    SIZE:ID``, a detected card's), else the typical figures of its class; the RAM read
    bandwidth (given, saved or measured on this machine, else typical); the CPU's from this
    machine's ``cores``."""
    from moetune.jobs.figures import device_profiles
    from moetune.jobs.figures import machine_figures as figures_of_machine

    profiles = device_profiles(found.devices, found.profiles)
    return figures_of_machine(found.devices, profiles, ram, cores=cores)


def batch_sizes(ubatch: int, pass_through: Sequence[str]) -> tuple[int, int]:
    """(-ub, -b) of a plan: ``--ubatch`` or the ``-ub`` after ``--`` (BAD_VALUE where both
    are given and differ), and the ``-b`` after ``--`` (BAD_VALUE below the ubatch, which
    llama-server would clamp to it), else the larger of llama.cpp's 2048 and the ubatch."""
    from moetune.core.command import pass_through_int

    given = pass_through_int(pass_through, "-ub", "--ubatch-size")
    if given is not None and ubatch not in (DEFAULT_UBATCH, given):
        raise BadValueError(f"--ubatch {ubatch} and -ub {given} after --: give the ubatch once")
    n_ubatch = given or ubatch
    n_batch = pass_through_int(pass_through, "-b", "--batch-size")
    if n_batch is not None and n_ubatch > n_batch:
        raise BadValueError(
            f"the ubatch {n_ubatch} is above -b {n_batch} after --: llama-server would clamp "
            f"it to {n_batch}; raise -b or lower the ubatch"
        )
    return n_ubatch, n_batch or max(2048, n_ubatch)


def plan_request(chosen: Model, inputs: PlanInputs) -> PlanRequest:
    """The plan request for ``chosen`` (its context default, the companions it brings)."""
    from moetune.core.plan import PlanRequest
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.jobs.loader import with_extras
    from moetune.jobs.values import op_offload_min_batch

    facts, ctx = chosen.facts, inputs.ctx
    n_ctx = ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
    devices, first = inputs.found.devices, inputs.found.devices[0]
    n_ubatch, n_batch = batch_sizes(inputs.ubatch, inputs.pass_through)
    settings = Settings(
        n_ctx=n_ctx,
        type_k=inputs.cache_type,
        type_v=inputs.cache_type,
        n_ubatch=n_ubatch,
        n_batch=n_batch,
        gpu_overhead_bytes=first.overhead_bytes,
        device_kind=first.kind,
        op_offload_min_batch=op_offload_min_batch(),
    )
    settings, extras = with_extras(settings, facts, inputs.pass_through, sibling=chosen.sibling)
    measured: tuple[Measured, ...] = ()
    if inputs.speed_points:
        from moetune.jobs.speed import measured_of

        measured = tuple(
            measured_of(inputs.speed_points, facts, settings, devices, model=inputs.speed_model)
        )
    if inputs.parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = replace(
            settings, n_seq=inputs.parallel, kv_unified=False, explicit_parallel=True
        )
    flag, source = chosen.named
    ram_total, ram_available, cores = inputs.ram
    targets, headrooms = inputs.targets, inputs.headrooms
    return PlanRequest(
        model_path=source,
        model_flag=flag,
        devices=devices,
        target_vram=targets,
        headrooms=headrooms,
        settings=settings,
        ctx_max=ctx is not None and ctx.is_max,
        n_cpu_moe=inputs.n_cpu_moe,
        ram_total_bytes=ram_total,
        ram_available_bytes=ram_available,
        physical_cores=cores,
        gpu_free_bytes=inputs.found.gpu_free_bytes,
        device_args=inputs.found.device_args,
        pass_through=inputs.pass_through,
        extras=extras,
        figures=inputs.figures,
        measured=measured,
    )


def plan_repo(name: ModelName, inputs: PlanInputs) -> QuantsResult:
    """``plan user/model``: every quant of the repository, and the two picks. The headers of
    the quants that will all be planned are read :data:`HEADER_READERS` at a time, ahead of
    the planning, which takes them in order."""
    from moetune.hub import list_repo
    from moetune.jobs.quants import plan_quants

    listing = list_repo(name)
    with _Opened(name, listing) as opened:

        def plan_of(quant: Quant, ctx_max: bool) -> PlanResult:
            from moetune.core.plan import make_plan

            chosen = opened.model(quant)
            request = plan_request(chosen, inputs._replace(ctx=_MAX if ctx_max else inputs.ctx))
            return make_plan(chosen.facts, request, brief=True)  # what a row shows

        return plan_quants(
            name, listing, plan_of, inputs.found.devices, inputs.ram, prefetch=opened.prefetch
        )


HEADER_READERS = 4  # headers read at once (each its own connection to the hub)


class _Opened:
    """Each quant's model (headers read once, for both of its plans), read here or ahead on
    a few threads; leaving stops the reads not yet begun (those under way end by their
    --timeout)."""

    def __init__(self, name: ModelName, listing: RepoListing) -> None:
        self.name, self.listing = name, listing
        self.ahead: dict[str, Future[Model]] = {}  # by the quant's first file: tags may repeat
        self.opened: dict[str, Model] = {}
        self.pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> _Opened:
        return self

    def __exit__(self, *_: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def prefetch(self, quants: Sequence[Quant]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if len(quants) < 2:
            return
        self.pool = ThreadPoolExecutor(HEADER_READERS, thread_name_prefix="moetune-header")
        for quant in quants:
            key = quant.first.path
            if key not in self.ahead:
                context = contextvars.copy_context()  # --timeout, as the command set it
                self.ahead[key] = self.pool.submit(context.run, self._open, quant)

    def model(self, quant: Quant) -> Model:
        key = quant.first.path
        if key not in self.opened:
            ahead = self.ahead.pop(key, None)
            self.opened[key] = ahead.result() if ahead is not None else self._open(quant)
        return self.opened[key]

    def _open(self, quant: Quant) -> Model:
        from moetune.jobs.models import model_of_quant

        return model_of_quant(self.name, self.listing, quant)


_MAX = Ctx(None)


def plan_model(
    chosen: Model, inputs: PlanInputs, *, verify: bool, server: str | None
) -> PlanResult:
    """The plan for ``chosen``, checked by llama.cpp unless ``verify`` is off."""
    from moetune.core.plan import make_plan

    request = plan_request(chosen, inputs)
    result = make_plan(chosen.facts, request)
    if not verify:
        return replace(result, checked="skipped (--no-verify)")
    return _checked(chosen, request, result, inputs.found, server)


def plan_frontier(
    chosen: Model, inputs: PlanInputs, result: PlanResult, goal: Goal
) -> Frontier | None:
    """The candidates that fit beside ``result``, each with its forecast, ordered by ``goal``
    (uncalibrated: the pick stays ``result``'s)."""
    from moetune.core.frontier import frontier

    return frontier(chosen.facts, plan_request(chosen, inputs), result, goal, error=None)


def _checked(
    chosen: Model, request: PlanRequest, result: PlanResult, found: DeviceSet, server: str | None
) -> PlanResult:
    """The plan checked by llama.cpp where the devices are here and llama-fit-params is
    installed; else it says it is a prediction, and why."""
    if not (found.here or _described_here(found)):
        return replace(result, checked="prediction (the devices are not here)")
    from moetune.jobs.verify import checked_plan, find_tool, reachable
    from moetune.llamacpp.process import find_server

    endpoints = [d.description for d in found.devices if d.kind == "rpc"]
    if not all(map(reachable, endpoints)):
        return replace(result, checked="prediction (the devices are not here)")
    try:
        tool = find_tool(find_server(server))
    except MoetuneError:
        tool = None
    if tool is None:
        return replace(result, checked="prediction (llama-fit-params not found)")
    if chosen.facts.header_only:
        why = "prediction (a header-only file: llama.cpp cannot dry-run it)"
        return replace(result, checked=why)
    if chosen.path is None:  # llama-fit-params would download it
        why = "prediction (not downloaded: llama.cpp's dry run needs the file)"
        return replace(result, checked=why)
    try:
        return checked_plan(chosen.facts, request, result, tool, model_path=str(chosen.path))
    except MoetuneError as exc:  # the check is a bonus: the plan stands as a prediction
        return replace(
            result,
            checked="prediction (llama.cpp's check failed)",
            warnings=[*result.warnings, exc.message],
        )


def _described_here(found: DeviceSet) -> bool:
    """Devices described by --vram are here when the GPUs they name are detected."""
    if not found.source.startswith("given"):
        return False
    wanted = sum(d.kind == "cuda" for d in found.devices)
    if wanted == 0:
        return True
    from moetune.hardware import detect_gpu_probe, nvidia_driver_here

    return nvidia_driver_here() and wanted <= len(detect_gpu_probe().gpus())


class ModelPlan(NamedTuple):
    """``moetune plan MODEL``: the plan, the model's facts, where the devices came from, and
    the speed frontier where it was asked for."""

    result: PlanResult
    facts: ModelFacts
    source: str
    speeds: Frontier | None
    ram: RamFigure | None = None  # the RAM read bandwidth the forecast used, and its source


class RepoPlan(NamedTuple):
    """``moetune plan user/model``: every quant of the repository planned."""

    quants: QuantsResult
    source: str
    repo: str


def plan_command(
    model: str,
    *,
    pass_through: tuple[str, ...],
    mmproj: Path | None,
    draft: Path | None,
    vram: Sizes | None,
    gpu: str | None,
    rpc: str | None,
    gpu_index: int | None,
    overhead: Sizes | None,
    server: str | None,
    ram: int | None,
    ctx: Ctx | None,
    cache_type: str,
    targets: Sizes | None,
    force: bool,
    headroom: Sizes,
    ubatch: int,
    parallel: int | None,
    n_cpu_moe: int | None,
    verify: bool,
    ram_bandwidth: RamRate | None,
    measure: bool,
    objective: str | None,
    workload: Workload | None,
    frontier: bool,
    speed_from: Path | None,
    schema_version: int,
    warn: Callable[[str], None],
) -> ModelPlan | RepoPlan:
    """What ``moetune plan`` shows: ``model`` opened (its own errors before any device is
    detected), the devices found, the plan (checked by llama.cpp where it can be) and its
    speed frontier (with ``frontier``, ``objective`` or ``workload``); a repository named
    without a quant: every quant planned."""
    from moetune.core.command import check_pass_through
    from moetune.core.goal import goal_of
    from moetune.hub import ModelName, parse_model_arg
    from moetune.jobs.devices import plan_devices
    from moetune.jobs.figures import ram_figure
    from moetune.jobs.models import open_named, with_companions
    from moetune.jobs.speed_from import points_for

    pass_through = with_companions(pass_through, mmproj=mmproj, draft=draft)
    check_pass_through(pass_through)
    goal = goal_of(objective, workload)
    arg = parse_model_arg(model)
    repo = isinstance(arg, ModelName) and arg.quant is None  # plan user/model: every quant
    if repo and speed_from is not None:
        raise BadValueError(
            "--speed-from calibrates one model's forecast", hint=f"name a quant: {model}:Q4_K_M"
        )
    chosen = None if repo else open_named(arg)
    found = plan_devices(
        vram=vram, rpc=rpc, gpu_index=gpu_index, gpu_profile=gpu, overhead=overhead, server=server
    )
    inputs = plan_inputs(
        found,
        pass_through=pass_through,
        ctx=ctx,
        cache_type=cache_type,
        targets=targets,
        ram=ram,
        headroom=headroom,
        force=force,
        ubatch=ubatch,
        parallel=parallel,
        n_cpu_moe=n_cpu_moe,
    )
    ram_read = ram_figure(ram_bandwidth, measure=measure, warn=warn)
    inputs = inputs._replace(figures=machine_figures(found, ram_read, inputs.ram[2]))
    if chosen is None:
        assert isinstance(arg, ModelName)
        return RepoPlan(plan_repo(arg, inputs), found.source, arg.repo)
    named = str(chosen.path) if chosen.path else (chosen.hf_files or (model,))[0]
    points = points_for(
        named,
        speed_from=speed_from,
        schema_version=schema_version,
        warn=warn,
        devices=found.devices if found.here else None,
    )
    if points:
        from moetune.jobs.speed import model_of

        inputs = inputs._replace(speed_points=tuple(points), speed_model=model_of(named))
    result = plan_model(chosen, inputs, verify=verify, server=server)
    if points and result.forecast is not None:
        from moetune.jobs.speed_from import warn_disagreeing

        calibration = result.forecast.calibration
        warn_disagreeing(calibration, named, speed_from=speed_from, warn=warn)
    wants_frontier = frontier or objective is not None or workload is not None
    speeds = plan_frontier(chosen, inputs, result, goal) if wants_frontier else None
    return ModelPlan(result, chosen.facts, found.source, speeds, ram_read)


def plan_together_command(
    models: Sequence[str],
    *,
    weights: str | None,
    vram: Sizes | None,
    gpu: str | None,
    rpc: str | None,
    gpu_index: int | None,
    overhead: Sizes | None,
    server: str | None,
    ram: int | None,
    ctx: Ctx | None,
    cache_type: str,
    targets: Sizes | None,
    force: bool,
    headroom: Sizes,
    objective: str | None,
    workload: Workload | None,
    ram_bandwidth: RamRate | None,
    measure: bool,
    warn: Callable[[str], None],
) -> TogetherPlan:
    """``moetune plan A B --together``: the models opened, the devices found, and their plan
    loaded at once (core/together.py: the budgets and the RAM shared, the split by the goal's
    forecast weighted by ``weights``); with an RPC device, one at a time (``warn`` says so)."""
    from moetune.core.goal import goal_of
    from moetune.core.together import parse_weights, plan_together
    from moetune.hub import parse_model_arg
    from moetune.jobs.devices import plan_devices
    from moetune.jobs.figures import ram_figure
    from moetune.jobs.models import open_named

    if len(models) < 2:
        raise BadValueError("--together plans two models or more", hint="name them: plan A B")
    shares = parse_weights(weights, len(models))
    opened = [open_named(parse_model_arg(m)) for m in models]
    found = plan_devices(
        vram=vram, rpc=rpc, gpu_index=gpu_index, gpu_profile=gpu, overhead=overhead, server=server
    )
    inputs = plan_inputs(
        found,
        pass_through=(),
        ctx=ctx,
        cache_type=cache_type,
        targets=targets,
        ram=ram,
        headroom=headroom,
        force=force,
    )
    ram_read = ram_figure(ram_bandwidth, measure=measure, warn=warn)
    inputs = inputs._replace(figures=machine_figures(found, ram_read, inputs.ram[2]))
    planned = [
        (text, chosen.facts, plan_request(chosen, inputs))
        for text, chosen in zip(models, opened, strict=True)
    ]
    together = plan_together(planned, goal_of(objective, workload), shares)
    for line in together.warnings:
        warn(line)
    return together
