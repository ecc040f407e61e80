"""`moetune plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import CommandContext, Option, command, err, handle_errors
from moetune.cli.options import (
    CacheTypeOpt,
    CtxOpt,
    DraftOpt,
    ForceOpt,
    GpuProfileOpt,
    HeadroomOpt,
    JsonOpt,
    MmprojOpt,
    ModelArg,
    ObjectiveOpt,
    OverheadOpt,
    RamBandwidthOpt,
    RamOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    TimeoutOpt,
    VramOpt,
    WorkloadOpt,
    pass_through_of,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.hub.env import DEFAULT_TIMEOUT_S
from moetune.jobs.names import DEFAULT_CACHE_TYPE, DEFAULT_HEADROOM


@command(pass_through=True)
@handle_errors
def plan(
    context: CommandContext,
    model: ModelArg,
    vram: VramOpt = None,
    gpu: GpuProfileOpt = None,
    rpc: RpcOpt = None,
    ram: RamOpt = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    force: ForceOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    n_cpu_moe: Annotated[
        int | None,
        Option(help="Fix N (with --ctx max: the largest context at N).", min=0),
    ] = None,
    overhead: OverheadOpt = None,
    parallel: Annotated[
        int | None,
        Option(help="llama-server slots, -np (default: auto, 4 sharing one cache).", min=1),
    ] = None,
    ubatch: Annotated[int, Option(help="Micro-batch (-ub).", min=1)] = 512,
    gpu_index: Annotated[
        int | None,
        Option(help="Plan for this one detected GPU (nvidia-smi's index; default: all)."),
    ] = None,
    server: ServerOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    verify: Annotated[
        bool,
        Option(
            help="Have llama.cpp's own dry run (llama-fit-params) check the plan "
            "on the devices, where they are here."
        ),
    ] = True,
    ram_bandwidth: RamBandwidthOpt = None,
    objective: ObjectiveOpt = None,
    workload: WorkloadOpt = None,
    show_frontier: Annotated[
        bool,
        Option(
            "--frontier",
            help="Show the speed frontier (on with --objective or --workload).",
        ),
    ] = False,
    speed_from: Annotated[
        Path | None,
        Option(
            help="Calibrate the speed forecast on this file's measurements of the model "
            "(llama-bench -o json/jsonl, a `moetune bench` result; any machine) "
            "(default: those kept for it on this machine).",
            metavar="FILE",
        ),
    ] = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU(s), with a ready command.

    The budget is --target-vram when given (at most the device's size, unless --force), else
    each device's memory minus --headroom.
    Several devices (--vram 24G,12G, --rpc HOST:PORT, or several GPUs): the -ts split too.
    Arguments after -- go into the command; the projector's and the draft's are counted.
    """
    from moetune.core.command import check_pass_through
    from moetune.core.extras import add_extras_flags
    from moetune.core.goal import goal_of
    from moetune.core.plan import check_targets
    from moetune.hub import ModelName, parse_model_arg
    from moetune.jobs.devices import host_ram, plan_devices
    from moetune.jobs.models import open_model
    from moetune.jobs.plan import (
        PlanInputs,
        machine_figures,
        plan_frontier,
        plan_model,
        plan_repo,
    )
    from moetune.jobs.speed_from import points_for
    from moetune.report import SCHEMA_VERSION
    from moetune.report.render import PlanView, QuantsView, render
    from moetune.units import per_device

    pass_through = add_extras_flags(
        pass_through_of(context),
        mmproj=str(mmproj) if mmproj else None,
        draft=str(draft) if draft else None,
    )
    check_pass_through(pass_through)
    goal = goal_of(objective, workload)
    wants_frontier = show_frontier or objective is not None or workload is not None
    arg = parse_model_arg(model)
    repo = isinstance(arg, ModelName) and arg.quant is None  # plan user/model: every quant
    if repo and speed_from is not None:
        raise BadValueError(
            "--speed-from calibrates one model's forecast", hint=f"name a quant: {model}:Q4_K_M"
        )
    # the model first: its own errors (a missing file: FILE_NOT_FOUND) before any GPU detection
    chosen = None if repo else open_model(model)
    found = plan_devices(
        vram=vram, rpc=rpc, gpu_index=gpu_index, gpu_profile=gpu, overhead=overhead, server=server
    )
    n = len(found.devices)
    targets = tuple(per_device(target_vram, n, "--target-vram") or ())
    if not force:
        check_targets(found.devices, targets)
    inputs = PlanInputs(
        found=found,
        pass_through=pass_through,
        ctx=ctx,
        cache_type=cache_type,
        ubatch=ubatch,
        parallel=parallel,
        n_cpu_moe=n_cpu_moe,
        targets=targets,
        headrooms=tuple(per_device(headroom, n, "--headroom") or headroom),
        ram=host_ram(ram),
        figures=machine_figures(n, gpu, ram_bandwidth),
    )
    if chosen is None:
        assert isinstance(arg, ModelName)
        quants = plan_repo(arg, inputs)
        render(QuantsView(quants, found.source), as_json)
        if quants.best is None:
            raise DoesNotFitError(f"no quant of {arg.repo} fits: {quants.reason}")
        return
    points = points_for(
        str(chosen.path) if chosen.path else (chosen.hf_files or (model,))[0],
        speed_from=speed_from,
        schema_version=SCHEMA_VERSION,
        warn=lambda text: err().print(f"warning: {text}", style="yellow", highlight=False),
    )
    inputs = inputs._replace(speed_points=tuple(points))
    result = plan_model(chosen, inputs, verify=verify, server=server)
    speeds = plan_frontier(chosen, inputs, result, goal) if wants_frontier else None
    render(PlanView(result, chosen.facts, found.source, speeds), as_json)
    if not result.fits:  # the document is out; the exit code and one line on stderr say it
        raise DoesNotFitError(f"does not fit: {result.reason}")
