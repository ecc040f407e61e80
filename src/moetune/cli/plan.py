"""`moetune plan`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors, print_report, write_json
from moetune.cli.options import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_OVERHEAD,
    CacheTypeOpt,
    Command,
    CtxOpt,
    GpuProfileOpt,
    HeadroomOpt,
    JsonOpt,
    ModelArg,
    OverheadOpt,
    RamOpt,
    TargetVramOpt,
    VramOpt,
)
from moetune.errors import DoesNotFitError


@app.command(cls=Command)
@handle_errors
def plan(
    model: ModelArg,
    vram: VramOpt = None,
    gpu: GpuProfileOpt = None,
    ram: RamOpt = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    n_cpu_moe: Annotated[
        int | None,
        typer.Option(help="Fix N (with --ctx max: the largest context at N).", min=0),
    ] = None,
    overhead: OverheadOpt = DEFAULT_OVERHEAD,  # type: ignore[assignment]
    parallel: Annotated[
        int | None,
        typer.Option(help="llama-server slots, -np (default: auto, 4 sharing one cache).", min=1),
    ] = None,
    ubatch: Annotated[int, typer.Option(help="Micro-batch (-ub).", min=1)] = 512,
    gpu_index: Annotated[
        int, typer.Option(help="Which detected GPU to plan for (nvidia-smi's index).")
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU, with a ready command.

    The budget is --target-vram when given, else the GPU's memory minus --headroom.
    """
    from moetune.cli.machine import gpu_target, host_ram
    from moetune.core.facts import load_model_facts
    from moetune.core.plan import PlanRequest, make_plan
    from moetune.core.settings import Settings, default_n_ctx

    facts = load_model_facts(model)
    n_ctx = ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
    total, free, gpu_source = gpu_target(vram, gpu_index, gpu)
    ram_total, ram_available, cores = host_ram(ram)
    settings = Settings(n_ctx=n_ctx, type_k=cache_type, type_v=cache_type, n_ubatch=ubatch,
                        gpu_overhead_bytes=overhead)  # fmt: skip
    if parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = settings.model_copy(
            update={"n_seq": parallel, "kv_unified": False, "explicit_parallel": True}
        )
    request = PlanRequest(
        model_path=str(model), device_bytes=total, target_bytes=target_vram,
        headroom_bytes=headroom, settings=settings, ctx_max=ctx is not None and ctx.is_max,
        n_cpu_moe=n_cpu_moe, ram_total_bytes=ram_total, ram_available_bytes=ram_available,
        physical_cores=cores, gpu_free_bytes=free,
    )  # fmt: skip
    result = make_plan(facts, request)
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import plan_payload

        write_json(to_json(plan_payload(result)))
    else:
        from moetune.report.plan import render_plan

        print_report(render_plan(result, facts, gpu_source))
    if not result.fits:  # the document is out; the exit code and one line on stderr say it
        raise DoesNotFitError(f"does not fit: {result.reason}")
