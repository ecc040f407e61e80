"""`moetune bench` and `moetune report`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

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
    counts_option,
    parse_positive_tokens,
    pass_through_of,
)
from moetune.errors import BadValueError
from moetune.hub.env import DEFAULT_TIMEOUT_S
from moetune.jobs.names import (
    CONFIG_NAMES,
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_MAX_SPREAD,
    DEFAULT_MAX_TIME_S,
    DEFAULT_N_PREDICT,
    DEFAULT_REPEATS,
)
from moetune.units import Ctx, Sizes

if TYPE_CHECKING:
    from moetune.jobs.bench import Variant
    from moetune.jobs.measure import Workload
    from moetune.records.results import BenchResult


def _emit(result: BenchResult, as_json: bool, out_file: Path | None, save: bool) -> None:
    """Print (table and verdict, or JSON), then keep the JSON in the data dir and --out."""
    from moetune.jobs.bench import require_measured
    from moetune.jobs.bench_forecast import with_forecast
    from moetune.report import SCHEMA_VERSION, to_json
    from moetune.report.payloads import bench_payload
    from moetune.report.render import BenchView, render
    from moetune.store.bench import default_result_path, write_result

    if result.results:
        result = with_forecast(result, schema_version=SCHEMA_VERSION, warn=_warn)
    render(BenchView(result), as_json)
    text = to_json(bench_payload(result))
    paths = [default_result_path(result)] if save else []
    paths += [out_file] if out_file is not None else []
    for path in paths:
        err().print(f"saved {write_result(path, text)}", highlight=False)
    if save:
        _keep_points(result, paths[0])
    require_measured(result)


def _keep_points(result: BenchResult, saved: Path) -> None:
    """Keep the measurements as speed points (a warning when they cannot be kept)."""
    from moetune.jobs.speed import bench_points, keep_points

    points = bench_points(result, str(saved))
    if points and keep_points(points, f"bench-{points[0].model.file_name}", _warn) is not None:
        err().print(f"kept {len(points)} speed points", highlight=False)


def _warn(text: str) -> None:
    err().print(f"warning: {text}", style="yellow", highlight=False)


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
            help="Context depths in tokens, capped by the context (16k = 16384).", metavar="N,..."
        ),
    ] = "0,4096,16384",
    ubatch: Annotated[
        str | None,
        Option(
            help="Launch each configuration at each micro-batch size (-ub), e.g. 512,2048.",
            metavar="N,...",
        ),
    ] = None,
    threads: Annotated[
        str | None,
        Option(
            help="Launch each configuration at each thread count (-t), e.g. 4,8 "
            "(default: the physical cores).",
            metavar="N,...",
        ),
    ] = None,
    repeats: RepeatsOpt = DEFAULT_REPEATS,
    max_repeats: MaxRepeatsOpt = None,
    max_spread: MaxSpreadOpt = DEFAULT_MAX_SPREAD,
    max_time: MaxTimeOpt = DEFAULT_MAX_TIME_S,
    n_predict: Annotated[
        int,
        Option(help="Tokens generated per request.", parser=parse_positive_tokens, metavar="N"),
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
    Arguments after -- are passed to llama-server (e.g. -- --rpc 127.0.0.1:50052 -ub 2048).
    """
    from moetune.core.extras import add_extras_flags, parse_extras_flags
    from moetune.jobs.bench import bench_url, workload_of
    from moetune.jobs.measure import Repeats

    asked = Repeats.asked(repeats, max_repeats, max_spread, max_time)
    workload = workload_of(depths, asked, n_predict, endpoint, image)
    pass_through = add_extras_flags(
        pass_through_of(context),
        mmproj=str(mmproj) if mmproj else None,
        draft=str(draft) if draft else None,
    )
    if image is not None and server_url is None and parse_extras_flags(pass_through).mmproj is None:
        raise BadValueError("--image needs a projector to encode it: give --mmproj FILE")
    if server_url is not None:
        if model is not None or pass_through:
            raise BadValueError(
                "--server-url measures a running server: leave out MODEL and llama-server flags"
            )
        with live_status("measuring...") as live:
            result = bench_url(server_url, workload, name, live=live)
        _emit(result, as_json, out_file, save)
        return
    if model is None:
        raise BadValueError("give a MODEL to launch, or --server-url of a running server")
    choice = _Choice(
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
    )
    _bench_model(model, pass_through, workload, choice, (as_json, out_file, save))


class _Choice(NamedTuple):
    configs: str
    ubatch: str | None
    threads: str | None
    ctx: Ctx | None
    cache_type: str
    target: Sizes | None
    force: bool
    headroom: Sizes
    overhead: Sizes | None
    server: str | None
    rpc: str | None


def _bench_model(
    model: str,
    pass_through: tuple[str, ...],
    workload: Workload,
    choice: _Choice,
    emit: tuple[bool, Path | None, bool],
) -> None:
    from moetune.jobs.bench import BenchRequest, bench_model, parse_configs
    from moetune.jobs.launch import prepare_launch
    from moetune.jobs.models import launch_spec
    from moetune.records.results import capped_depths

    stop_on_signals()
    names = tuple(parse_configs(choice.configs))
    at = _variants(choice, pass_through)
    if choice.ctx is not None and choice.ctx.tokens is not None:  # before finding llama-server
        capped_depths(workload.depths, choice.ctx.tokens, workload.n_predict, 1)
    facts, spec = launch_spec(
        model, pass_through, server=choice.server, cache_type=choice.cache_type
    )
    with live_status("benchmarking...") as live:
        spec, setup = prepare_launch(
            facts,
            spec,
            ctx=choice.ctx,
            target_bytes=choice.target,
            headroom_bytes=choice.headroom,
            overhead=choice.overhead,
            rpc=choice.rpc,
            warn=lambda text: err().print(f"warning: {text}", style="yellow", highlight=False),
            force=choice.force,
        )
        capped_depths(workload.depths, spec.settings.n_ctx, workload.n_predict, 1)
        req = BenchRequest(spec=spec, setup=setup, names=names, workload=workload, variants=at)
        result = bench_model(facts, req, live.message, live=live)
    _emit(result, *emit)


def _variants(choice: _Choice, pass_through: tuple[str, ...]) -> tuple[Variant, ...]:
    """``--ubatch`` x ``--threads``; each refused beside its llama-server flag after --."""
    from moetune.core.command import pass_through_value
    from moetune.jobs.bench import variants

    lists: dict[str, tuple[int, ...]] = {}
    for option, given, flags in (
        ("--ubatch", choice.ubatch, ("-ub", "--ubatch-size")),
        ("--threads", choice.threads, ("-t", "--threads")),
    ):
        if given is None:
            continue
        if pass_through_value(pass_through, *flags) is not None:
            raise BadValueError(f"give {option} or {flags[0]} after --, not both")
        lists[option] = counts_option(option, given)
    return tuple(variants(lists.get("--ubatch", ()), lists.get("--threads", ())))


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
    from moetune.jobs.bench_forecast import with_forecast
    from moetune.records.results import merge_results
    from moetune.report import SCHEMA_VERSION
    from moetune.report.render import BenchView, render
    from moetune.store.bench import load_result

    results = [
        with_forecast(load_result(path, SCHEMA_VERSION), schema_version=SCHEMA_VERSION, warn=_warn)
        for path in files
    ]
    merged = merge_results(results, [path.stem for path in files])
    render(BenchView(merged, chart=True), as_json)
