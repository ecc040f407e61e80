"""`moetune bench` and `moetune report` (issue 5): registered on the app by import."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from moetune.benchrun import (
    CONFIG_NAMES,
    DEFAULT_N_PREDICT,
    DEFAULT_REPEATS,
    ENDPOINTS,
    BenchRequest,
    BenchResult,
    Workload,
    bench_model,
    bench_url,
    capped_depths,
    default_result_path,
    load_result,
    merge_results,
    parse_configs,
    parse_depths,
    write_result,
)
from moetune.cli import app, err, handle_errors, out
from moetune.errors import BadValueError, ExitCode
from moetune.hardware import detect_gpu_probe
from moetune.hardware.host import PsutilHostProbe
from moetune.kvcache import parse_cache_type
from moetune.memory import Settings
from moetune.model import load_model_facts
from moetune.planner import check_context
from moetune.report import SCHEMA_VERSION, to_json
from moetune.report import bench as render
from moetune.server import find_server, install_signal_handlers
from moetune.trial import extra_int
from moetune.units import parse_size


def _workload(depths: str, repeats: int, n_predict: int, endpoint: str) -> Workload:
    if endpoint not in ENDPOINTS:
        raise BadValueError(f"unknown endpoint {endpoint!r}", hint=f"one of {', '.join(ENDPOINTS)}")
    if repeats < 1:
        raise BadValueError(f"--repeats must be at least 1, got {repeats}")
    return Workload(tuple(parse_depths(depths)), repeats, n_predict, endpoint)


def _settings(ctx: int, cache_type: str, overhead: str, extra: tuple[str, ...]) -> Settings:
    cache = parse_cache_type(cache_type)
    return Settings(
        n_ctx=check_context(ctx), type_k=cache, type_v=cache,
        gpu_overhead_bytes=parse_size(overhead, allow_zero=True),
        n_ubatch=extra_int(extra, "-ub", "--ubatch-size") or 512,
        n_batch=extra_int(extra, "-b", "--batch-size") or 2048,
    )  # fmt: skip


def _emit(result: BenchResult, as_json: bool, out_file: Path | None, save: bool) -> None:
    """Print (table and verdict, or JSON), then keep the JSON in the data dir and --out."""
    text = to_json(render.bench_payload(result))
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        out.print(render.render_bench(result), soft_wrap=True)
    paths = [default_result_path(result)] if save else []
    paths += [out_file] if out_file is not None else []
    for path in paths:
        err.print(f"saved {write_result(path, text)}", highlight=False)
    if not result.results:
        skipped = all(c.status == "skipped" for c in result.configs)
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT if skipped else ExitCode.SERVER_FAILED))


def _request(model: Path, context: typer.Context, *, names: list[str], workload: Workload,
             settings: Settings, options: dict[str, str | None]) -> BenchRequest:  # fmt: skip
    target, server = options["target_vram"], options["server"]
    return BenchRequest(
        binary=find_server(server), model=str(model), settings=settings, names=tuple(names),
        workload=workload, extra=tuple(context.args),
        target_bytes=parse_size(target) if target is not None else None,
        headroom_bytes=parse_size(options["headroom"] or "0", allow_zero=True),
        threads=PsutilHostProbe().host().physical_cores, gpus=detect_gpu_probe(),
    )  # fmt: skip


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
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
    ctx: Annotated[
        int | None, typer.Option(help="Context tokens (default: 32768 or training).")
    ] = None,
    cache_type: Annotated[str, typer.Option(help="K and V cache type.")] = "q8_0",
    target_vram: Annotated[
        str | None, typer.Option(help="Device memory budget (default: total - headroom).")
    ] = None,
    headroom: Annotated[str, typer.Option(help="Left free when no --target-vram.")] = "1.5G",
    overhead: Annotated[str, typer.Option(help="Runtime overhead the plans count.")] = "512M",
    server: Annotated[str | None, typer.Option(help="llama-server to use.")] = None,
    server_url: Annotated[
        str | None, typer.Option(help="Measure this running llama-server; launch nothing.")
    ] = None,
    name: Annotated[str, typer.Option(help="Configuration name for --server-url.")] = "server",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
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
    workload = _workload(depths, repeats, n_predict, endpoint)
    if server_url is not None:
        if model is not None or context.args:
            raise BadValueError(
                "--server-url measures a running server: leave out MODEL and llama-server flags"
            )
        with err.status("measuring...") as status:
            result = bench_url(server_url, workload, name, status.update)
        _emit(result, as_json, out_file, save)
        return
    if model is None:
        raise BadValueError("give a MODEL to launch, or --server-url of a running server")
    install_signal_handlers()
    facts = load_model_facts(model)
    n_ctx = ctx if ctx is not None else min(32768, facts.context_length or 32768)
    capped_depths(workload.depths, n_ctx, n_predict, 1)  # fail before launching anything
    settings = _settings(n_ctx, cache_type, overhead, tuple(context.args))
    options = {"target_vram": target_vram, "server": server, "headroom": headroom}
    req = _request(model, context, names=parse_configs(configs), workload=workload,
                   settings=settings, options=options)  # fmt: skip
    with err.status("benchmarking...") as status:
        result = bench_model(facts, req, status.update)
    _emit(result, as_json, out_file, save)


@app.command("report")
@handle_errors
def report_command(
    files: Annotated[list[Path], typer.Argument(help="Saved `moetune bench` JSON file(s).")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Render saved bench results again, with a bar chart of decode tok/s by depth.

    Several files are compared as one (configurations named NAME@FILE where names clash).
    """
    results = [load_result(path, SCHEMA_VERSION) for path in files]
    merged = merge_results(results, [path.stem for path in files])
    if as_json:
        sys.stdout.write(to_json(render.bench_payload(merged)) + "\n")
        return
    out.print(render.render_report(merged), soft_wrap=True)
