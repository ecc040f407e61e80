"""`moetune plan`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from moetune.cli.app import app, handle_errors, print_report, write_json
from moetune.cli.options import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    CacheTypeOpt,
    CtxOpt,
    DraftOpt,
    GpuProfileOpt,
    HeadroomOpt,
    JsonOpt,
    MmprojOpt,
    ModelArg,
    OverheadOpt,
    PassThroughCommand,
    RamOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    VramOpt,
    pass_through,
)
from moetune.errors import DoesNotFitError, MoetuneError, NoGpuError
from moetune.units import Ctx, Sizes

if TYPE_CHECKING:
    from moetune.cli.models import Model
    from moetune.core.plan import PlanRequest, PlanResult
    from moetune.hub import ModelName, Quant
    from moetune.jobs.devices import DeviceSet


@app.command(cls=PassThroughCommand)
@handle_errors
def plan(
    context: typer.Context,
    model: ModelArg,
    vram: VramOpt = None,
    gpu: GpuProfileOpt = None,
    rpc: RpcOpt = None,
    ram: RamOpt = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    n_cpu_moe: Annotated[
        int | None,
        typer.Option(help="Fix N (with --ctx max: the largest context at N).", min=0),
    ] = None,
    overhead: OverheadOpt = None,
    parallel: Annotated[
        int | None,
        typer.Option(help="llama-server slots, -np (default: auto, 4 sharing one cache).", min=1),
    ] = None,
    ubatch: Annotated[int, typer.Option(help="Micro-batch (-ub).", min=1)] = 512,
    gpu_index: Annotated[
        int | None,
        typer.Option(help="Plan for this one detected GPU (nvidia-smi's index; default: all)."),
    ] = None,
    server: ServerOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    verify: Annotated[
        bool,
        typer.Option(
            help="Have llama.cpp's own dry run (llama-fit-params) check the plan "
            "on the devices, where they are here."
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU(s), with a ready command.

    The budget is --target-vram when given, else each device's memory minus --headroom.
    Several devices (--vram 24G,12G, --rpc HOST:PORT, or several GPUs): the -ts split too.
    Arguments after -- go into the command; the projector's and the draft's are counted.
    """
    from moetune.cli.machine import host_ram, plan_devices
    from moetune.cli.models import open_model
    from moetune.core.command import check_extra
    from moetune.core.extras import extras_args
    from moetune.core.plan import make_plan
    from moetune.hub import ModelName, parse_model_arg
    from moetune.units import per_device

    extra = extras_args(
        pass_through(context),
        mmproj=str(mmproj) if mmproj else None,
        draft=str(draft) if draft else None,
    )
    check_extra(extra)
    found = plan_devices(
        vram=vram, rpc=rpc, gpu_index=gpu_index, gpu_profile=gpu, overhead=overhead, server=server
    )
    n = len(found.devices)
    inputs = _Inputs(
        found=found,
        extra=extra,
        ctx=ctx,
        cache_type=cache_type,
        ubatch=ubatch,
        parallel=parallel,
        n_cpu_moe=n_cpu_moe,
        targets=tuple(per_device(target_vram, n, "--target-vram") or ()),
        headrooms=tuple(per_device(headroom, n, "--headroom") or headroom),
        ram=host_ram(ram),
    )
    arg = parse_model_arg(model)
    if isinstance(arg, ModelName) and arg.quant is None:
        _plan_quants(arg, inputs, as_json)
        return
    chosen = open_model(model)
    request = _request(chosen, inputs)
    result = make_plan(chosen.facts, request)
    result = (
        _checked(chosen, request, result, found, server)
        if verify
        else (result.model_copy(update={"checked": "skipped (--no-verify)"}))
    )
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import plan_payload

        write_json(to_json(plan_payload(result)))
    else:
        from moetune.report.plan import render_plan

        print_report(render_plan(result, chosen.facts, found.source))
    if not result.fits:  # the document is out; the exit code and one line on stderr say it
        raise DoesNotFitError(f"does not fit: {result.reason}")


def predicted_plan(
    chosen: Model,
    *,
    vram: Sizes | None = None,
    gpu: str | None = None,
    ctx: Ctx | None = None,
    cache_type: str = DEFAULT_CACHE_TYPE,
    extra: tuple[str, ...] = (),
    missing: MoetuneError | None = None,
) -> tuple[PlanResult, str]:
    """The plan `moetune plan MODEL` makes with these options and the defaults (for a command
    that falls back to it when nothing is tuned: alias, export), and which GPU it is for.
    ``missing``: why nothing was tuned, the error when there is no GPU to plan for either."""
    from moetune.cli.machine import host_ram, plan_devices
    from moetune.core.plan import make_plan
    from moetune.units import parse_sizes, per_device

    try:
        found = plan_devices(
            vram=vram, rpc=None, gpu_index=None, gpu_profile=gpu, overhead=None, server=None
        )
    except NoGpuError as exc:
        if missing is None:
            raise
        hint = (missing.hint + "; " if missing.hint else "") + "or give --gpu ID or --vram SIZE"
        raise type(missing)(f"{missing.message}, and no GPU here to plan for", hint=hint) from exc
    headroom = parse_sizes(DEFAULT_HEADROOM)
    headrooms = tuple(per_device(headroom, len(found.devices), "--headroom") or headroom)
    inputs = _Inputs(
        found=found,
        extra=extra,
        ctx=ctx,
        cache_type=cache_type,
        ubatch=512,
        parallel=None,
        n_cpu_moe=None,
        targets=(),
        headrooms=headrooms,
        ram=host_ram(None),
    )
    return make_plan(chosen.facts, _request(chosen, inputs)), found.source


