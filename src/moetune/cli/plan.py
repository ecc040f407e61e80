"""`moetune plan`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors, out, write_json
from moetune.cli.options import (
    CTX_DEFAULT_HELP,
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_OVERHEAD,
    CacheTypeOpt,
    GpuProfileOpt,
    JsonOpt,
    ModelArg,
    OverheadOpt,
)
from moetune.errors import BadValueError, ExitCode


def parse_ctx(value: str) -> tuple[int | None, bool]:
    """``--ctx``: a positive number of tokens, or ``max``."""
    from moetune.core.planner import check_context

    if value.strip().lower() == "max":
        return None, True
    try:
        n_ctx = int(value.replace("_", ""))
    except ValueError:
        raise BadValueError(
            f"not a context size: {value!r}", hint="use e.g. 32768 or max"
        ) from None
    return check_context(n_ctx), False


@app.command()
@handle_errors
def plan(
    model: ModelArg,
    vram: Annotated[
        str | None, typer.Option(help="GPU memory, e.g. 24G (default: detect).")
    ] = None,
    ram: Annotated[str | None, typer.Option(help="Host RAM, e.g. 64G (default: detect).")] = None,
    ctx: Annotated[
        str | None, typer.Option(help=f"Context tokens, or 'max' ({CTX_DEFAULT_HELP}).")
    ] = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    headroom: Annotated[
        str, typer.Option(help="VRAM left free under the target.")
    ] = DEFAULT_HEADROOM,
    target_vram: Annotated[
        str | None, typer.Option(help="Plan for this much VRAM instead of the card's total.")
    ] = None,
    n_cpu_moe: Annotated[
        int | None, typer.Option(help="Fix N (with --ctx max: the largest context at N).")
    ] = None,
    overhead: OverheadOpt = DEFAULT_OVERHEAD,
    parallel: Annotated[
        int | None,
        typer.Option(help="llama-server slots, -np (default: auto, 4 sharing one cache)."),
    ] = None,
    ubatch: Annotated[int, typer.Option(help="Micro-batch (-ub).")] = 512,
    gpu_index: Annotated[
        int, typer.Option(help="Which detected GPU to plan for (nvidia-smi's index).")
    ] = 0,
    gpu: GpuProfileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU, with a ready command."""
    from moetune.cli.machine import gpu_target, host_ram
    from moetune.core.facts import load_model_facts
    from moetune.core.kvcache import parse_cache_type
    from moetune.core.planner import PlanRequest, make_plan
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.units import parse_size

    facts = load_model_facts(model)
    n_ctx, ctx_max = parse_ctx(ctx) if ctx is not None else (None, False)
    if n_ctx is None:
        n_ctx = default_n_ctx(facts.context_length)
    cache = parse_cache_type(cache_type)
    total, free, gpu_source = gpu_target(target_vram or vram, gpu_index, gpu)
    ram_total, ram_available, cores = host_ram(ram)
    settings = Settings(
        n_ctx=n_ctx, type_k=cache, type_v=cache, n_ubatch=ubatch,
        gpu_overhead_bytes=parse_size(overhead, allow_zero=True),
    )  # fmt: skip
    if parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = settings.model_copy(
            update={"n_seq": parallel, "kv_unified": False, "explicit_parallel": True}
        )
    request = PlanRequest(
        model_path=str(model), target_bytes=total,
        headroom_bytes=parse_size(headroom, allow_zero=True), settings=settings,
        ctx_max=ctx_max, n_cpu_moe=n_cpu_moe, ram_total_bytes=ram_total,
        ram_available_bytes=ram_available, physical_cores=cores, gpu_free_bytes=free,
    )  # fmt: skip
    result = make_plan(facts, request)
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import plan_payload

        write_json(to_json(plan_payload(result)))
    else:
        from moetune.report.plan import render_plan

        out().print(render_plan(result, facts, gpu_source), soft_wrap=True)
    if not result.fits:
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT))
