"""`moetune run`."""

from __future__ import annotations

from typing import Annotated, Any

from moetune.cli.base import (
    Argument,
    CommandContext,
    Option,
    command,
    err,
    handle_errors,
    live_status,
    stop_on_signals,
)
from moetune.cli.options import (
    TOKENS_BOUND,
    CacheTypeOpt,
    CtxOpt,
    DraftOpt,
    ForceOpt,
    HeadroomOpt,
    JsonOpt,
    MaxRepeatsOpt,
    MaxSpreadOpt,
    MaxTimeOpt,
    MmprojOpt,
    ModelArg,
    ObjectiveOpt,
    OverheadOpt,
    ParallelOpt,
    RepeatsOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    TimeoutOpt,
    WeightsOpt,
    WorkloadOpt,
    bounds,
    pass_through_of,
    whole,
)
from moetune.jobs.names import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_MAX_SPREAD,
    DEFAULT_MAX_TIME_S,
    DEFAULT_REPEATS,
    DEFAULT_TIMEOUT_S,
)
from moetune.units import parse_positive_tokens


@command(pass_through=True)
@handle_errors
def run(
    context: CommandContext,
    model: ModelArg,
    others: Annotated[
        list[str] | None,
        Argument(help="More models, run --together with the first.", metavar="[MODEL]..."),
    ] = None,
    target_vram: TargetVramOpt = None,
    force: ForceOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    server: ServerOpt = None,
    overhead: OverheadOpt = None,
    rpc: RpcOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    parallel: ParallelOpt = None,
    fill: Annotated[
        int | None,
        Option(
            help=f"Tokens to fill before measuring, {TOKENS_BOUND} (default: the context; "
            "4k = 4096).",
            parser=parse_positive_tokens,
            metavar="N",
        ),
    ] = None,
    repeats: RepeatsOpt = DEFAULT_REPEATS,
    max_repeats: MaxRepeatsOpt = None,
    max_spread: MaxSpreadOpt = DEFAULT_MAX_SPREAD,
    max_time: MaxTimeOpt = DEFAULT_MAX_TIME_S,
    port: Annotated[
        int | None,
        Option(
            help=f"Port for llama-server, {bounds(1, 65535)} (default: free).",
            parser=whole(1, 65535),
            metavar="N",
        ),
    ] = None,
    keep: Annotated[bool, Option(help="Leave the best server running until Ctrl-C.")] = False,
    retune: Annotated[bool, Option(help="Tune again even when a saved profile matches.")] = False,
    save: Annotated[
        bool, Option(help="Save the winner as a tuned profile ($MOETUNE_HOME).")
    ] = True,
    objective: ObjectiveOpt = None,
    workload: WorkloadOpt = None,
    together: Annotated[
        bool,
        Option(
            "--together",
            help="Run the models loaded at once (each its own llama-server, as a router's "
            "children): planned together, launched together, each device's peak measured "
            "with all loaded, the cheapest model stepped until it is within the budget.",
        ),
    ] = False,
    weights: WeightsOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """Launch llama-server, measure device memory after filling the context, step N, report.

    The winner is saved as a tuned profile; a later run with the same model file, devices,
    llama.cpp build and settings launches it directly (once, to confirm) unless --retune.
    Arguments after -- are passed to llama-server (e.g. -- -ub 2048 --mlock).
    With --objective or --workload, the forecast's best other placements (N, -ub) are
    measured too (at most 4 more launches) and the fastest measured is kept.
    Each launch that fits times requests of a 64-token prompt generating 64 tokens, as
    `bench --endpoint completion --depths 64 --n-predict 64` does (median, min-max).
    """
    from moetune.jobs.launch import prepare_launch
    from moetune.jobs.measure import Repeats
    from moetune.jobs.models import launch_spec, with_companions
    from moetune.jobs.run import Fill, Progress, describe, keep_serving, tune_with_profiles
    from moetune.jobs.speed import keeper
    from moetune.jobs.values import goal_of
    from moetune.report.line import warn
    from moetune.report.render import RunView, render

    asked = Repeats.asked(repeats, max_repeats, max_spread, max_time)
    stop_on_signals()
    if together or others or weights is not None:
        _run_together(
            [model, *(others or [])],
            together=together,
            unsupported={
                "--keep": keep,
                "--workload": workload is not None,
                "--parallel": parallel is not None,
            },
            as_json=as_json,
            weights=weights,
            pass_through=with_companions(
                pass_through_of(context), mmproj=mmproj, draft=draft, absolute=True
            ),
            server=server,
            cache_type=cache_type,
            ctx=ctx,
            target_vram=target_vram,
            headroom=headroom,
            overhead=overhead,
            rpc=rpc,
            force=force,
            objective=objective,
            fill=Fill(tokens=fill, repeats=asked),
            save=save,
            retune=retune,
        )
        return
    pass_through = with_companions(
        pass_through_of(context), mmproj=mmproj, draft=draft, absolute=True
    )
    facts, spec = launch_spec(
        model, pass_through, server=server, cache_type=cache_type, port=port, parallel=parallel
    )
    with live_status("tuning...") as live:
        spec, setup = prepare_launch(
            facts,
            spec,
            ctx=ctx,
            target_bytes=target_vram,
            headroom_bytes=headroom,
            overhead=overhead,
            rpc=rpc,
            warn=warn,
            force=force,
        )
        progress = Progress(
            on_event=live.message,
            on_attempt=lambda attempt: err().print(describe(attempt), highlight=False),
            on_note=lambda note: err().print(note, highlight=False),
            live=live,
            keep=keeper(warn),
        )
        result = tune_with_profiles(
            facts,
            spec,
            setup,
            retune=retune,
            save=save,
            fill=Fill(tokens=fill, repeats=asked),
            progress=progress,
            goal=goal_of(objective, workload) if objective or workload else None,
        )
    render(RunView(result, str(model)), as_json)
    if keep and result.best is not None:
        from moetune.jobs.objective import with_ubatch

        ub = result.best.n_ubatch
        keep_serving(
            spec if ub is None else with_ubatch(spec, ub),
            result.best,
            loading=lambda: err().status("loading the best configuration"),
            on_ready=err().print,
            on_stop=err().print,
        )


def _run_together(
    models: list[str],
    *,
    together: bool,
    unsupported: dict[str, bool],
    as_json: bool,
    **options: Any,
) -> None:
    """``run A B --together``: the models launched together until the devices' measured
    peaks with all loaded are within their budgets."""
    from moetune.errors import BadValueError
    from moetune.jobs.together import run_together
    from moetune.report.line import warn
    from moetune.report.render import TogetherRunView, render

    if not together:
        raise BadValueError(
            "several models (or --weights) are run --together",
            hint="add --together, or run one model",
        )
    if given := [name for name, on in unsupported.items() if on]:
        raise BadValueError(f"--together does not take {', '.join(given)}")
    with live_status("tuning together...") as live:
        result = run_together(
            models,
            warn=warn,
            on_event=live.message,
            on_note=lambda note: err().print(note, highlight=False),
            **options,
        )
    render(TogetherRunView(result), as_json)
    if not result.converged:  # the document is out; the exit code and one line say it
        from moetune.errors import DoesNotFitError

        raise DoesNotFitError(
            f"run --together: the models loaded together are not within the budgets after "
            f"{len(result.launches)} launch(es)"
        )
