"""The command line: parses, calls the core, renders; maps errors to exit codes in one place."""

from __future__ import annotations

import functools
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from moetune import __version__, report
from moetune.bench import ServerClient
from moetune.errors import BadValueError, ExitCode, MoetuneError, NoGpuError
from moetune.hardware import detect_gpu_probe
from moetune.hardware.host import PsutilHostProbe
from moetune.kvcache import parse_cache_type
from moetune.memory import Settings
from moetune.model import load_model_facts
from moetune.planner import PlanRequest, check_context, make_plan
from moetune.profiles import ProfileStore, find_hardware_profile, load_hardware_profiles
from moetune.report import profiles as profile_report
from moetune.runner import describe, prepare_run, tune_with_profiles
from moetune.server import find_server, install_signal_handlers, launch
from moetune.trial import TrialConfig, extra_int, trial_args
from moetune.units import parse_size

app = typer.Typer(
    name="moetune",
    help="Tune llama.cpp Mixture-of-Experts expert offload for your GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=False)
err = Console(stderr=True, soft_wrap=True)

P = ParamSpec("P")
R = TypeVar("R")


class _State:
    debug: bool = False


def _fail(exc: BaseException, code: ExitCode, message: str, hint: str | None) -> typer.Exit:
    if _State.debug:
        err.print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
    err.print(report.render_error(message, hint))
    return typer.Exit(int(code))


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn every error into one line on stderr and a named exit code (traceback: --debug)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except MoetuneError as exc:
            raise _fail(exc, exc.exit_code, exc.message, exc.hint) from None
        except KeyboardInterrupt as exc:
            raise _fail(exc, ExitCode.INTERRUPTED, "interrupted", None) from None
        except Exception as exc:
            message = f"internal error: {type(exc).__name__}: {exc}"
            raise _fail(
                exc, ExitCode.INTERNAL, message, "run with --debug for the traceback"
            ) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        out.print(f"moetune {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    _State.debug = debug


ModelArg = Annotated[
    Path,
    typer.Argument(help="GGUF model file (any shard of a split model).", readable=False),
]


@app.command()
@handle_errors
def inspect(
    model: ModelArg,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    layers: Annotated[bool, typer.Option("--layers", help="Show the per-block table.")] = False,
    tensors: Annotated[
        bool, typer.Option("--tensors", help="Include every tensor in --json.")
    ] = False,
) -> None:
    """Architecture, blocks, experts, and bytes per block by tensor role."""
    facts = load_model_facts(model)
    if as_json:
        sys.stdout.write(report.to_json(report.inspect_payload(facts, with_tensors=tensors)) + "\n")
        return
    out.print(report.render_inspect(facts, show_layers=layers))


def _parse_ctx(value: str) -> tuple[int | None, bool]:
    """``--ctx``: a positive number of tokens, or ``max``."""
    if value.strip().lower() == "max":
        return None, True
    try:
        n_ctx = int(value.replace("_", ""))
    except ValueError:
        raise BadValueError(
            f"not a context size: {value!r}", hint="use e.g. 32768 or max"
        ) from None
    return check_context(n_ctx), False


def _gpu_target(
    vram: str | None, gpu_index: int, gpu_profile: str | None = None
) -> tuple[int, int | None, str]:
    """(total, free, source) of the GPU to plan for: given, a hardware profile, or detected."""
    if vram is not None:
        return parse_size(vram), None, "given (--vram)"
    if gpu_profile is not None:
        profile = find_hardware_profile(gpu_profile, load_hardware_profiles())
        return profile.vram_bytes, None, f"{profile.name} (hardware profile {profile.id})"
    probe = detect_gpu_probe()
    gpus = probe.gpus()
    if not gpus:
        why = probe.why or "no NVIDIA GPU found: pass --vram, e.g. --vram 24G"
        raise NoGpuError(f"no GPU detected: {why}")
    gpu = next((g for g in gpus if g.index == gpu_index), None)
    if gpu is None:
        found = ", ".join(str(g.index) for g in gpus)
        raise BadValueError(f"no GPU with index {gpu_index} (found: {found})")
    if gpu.vram_total_bytes is None:
        raise NoGpuError(
            f"{gpu.name} does not report its memory size (unified memory?)",
            hint="pass --vram with the memory llama.cpp may use",
        )
    return gpu.vram_total_bytes, gpu.vram_free_bytes, f"{gpu.name} ({probe.name})"


def _host_ram(ram: str | None) -> tuple[int | None, int | None, int | None]:
    """(total, available, physical cores): --ram is both total and available."""
    host = PsutilHostProbe().host()
    if ram is not None:
        size = parse_size(ram)
        return size, size, host.physical_cores
    return host.ram_total_bytes, host.ram_available_bytes, host.physical_cores


@app.command()
@handle_errors
def plan(
    model: ModelArg,
    vram: Annotated[
        str | None, typer.Option(help="GPU memory, e.g. 24G (default: detect).")
    ] = None,
    ram: Annotated[str | None, typer.Option(help="Host RAM, e.g. 64G (default: detect).")] = None,
    ctx: Annotated[
        str | None, typer.Option(help="Context tokens, or 'max' (default: 32768 or training).")
    ] = None,
    cache_type: Annotated[str, typer.Option(help="K and V cache type.")] = "q8_0",
    headroom: Annotated[str, typer.Option(help="VRAM left free under the target.")] = "1.5G",
    target_vram: Annotated[
        str | None, typer.Option(help="Plan for this much VRAM instead of the card's total.")
    ] = None,
    n_cpu_moe: Annotated[
        int | None, typer.Option(help="Fix N (with --ctx max: the largest context at N).")
    ] = None,
    overhead: Annotated[
        str, typer.Option(help="Per-GPU runtime overhead (CUDA context).")
    ] = "512M",
    parallel: Annotated[
        int | None,
        typer.Option(help="llama-server slots, -np (default: auto, 4 sharing one cache)."),
    ] = None,
    ubatch: Annotated[int, typer.Option(help="Micro-batch (-ub).")] = 512,
    gpu_index: Annotated[
        int, typer.Option(help="Which detected GPU to plan for (nvidia-smi's index).")
    ] = 0,
    gpu: Annotated[
        str | None,
        typer.Option(help="Plan for a hardware profile instead of detecting, e.g. rtx4090."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The --n-cpu-moe N and -ot placement that fits your GPU, with a ready command."""
    facts = load_model_facts(model)
    n_ctx, ctx_max = _parse_ctx(ctx) if ctx is not None else (None, False)
    if n_ctx is None:
        n_ctx = min(32768, facts.context_length or 32768)
    cache = parse_cache_type(cache_type)
    total, free, gpu_source = _gpu_target(target_vram or vram, gpu_index, gpu)
    ram_total, ram_available, cores = _host_ram(ram)
    settings = Settings(
        n_ctx=n_ctx, type_k=cache, type_v=cache, n_ubatch=ubatch,
        gpu_overhead_bytes=parse_size(overhead, allow_zero=True),
    )  # fmt: skip
    if parallel is not None:  # an explicit -np turns the unified KV cache off
        settings = settings.model_copy(
            update={"n_seq": parallel, "kv_unified": False, "explicit_parallel": True}
        )
    headroom_bytes = parse_size(headroom, allow_zero=True)
    request = PlanRequest(
        model_path=str(model), target_bytes=total, headroom_bytes=headroom_bytes,
        settings=settings, ctx_max=ctx_max, n_cpu_moe=n_cpu_moe, ram_total_bytes=ram_total,
        ram_available_bytes=ram_available, physical_cores=cores, gpu_free_bytes=free,
    )  # fmt: skip
    result = make_plan(facts, request)
    if as_json:
        sys.stdout.write(report.to_json(report.plan_payload(result)) + "\n")
    else:
        out.print(report.render_plan(result, facts, gpu_source), soft_wrap=True)
    if not result.fits:
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def run(
    context: typer.Context,
    model: ModelArg,
    target_vram: Annotated[
        str | None, typer.Option(help="Peak device memory allowed (default: total - headroom).")
    ] = None,
    ctx: Annotated[
        int | None, typer.Option(help="Context tokens (default: 32768 or training).")
    ] = None,
    cache_type: Annotated[str, typer.Option(help="K and V cache type.")] = "q8_0",
    server: Annotated[str | None, typer.Option(help="llama-server to use.")] = None,
    headroom: Annotated[str, typer.Option(help="Left free when no --target-vram.")] = "1.5G",
    overhead: Annotated[
        str, typer.Option(help="Runtime overhead added when memory is read from the log.")
    ] = "512M",
    fill: Annotated[int | None, typer.Option(help="Tokens to fill before measuring.")] = None,
    port: Annotated[int | None, typer.Option(help="Port for llama-server (default: free).")] = None,
    keep: Annotated[bool, typer.Option(help="Leave the best server running until Ctrl-C.")] = False,
    retune: Annotated[
        bool, typer.Option(help="Tune again even when a saved profile matches.")
    ] = False,
    save: Annotated[
        bool, typer.Option(help="Save the winner as a tuned profile ($MOETUNE_HOME).")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Launch llama-server, measure device memory after filling the context, step N, report.

    The winner is saved as a tuned profile; a later run with the same model file, GPU,
    llama.cpp build and settings launches it directly (once, to confirm) unless --retune.
    Arguments after -- are passed to llama-server (e.g. -- --rpc 127.0.0.1:50052 -ub 2048).
    """
    install_signal_handlers()
    facts = load_model_facts(model)
    extra = tuple(context.args)
    n_ctx = check_context(ctx) if ctx is not None else min(32768, facts.context_length or 32768)
    if facts.context_length and n_ctx > facts.context_length:
        err.print(f"warning: context {n_ctx} is beyond the training context "
                  f"{facts.context_length}", style="yellow", highlight=False)  # fmt: skip
    cache = parse_cache_type(cache_type)
    settings = Settings(
        n_ctx=n_ctx, type_k=cache, type_v=cache, gpu_overhead_bytes=parse_size(overhead, True),
        n_ubatch=extra_int(extra, "-ub", "--ubatch-size") or 512,
        n_batch=extra_int(extra, "-b", "--batch-size") or 2048,
    )  # fmt: skip
    config = TrialConfig(
        binary=find_server(server), model=str(model), settings=settings, extra_args=extra,
        fill_tokens=fill, port=port, threads=_host_ram(None)[2],
    )  # fmt: skip
    target = parse_size(target_vram) if target_vram is not None else None
    with err.status("tuning...") as status:
        setup = prepare_run(config, target_bytes=target, headroom_bytes=parse_size(headroom, True),
                            gpus=detect_gpu_probe())  # fmt: skip
        result = tune_with_profiles(
            facts, config, setup, store=ProfileStore(), retune=retune, save=save,
            on_event=status.update,
            on_attempt=lambda attempt: err.print(describe(attempt), highlight=False),
            on_note=lambda note: err.print(note, highlight=False),
        )  # fmt: skip
    if as_json:
        payload = report.run_payload(result)
        payload["profile"] = profile_report.run_profile_payload(result)
        sys.stdout.write(report.to_json(payload) + "\n")
    else:
        out.print(report.render_run(result), soft_wrap=True)
        if (lines := profile_report.render_run_profile(result, str(model))) is not None:
            out.print(lines, soft_wrap=True)
    if keep and result.best is not None:
        _serve_forever(config, result.best.n_cpu_moe)


def _serve_forever(config: TrialConfig, n_cpu_moe: int) -> None:
    """--keep: the best configuration, in the foreground until Ctrl-C."""
    with launch(config.binary, trial_args(config, n_cpu_moe), port=config.port) as running:
        with ServerClient(running.url) as client, err.status("loading the best configuration"):
            client.wait_ready(config.ready_timeout_s, running.check_alive)
        err.print(f"serving at {running.url} (--n-cpu-moe {n_cpu_moe}); Ctrl-C to stop")
        try:
            while running.check_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            err.print("stopping llama-server")


# Commands kept in their own modules register themselves on `app` when imported.
from moetune import cli_bench, cli_profiles  # noqa: E402

__all__ = ["app", "cli_bench", "cli_profiles", "main"]


def main() -> None:
    app(prog_name="moetune")