class _Inputs(NamedTuple):
    """What a plan is asked for, apart from the model."""

    found: DeviceSet
    extra: tuple[str, ...]
    ctx: Ctx | None
    cache_type: str
    ubatch: int
    parallel: int | None
    n_cpu_moe: int | None
    targets: tuple[int, ...]
    headrooms: tuple[int, ...]
    ram: tuple[int | None, int | None, int | None]


def _request(chosen: Model, inputs: _Inputs) -> PlanRequest:
    """The plan request for ``chosen`` (its context default, the companions it brings)."""
    from moetune.core.plan import PlanRequest
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.jobs.loader import with_extras

    facts, ctx = chosen.facts, inputs.ctx
    n_ctx = ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
    devices, first = inputs.found.devices, inputs.found.devices[0]
    settings = Settings(
        n_ctx=n_ctx,
        type_k=inputs.cache_type,
        type_v=inputs.cache_type,
        n_ubatch=inputs.ubatch,
        gpu_overhead_bytes=first.overhead_bytes,
        device_kind=first.kind,
    )
    settings, extras = with_extras(settings, facts, inputs.extra, sibling=chosen.sibling)
    if inputs.parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = settings.model_copy(
            update={"n_seq": inputs.parallel, "kv_unified": False, "explicit_parallel": True}
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
        extra_args=inputs.extra,
        extras=extras,
    )


def _plan_quants(name: ModelName, inputs: _Inputs, as_json: bool) -> None:
    """``plan user/model``: every quant of the repository, and the two picks."""
    from moetune.cli.models import model_of_quant
    from moetune.core.plan import make_plan
    from moetune.hub import list_repo
    from moetune.jobs.quants import plan_quants

    listing = list_repo(name)
    opened: dict[str, Model] = {}  # each quant's headers are read once, for both plans

    def plan_of(quant: Quant, ctx_max: bool) -> PlanResult:
        if quant.tag not in opened:
            opened[quant.tag] = model_of_quant(name, listing, quant)
        chosen = opened[quant.tag]
        request = _request(chosen, inputs._replace(ctx=_MAX if ctx_max else inputs.ctx))
        return make_plan(chosen.facts, request)

    result = plan_quants(name, listing, plan_of, inputs.found.devices, inputs.ram)
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import quants_payload

        write_json(to_json(quants_payload(result)))
    else:
        from moetune.report.quants import render_quants

        print_report(render_quants(result, inputs.found.source))
    if result.best is None:
        raise DoesNotFitError(f"no quant of {name.repo} fits: {result.reason}")


_MAX = Ctx(None)


def _checked(
    chosen: Model, request: PlanRequest, result: PlanResult, found: DeviceSet, server: str | None
) -> PlanResult:
    """The plan checked by llama.cpp where the devices are here and llama-fit-params is
    installed; else it says it is a prediction, and why."""
    if not (found.here or _described_here(found)):
        return result.model_copy(update={"checked": "prediction (the devices are not here)"})
    from moetune.errors import MoetuneError
    from moetune.jobs.verify import checked_plan, find_tool, reachable
    from moetune.llamacpp.process import find_server

    endpoints = [d.description for d in found.devices if d.kind == "rpc"]
    if not all(map(reachable, endpoints)):
        return result.model_copy(update={"checked": "prediction (the devices are not here)"})
    try:
        tool = find_tool(find_server(server))
    except MoetuneError:
        tool = None
    if tool is None:
        return result.model_copy(update={"checked": "prediction (llama-fit-params not found)"})
    if chosen.facts.header_only:
        why = "prediction (a header-only file: llama.cpp cannot dry-run it)"
        return result.model_copy(update={"checked": why})
    if chosen.path is None:  # llama-fit-params would download it
        why = "prediction (not downloaded: llama.cpp's dry run needs the file)"
        return result.model_copy(update={"checked": why})
    try:
        return checked_plan(chosen.facts, request, result, tool, model_path=str(chosen.path))
    except MoetuneError as exc:  # the check is a bonus: the plan stands as a prediction
        return result.model_copy(
            update={
                "checked": "prediction (llama.cpp's check failed)",
                "warnings": [*result.warnings, exc.message],
            }
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
