"""`moetune bench` and `moetune report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
    OverheadOpt,
    RepeatsOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    TimeoutOpt,
    bounds,
    pass_through_of,
)
from moetune.errors import BadValueError
from moetune.jobs.names import (
    CONFIG_NAMES,
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_MAX_SPREAD,
    DEFAULT_MAX_TIME_S,
    DEFAULT_N_PREDICT,
    DEFAULT_REPEATS,
    DEFAULT_TIMEOUT_S,
    MAX_THREADS,
    MAX_UBATCH,
)
from moetune.units import parse_positive_tokens


@command(pass_through=True)
@handle_errors
def bench(
    context: CommandContext,
    model: Annotated[
        str | None,
        Argument(
            help="GGUF model file, user/model[:quant] or a URL (leave out with --server-url).",
            metavar="MODEL",
        ),
    ] = None,
    configs: Annotated[
        str,
        Option(help=f"Configurations to compare: {','.join(CONFIG_NAMES)}.", metavar="NAME,..."),
    ] = ",".join(CONFIG_NAMES),
    depths: Annotated[
        str,
        Option(
            help=f"Context depths in tokens, capped by the context (16k = 16384; {TOKENS_BOUND}).",
            metavar="N,...",
        ),
    ] = "0,4096,16384",
    ubatch: Annotated[
        str | None,
        Option(
            help="Launch each configuration at each micro-batch size (-ub), e.g. 512,2048 "
            f"(each {bounds(1, MAX_UBATCH)}).",
            metavar="N,...",
        ),
    ] = None,
    threads: Annotated[
        str | None,
        Option(
            help="Launch each configuration at each thread count (-t), e.g. 4,8, each "
            f"{bounds(1, MAX_THREADS)} (default: the physical cores).",
            metavar="N,...",
        ),
    ] = None,
    op_offload_min_batch: Annotated[
        int | None,
        Option(
            help="Launch every configuration with GGML_OP_OFFLOAD_MIN_BATCH=N: a prompt "
            "ubatch of fewer tokens computes the CPU's experts on the CPU instead of copying "
            "them to the GPU (default: the environment's, else ggml's 32), "
            f"{TOKENS_BOUND}.",
            parser=parse_positive_tokens,
            metavar="N",
        ),
    ] = None,
    parallel: Annotated[
        str | None,
        Option(
            help="Also send N requests at once for each N, e.g. 1,2,4, to a server launched "
            "with -np of the largest: aggregate and per-stream decode tok/s, time to first "
            "token.",
            metavar="N,...",
        ),
    ] = None,
    repeats: RepeatsOpt = DEFAULT_REPEATS,
    max_repeats: MaxRepeatsOpt = None,
    max_spread: MaxSpreadOpt = DEFAULT_MAX_SPREAD,
    max_time: MaxTimeOpt = DEFAULT_MAX_TIME_S,
    n_predict: Annotated[
        int,
        Option(
            help=f"Tokens generated per request, {TOKENS_BOUND}.",
            parser=parse_positive_tokens,
            metavar="N",
        ),
    ] = DEFAULT_N_PREDICT,
    endpoint: Annotated[
        str,
        Option(help="chat (/v1/chat/completions) or completion.", metavar="chat|completion"),
    ] = "chat",
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    force: ForceOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    overhead: OverheadOpt = None,
    rpc: RpcOpt = None,
    server: ServerOpt = None,
    mmproj: MmprojOpt = None,
    draft: DraftOpt = None,
    image: Annotated[
        Path | None,
        Option(
            help="Send this image with every chat request (needs a projector, --mmproj): "
            "TTFT then includes encoding it.",
            metavar="FILE",
        ),
    ] = None,
    server_url: Annotated[
        str | None,
        Option(help="Measure this running llama-server; launch nothing.", metavar="URL"),
    ] = None,
    name: Annotated[
        str, Option(help="Configuration name for --server-url.", metavar="NAME")
    ] = "server",
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    as_json: JsonOpt = False,
    out_file: Annotated[Path | None, Option("--out", help="Also save the JSON here.")] = (None),
    save: Annotated[
        bool, Option(help="Keep the JSON under the user data dir ($MOETUNE_HOME/bench).")
    ] = True,
) -> None:
    """Measure TTFT, prefill and decode speed of each configuration at several depths.

    Each configuration gets one untimed request first (its prompt past one ubatch); each depth
    is repeated until the requests agree within --max-spread (or --max-repeats or --max-time
    comes first).
    Arguments after -- are passed to llama-server (e.g. -- -ub 2048 --mlock).
    """
    from moetune.jobs.bench import (
        BenchChoice,
        bench_launch,
        bench_launched,
        bench_pass_through,
        bench_url,
        finish_bench,
        workload_of,
    )
    from moetune.jobs.measure import Repeats
    from moetune.report import SCHEMA_VERSION, to_json
    from moetune.report.line import warn
    from moetune.report.payloads import bench_payload
    from moetune.report.render import BenchView, render

    asked = Repeats.asked(repeats, max_repeats, max_spread, max_time)
    workload = workload_of(depths, asked, n_predict, endpoint, image, parallel=parallel)
    pass_through = bench_pass_through(
        pass_through_of(context), mmproj=mmproj, draft=draft, image=image, server_url=server_url
    )
    if server_url is not None:
        if model is not None or pass_through:
            raise BadValueError(
                "--server-url measures a running server: leave out MODEL and llama-server flags"
            )
        with live_status("measuring...") as live:
            result = bench_url(server_url, workload, name, live=live)
    else:
        if model is None:
            raise BadValueError("give a MODEL to launch, or --server-url of a running server")
        choice = BenchChoice(
            configs=configs,
            ubatch=ubatch,
            threads=threads,
            ctx=ctx,
            cache_type=cache_type,
            target=target_vram,
            force=force,
            headroom=headroom,
            overhead=overhead,
            server=server,
            rpc=rpc,
            op_offload_min_batch=op_offload_min_batch,
            parallel=max(workload.parallel) if workload.parallel else None,
        )
        stop_on_signals()
        launch = bench_launch(model, pass_through, workload, choice)
        with live_status("benchmarking...") as live:
            result = bench_launched(launch, workload, choice, live=live, warn=warn)
    finish_bench(
        result,
        schema_version=SCHEMA_VERSION,
        show=lambda shown: render(BenchView(shown), as_json),
        json_text=lambda kept: to_json(bench_payload(kept)),
        out_file=out_file,
        save=save,
        note=lambda text: err().print(text, highlight=False),
        warn=warn,
    )


@command("report")
@handle_errors
def report_command(
    files: Annotated[list[Path], Argument(help="Saved `moetune bench` JSON file(s).")],
    as_json: JsonOpt = False,
) -> None:
    """Render saved bench results again, with a chart of decode tok/s against depth and a
    chart of measured against forecast tok/s (the forecast made again from the model file
    and the speed points kept; without the model file, measurements only).

    Several files are compared as one (configurations named NAME@FILE where names clash).
    """
    from moetune.jobs.bench_forecast import saved_results
    from moetune.report import SCHEMA_VERSION
    from moetune.report.line import warn
    from moetune.report.render import BenchView, render

    merged = saved_results(files, schema_version=SCHEMA_VERSION, warn=warn)
    render(BenchView(merged, chart=True), as_json)
