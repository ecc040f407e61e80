"""`moetune plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from moetune.cli.base import Argument, CommandContext, Option, command, handle_errors
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
    WeightsOpt,
    WorkloadOpt,
    bounds,
    pass_through_of,
    whole,
)
from moetune.errors import DoesNotFitError
from moetune.jobs.names import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_TIMEOUT_S,
    MAX_GPU_INDEX,
    MAX_N_CPU_MOE,
    MAX_PARALLEL,
    MAX_UBATCH,
)


@command(pass_through=True)
@handle_errors
def plan(
    context: CommandContext,
    model: ModelArg,
    others: Annotated[
        list[str] | None,
        Argument(help="More models, planned --together with the first.", metavar="[MODEL]..."),
    ] = None,
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
        Option(
            help=f"Fix N (with --ctx max: the largest context at N), {bounds(0, MAX_N_CPU_MOE)}.",
            parser=whole(0, MAX_N_CPU_MOE),
            metavar="N",
        ),
    ] = None,
    overhead: OverheadOpt = None,
    parallel: Annotated[
        int | None,
        Option(
            help=f"llama-server slots, -np, {bounds(1, MAX_PARALLEL)} (default: auto, 4 sharing "
            "one cache).",
            parser=whole(1, MAX_PARALLEL),
            metavar="N",
        ),
    ] = None,
    ubatch: Annotated[
        int,
        Option(
            help=f"Micro-batch (-ub), {bounds(1, MAX_UBATCH)}.",
            parser=whole(1, MAX_UBATCH),
            metavar="N",
        ),
    ] = 512,
    gpu_index: Annotated[
        int | None,
        Option(
            help="Plan for this one detected GPU (nvidia-smi's index, "
            f"{bounds(0, MAX_GPU_INDEX)}; default: all).",
            parser=whole(0, MAX_GPU_INDEX),
            metavar="N",
        ),
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
    measure: Annotated[
        bool,
        Option(
            "--measure/--no-measure",
            help="Measure this machine's RAM read bandwidth (about a second, once: it is "
            "saved) where no --ram-bandwidth is given and none is saved; --no-measure "
            "assumes a typical one (dual-channel DDR5-5600).",
        ),
    ] = True,
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
    together: Annotated[
        bool,
        Option(
            "--together",
            help="Plan the models to stay loaded at once (each its own llama-server: a "
            "router's children) on the same devices and RAM: the budgets shared, the split "
            "chosen by the forecast, weighted by --weights.",
        ),
    ] = False,
    weights: WeightsOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU(s), with a ready command.

    The budget is --target-vram when given (at most the device's size, unless --force), else
    each device's memory minus --headroom.
    Several devices (--vram 24G,12G, --rpc HOST:PORT, or several GPUs): the -ts split too.
    Arguments after -- go into the command; the projector's and the draft's are counted.
    """
    from moetune.jobs.plan import DEFAULT_UBATCH, RepoPlan, plan_command
    from moetune.report import SCHEMA_VERSION
    from moetune.report.line import warn
    from moetune.report.render import PlanView, QuantsView, render

    if together or others or weights is not None:
        _plan_together(
            [model, *(others or [])],
            together=together,
            unsupported={
                "arguments after --": bool(pass_through_of(context)),
                "--mmproj": mmproj is not None,
                "--draft": draft is not None,
                "--n-cpu-moe": n_cpu_moe is not None,
                "--ubatch": ubatch != DEFAULT_UBATCH,
                "--parallel": parallel is not None,
                "--frontier": show_frontier,
                "--speed-from": speed_from is not None,
            },
            weights=weights,
            vram=vram,
            gpu=gpu,
            rpc=rpc,
            gpu_index=gpu_index,
            overhead=overhead,
            server=server,
            ram=ram,
            ctx=ctx,
            cache_type=cache_type,
            targets=target_vram,
            force=force,
            headroom=headroom,
            objective=objective,
            workload=workload,
            ram_bandwidth=ram_bandwidth,
            measure=measure,
            as_json=as_json,
        )
        return
    planned = plan_command(
        model,
        pass_through=pass_through_of(context),
        mmproj=mmproj,
        draft=draft,
        vram=vram,
        gpu=gpu,
        rpc=rpc,
        gpu_index=gpu_index,
        overhead=overhead,
        server=server,
        ram=ram,
        ctx=ctx,
        cache_type=cache_type,
        targets=target_vram,
        force=force,
        headroom=headroom,
        ubatch=ubatch,
        parallel=parallel,
        n_cpu_moe=n_cpu_moe,
        verify=verify,
        ram_bandwidth=ram_bandwidth,
        measure=measure,
        objective=objective,
        workload=workload,
        frontier=show_frontier,
        speed_from=speed_from,
        schema_version=SCHEMA_VERSION,
        warn=warn,
    )
    if isinstance(planned, RepoPlan):
        render(QuantsView(planned.quants, planned.source), as_json)
        if planned.quants.best is None:
            raise DoesNotFitError(f"no quant of {planned.repo} fits: {planned.quants.reason}")
        return
    view = PlanView(planned.result, planned.facts, planned.source, planned.speeds, planned.ram)
    render(view, as_json)
    if not planned.result.fits:  # the document is out; the exit code and one line on stderr say it
        raise DoesNotFitError(f"does not fit: {planned.result.reason}")


def _plan_together(
    models: list[str],
    *,
    together: bool,
    unsupported: dict[str, bool],
    weights: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """``plan A B --together``: the models planned to stay loaded at once (each with the
    plan's defaults: the options of one model's placement are refused)."""
    from moetune.errors import BadValueError
    from moetune.jobs.plan import plan_together_command
    from moetune.report.line import warn
    from moetune.report.render import TogetherView, render

    if not together:
        raise BadValueError(
            "several models (or --weights) are planned --together",
            hint="add --together, or plan one model",
        )
    if given := [name for name, on in unsupported.items() if on]:
        raise BadValueError(f"--together does not take {', '.join(given)}")
    result = plan_together_command(models, weights=weights, warn=warn, **options)
    render(TogetherView(result), as_json)
