"""`moetune bench` and `moetune report`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from moetune.cli.app import app, err, handle_errors, out, write_json
from moetune.cli.options import (
    DEFAULT_CACHE_TYPE,
    DEFAULT_HEADROOM,
    DEFAULT_OVERHEAD,
    PASS_THROUGH,
    CacheTypeOpt,
    CtxIntOpt,
    DeviceHeadroomOpt,
    JsonOpt,
    ServerOpt,
    TargetVramOpt,
)
from moetune.errors import BadValueError, ExitCode
from moetune.jobs.names import CONFIG_NAMES, DEFAULT_N_PREDICT, DEFAULT_REPEATS, ENDPOINTS

if TYPE_CHECKING:
    from moetune.jobs.bench import Workload
    from moetune.jobs.results import BenchResult


def _workload(depths: str, repeats: int, n_predict: int, endpoint: str) -> Workload:
    from moetune.jobs.bench import Workload, parse_depths

    if endpoint not in ENDPOINTS:
        raise BadValueError(f"unknown endpoint {endpoint!r}", hint=f"one of {', '.join(ENDPOINTS)}")
    if repeats < 1:
        raise BadValueError(f"--repeats must be at least 1, got {repeats}")
    return Workload(tuple(parse_depths(depths)), repeats, n_predict, endpoint)


def _emit(result: BenchResult, as_json: bool, out_file: Path | None, save: bool) -> None:
    """Print (table and verdict, or JSON), then keep the JSON in the data dir and --out."""
    from moetune.report import to_json
    from moetune.report.bench import render_bench
    from moetune.report.payloads import bench_payload
    from moetune.store.bench import default_result_path, write_result

    text = to_json(bench_payload(result))
    if as_json:
        write_json(text)
    else:
        out().print(render_bench(result), soft_wrap=True)
    paths = [default_result_path(result)] if save else []
    paths += [out_file] if out_file is not None else []
    for path in paths:
        err().print(f"saved {write_result(path, text)}", highlight=False)
    if not result.results:
        skipped = all(c.status == "skipped" for c in result.configs)
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT if skipped else ExitCode.SERVER_FAILED))


@app.command(context_settings=PASS_THROUGH)
@handle_errors
def bench(
    context: typer.Context,
    model: Annotated[
        Path | None, typer.Argument(help="GGUF model file (leave out with --server-url).")
    ] = None,
    configs: Annotated[
        str, typer.Option(help=f"Configurations to compare: {','.join(CONFIG_NAMES)}.")
    ] = ",".join(CONFIG_NAMES),
    depths: Annotated[
        str, typer.Option(help="Context depths in tokens, capped by the context (16k = 16384).")
    ] = "0,4096,16384",
    repeats: Annotated[int, typer.Option(help="Requests per depth.")] = DEFAULT_REPEATS,
    n_predict: Annotated[int, typer.Option(help="Tokens generated per request.")] = (
        DEFAULT_N_PREDICT
    ),
    endpoint: Annotated[str, typer.Option(help="chat (/v1/chat/completions) or completion.")] = (
        "chat"
    ),
    ctx: CtxIntOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    headroom: DeviceHeadroomOpt = DEFAULT_HEADROOM,
    overhead: Annotated[
        str, typer.Option(help="Runtime overhead the plans count.")
    ] = DEFAULT_OVERHEAD,
    server: ServerOpt = None,
    server_url: Annotated[
        str | None, typer.Option(help="Measure this running llama-server; launch nothing.")
    ] = None,
    name: Annotated[str, typer.Option(help="Configuration name for --server-url.")] = "server",
    as_json: JsonOpt = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="Also save the JSON here.")] = (
        None
    ),
    save: Annotated[
        bool, typer.Option(help="Keep the JSON under the user data dir ($MOETUNE_HOME/bench).")
    ] = True,
) -> None:
    """Measure TTFT, prefill and decode speed of each configuration at several depths.

    Arguments after -- are passed to llama-server (e.g. -- --rpc 127.0.0.1:50052 -ub 2048).
    """
    from moetune.jobs.bench import bench_url

    workload = _workload(depths, repeats, n_predict, endpoint)
    if server_url is not None:
        if model is not None or context.args:
            raise BadValueError(
                "--server-url measures a running server: leave out MODEL and llama-server flags"
            )
        with err().status("measuring...") as status:
            result = bench_url(server_url, workload, name, status.update)
        _emit(result, as_json, out_file, save)
        return
    if model is None:
        raise BadValueError("give a MODEL to launch, or --server-url of a running server")
    options = {"target_vram": target_vram, "server": server, "headroom": headroom,
               "overhead": overhead, "cache_type": cache_type, "configs": configs}  # fmt: skip
    _bench_model(model, tuple(context.args), ctx, workload, options, (as_json, out_file, save))


def _bench_model(model: Path, extra: tuple[str, ...], ctx: int | None, workload: Workload,
                 options: dict[str, str | None],
                 emit: tuple[bool, Path | None, bool]) -> None:  # fmt: skip
    from moetune.cli.machine import physical_cores
    from moetune.core.facts import load_model_facts
    from moetune.core.kvcache import parse_cache_type
    from moetune.core.planner import check_context
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.hardware import detect_gpu_probe
    from moetune.jobs.bench import BenchRequest, bench_model, parse_configs
    from moetune.jobs.launch import LaunchSpec, settings_from_extra
    from moetune.jobs.results import capped_depths
    from moetune.llamacpp.process import find_server, install_signal_handlers
    from moetune.units import parse_size

    install_signal_handlers()
    facts = load_model_facts(model)
    n_ctx = ctx if ctx is not None else default_n_ctx(facts.context_length)
    capped_depths(workload.depths, n_ctx, workload.n_predict, 1)  # fail before launching
    cache = parse_cache_type(options["cache_type"] or DEFAULT_CACHE_TYPE)
    settings = Settings(n_ctx=check_context(n_ctx), type_k=cache, type_v=cache,
                        gpu_overhead_bytes=parse_size(options["overhead"] or "0",
                                                      allow_zero=True))  # fmt: skip
    spec = LaunchSpec(binary=find_server(options["server"]), model=str(model),
                      settings=settings_from_extra(settings, extra), extra=extra,
                      threads=physical_cores())  # fmt: skip
    target = options["target_vram"]
    req = BenchRequest(
        spec=spec, names=tuple(parse_configs(options["configs"] or "")), workload=workload,
        target_bytes=parse_size(target) if target is not None else None,
        headroom_bytes=parse_size(options["headroom"] or "0", allow_zero=True),
        gpus=detect_gpu_probe(),
    )  # fmt: skip
    with err().status("benchmarking...") as status:
        result = bench_model(facts, req, status.update)
    _emit(result, *emit)


@app.command("report")
@handle_errors
def report_command(
    files: Annotated[list[Path], typer.Argument(help="Saved `moetune bench` JSON file(s).")],
    as_json: JsonOpt = False,
) -> None:
    """Render saved bench results again, with a bar chart of decode tok/s by depth.

    Several files are compared as one (configurations named NAME@FILE where names clash).
    """
    from moetune.jobs.results import merge_results
    from moetune.report import SCHEMA_VERSION, to_json
    from moetune.report.bench import render_report
    from moetune.report.payloads import bench_payload
    from moetune.store.bench import load_result

    results = [load_result(path, SCHEMA_VERSION) for path in files]
    merged = merge_results(results, [path.stem for path in files])
    if as_json:
        write_json(to_json(bench_payload(merged)))
        return
    out().print(render_report(merged), soft_wrap=True)
