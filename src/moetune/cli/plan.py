"""`moetune plan`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

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
from moetune.errors import DoesNotFitError

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts
    from moetune.core.plan import PlanRequest, PlanResult
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
    from moetune.core.command import check_extra
    from moetune.core.extras import extras_args, with_extras
    from moetune.core.facts import load_model_facts
    from moetune.core.plan import PlanRequest, make_plan
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.units import per_device

    facts = load_model_facts(model)
    extra = extras_args(pass_through(context), mmproj=str(mmproj) if mmproj else None,
                        draft=str(draft) if draft else None)  # fmt: skip
    check_extra(extra)
    n_ctx = ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
    found = plan_devices(vram=vram, rpc=rpc, gpu_index=gpu_index, gpu_profile=gpu,
                         overhead=overhead, server=server)  # fmt: skip
    devices, first = found.devices, found.devices[0]
    n = len(devices)
    targets = per_device(target_vram, n, "--target-vram")
    headrooms = per_device(headroom, n, "--headroom") or headroom
    ram_total, ram_available, cores = host_ram(ram)
    settings = Settings(n_ctx=n_ctx, type_k=cache_type, type_v=cache_type, n_ubatch=ubatch,
                        gpu_overhead_bytes=first.overhead_bytes,
                        device_kind=first.kind)  # fmt: skip
    settings = with_extras(settings, facts, extra)
    if parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = settings.model_copy(
            update={"n_seq": parallel, "kv_unified": False, "explicit_parallel": True}
        )
    request = PlanRequest(
        model_path=str(model), device_bytes=first.total_bytes or 0,
        target_bytes=targets[0] if targets else None, headroom_bytes=headrooms[0],
        settings=settings, ctx_max=ctx is not None and ctx.is_max, n_cpu_moe=n_cpu_moe,
        ram_total_bytes=ram_total, ram_available_bytes=ram_available, physical_cores=cores,
        gpu_free_bytes=found.gpu_free_bytes, devices=devices if n > 1 else (),
        device_targets=tuple(targets) if targets and n > 1 else (),
        device_headrooms=tuple(headrooms) if n > 1 else (), device_args=found.device_args,
        extra_args=extra,
    )  # fmt: skip
    result = make_plan(facts, request)
    result = _checked(facts, request, result, found, server) if verify else (
        result.model_copy(update={"checked": "skipped (--no-verify)"}))  # fmt: skip
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import plan_payload

        write_json(to_json(plan_payload(result)))
    else:
        from moetune.report.plan import render_plan

        print_report(render_plan(result, facts, found.source))
    if not result.fits:  # the document is out; the exit code and one line on stderr say it
        raise DoesNotFitError(f"does not fit: {result.reason}")


def _checked(facts: ModelFacts, request: PlanRequest, result: PlanResult, found: DeviceSet,
             server: str | None) -> PlanResult:  # fmt: skip
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
    if facts.header_only:
        why = "prediction (a header-only file: llama.cpp cannot dry-run it)"
        return result.model_copy(update={"checked": why})
    try:
        return checked_plan(facts, request, result, tool)
    except MoetuneError as exc:  # the check is a bonus: the plan stands as a prediction
        return result.model_copy(update={"checked": "prediction (llama.cpp's check failed)",
                                         "warnings": [*result.warnings, exc.message]})  # fmt: skip


def _described_here(found: DeviceSet) -> bool:
    """Devices described by --vram are here when the GPUs they name are detected."""
    if not found.source.startswith("given"):
        return False
    wanted = sum(d.kind == "cuda" for d in found.devices)
    if wanted == 0:
        return True
    from moetune.hardware import detect_gpu_probe, nvidia_driver_here

    return nvidia_driver_here() and wanted <= len(detect_gpu_probe().gpus())
