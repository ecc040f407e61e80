"""`moetune calibrate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import (
    Argument,
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
    ForceOpt,
    HeadroomOpt,
    JsonOpt,
    OverheadOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    bounds,
    parse_repeats,
    parse_threads,
)
from moetune.errors import BadValueError
from moetune.jobs.names import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    MAX_PARALLEL,
    MAX_REPEATS,
    MAX_THREADS,
    MAX_UBATCH,
)
from moetune.units import counts_option, parse_positive_tokens


@command()
@handle_errors
def calibrate(
    files: Annotated[
        list[Path] | None,
        Argument(
            help="llama-bench results (-o json or -o jsonl) or `moetune bench` result files.",
            metavar="FILE...",
        ),
    ] = None,
    measure: Annotated[
        str | None,
        Option(
            "--measure",
            help="Run llama-bench on this model at placements that fit, and import its points.",
            metavar="MODEL",
        ),
    ] = None,
    ubatch: Annotated[
        str,
        Option(
            help=f"--measure: micro-batch sizes, each {bounds(1, MAX_UBATCH)} and at most the "
            "prompt.",
            metavar="N,...",
        ),
    ] = "512,2048",
    n_prompt: Annotated[
        int | None,
        Option(
            "--n-prompt",
            "-p",
            help=f"--measure: prompt tokens of each test, {TOKENS_BOUND} (default: the largest "
            "ubatch).",
            parser=parse_positive_tokens,
            metavar="N",
        ),
    ] = None,
    n_gen: Annotated[
        int,
        Option(
            "--n-gen",
            "-n",
            help=f"--measure: generated tokens of each test, {TOKENS_BOUND}.",
            parser=parse_positive_tokens,
            metavar="N",
        ),
    ] = 64,
    repetitions: Annotated[
        int,
        Option(
            "--repetitions",
            "-r",
            help=f"--measure: repetitions of each test, {bounds(1, MAX_REPEATS)}.",
            parser=parse_repeats,
            metavar="N",
        ),
    ] = 2,
    threads: Annotated[
        int | None,
        Option(
            "--threads",
            "-t",
            help=f"--measure: threads, {bounds(1, MAX_THREADS)} (default: the physical cores).",
            parser=parse_threads,
            metavar="N",
        ),
    ] = None,
    parallel: Annotated[
        str | None,
        Option(
            help="--measure: also run llama-batched-bench at the first placement with these "
            "numbers of streams at once (-npl), e.g. 1,4: points of N streams' decode.",
            metavar="N,...",
        ),
    ] = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    force: ForceOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    overhead: OverheadOpt = None,
    rpc: RpcOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Import measured speeds as speed points (kept under $MOETUNE_HOME/speed).

    Each llama-bench test, and each configuration and depth of a moetune bench, becomes a
    point: placement, ubatch, threads, depth, tokens and tok/s, with the model and machine.
    Importing the same file again keeps nothing twice. --measure MODEL runs llama-bench
    itself: the smallest --n-cpu-moe that fits and every expert on the CPU (as many as the
    RAM holds), at each --ubatch (the context, budget and devices as `run` plans them);
    with --parallel 1,4 also llama-batched-bench (N streams at once) at the first of them;
    measuring again replaces those points.
    """
    from moetune.report import SCHEMA_VERSION
    from moetune.report.line import warn
    from moetune.report.render import CalibrateView, render

    if measure is None:
        if parallel is not None:
            raise BadValueError(
                "--parallel runs llama-batched-bench: give --measure MODEL",
                hint="its rows name no model nor placement to import them by",
            )
        if not files:
            raise BadValueError("give FILE... to import, or --measure MODEL to run llama-bench")
        from moetune.jobs.calibrate import import_files

        result = import_files(files, schema_version=SCHEMA_VERSION, warn=warn)
        render(CalibrateView(result), as_json)
        return
    if files:
        raise BadValueError("--measure runs llama-bench itself: leave out FILE...")
    from moetune.jobs.calibrate import MeasureRequest
    from moetune.jobs.calibrate import measure as measure_job

    req = MeasureRequest(
        model=measure,
        server=server,
        rpc=rpc,
        target_bytes=target_vram,
        force=force,
        headroom_bytes=headroom,
        overhead=overhead,
        ctx=ctx,
        cache_type=cache_type,
        ubatches=counts_option("--ubatch", ubatch, MAX_UBATCH),
        n_prompt=n_prompt,
        n_gen=n_gen,
        repetitions=repetitions,
        threads=threads,
        parallel=counts_option("--parallel", parallel, MAX_PARALLEL) if parallel else (),
    )
    stop_on_signals("llama-bench")
    console = err()
    with live_status("measuring...") as live:

        def event(text: str) -> None:  # each run: on the spinner, or one line
            if console.is_terminal:
                live.message(text)
            else:
                console.print(text, markup=False, highlight=False)

        result = measure_job(req, schema_version=SCHEMA_VERSION, on_event=event, warn=warn)
    render(CalibrateView(result), as_json)
    if result.refused is not None:
        from moetune.errors import TooNoisyError

        hint = "close other programs, so that nothing else keeps the CPU busy, and run it again"
        if result.fit is not None and result.fit.kept_points:
            hint += (
                f"; the fit included {result.fit.kept_points} points kept for this machine in "
                f"{result.store}: remove those measured on a loaded machine"
            )
        raise TooNoisyError(result.refused, hint=hint + "; until then forecasts are uncalibrated")
