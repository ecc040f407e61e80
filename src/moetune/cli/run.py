"""`moetune run`."""

from __future__ import annotations

from typing import Annotated

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
    ModelArg,
    ServerOpt,
    TargetVramOpt,
)


@app.command(context_settings=PASS_THROUGH)
@handle_errors
def run(
    context: typer.Context,
    model: ModelArg,
    target_vram: TargetVramOpt = None,
    ctx: CtxIntOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    server: ServerOpt = None,
    headroom: DeviceHeadroomOpt = DEFAULT_HEADROOM,
    overhead: Annotated[
        str, typer.Option(help="Runtime overhead added when memory is read from the log.")
    ] = DEFAULT_OVERHEAD,
    fill: Annotated[int | None, typer.Option(help="Tokens to fill before measuring.")] = None,
    port: Annotated[int | None, typer.Option(help="Port for llama-server (default: free).")] = None,
    keep: Annotated[bool, typer.Option(help="Leave the best server running until Ctrl-C.")] = False,
    retune: Annotated[
        bool, typer.Option(help="Tune again even when a saved profile matches.")
    ] = False,
    save: Annotated[
        bool, typer.Option(help="Save the winner as a tuned profile ($MOETUNE_HOME).")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Launch llama-server, measure device memory after filling the context, step N, report.

    The winner is saved as a tuned profile; a later run with the same model file, GPU,
    llama.cpp build and settings launches it directly (once, to confirm) unless --retune.
    Arguments after -- are passed to llama-server (e.g. -- --rpc 127.0.0.1:50052 -ub 2048).
    """
    from moetune.cli.machine import physical_cores
    from moetune.core.facts import load_model_facts
    from moetune.core.kvcache import parse_cache_type
    from moetune.core.planner import check_context
    from moetune.core.settings import Settings, default_n_ctx
    from moetune.hardware import detect_gpu_probe
    from moetune.jobs.launch import LaunchSpec, prepare_device, settings_from_extra
    from moetune.jobs.run import Fill, Progress, describe, keep_serving, tune_with_profiles
    from moetune.llamacpp.process import find_server, install_signal_handlers
    from moetune.store.tuned import ProfileStore
    from moetune.units import parse_size

    install_signal_handlers()
    facts = load_model_facts(model)
    extra = tuple(context.args)
    n_ctx = check_context(ctx) if ctx is not None else default_n_ctx(facts.context_length)
    if facts.context_length and n_ctx > facts.context_length:
        err().print(f"warning: context {n_ctx} is beyond the training context "
                    f"{facts.context_length}", style="yellow", highlight=False)  # fmt: skip
    cache = parse_cache_type(cache_type)
    settings = Settings(n_ctx=n_ctx, type_k=cache, type_v=cache,
                        gpu_overhead_bytes=parse_size(overhead, True))  # fmt: skip
    spec = LaunchSpec(binary=find_server(server), model=str(model),
                      settings=settings_from_extra(settings, extra), extra=extra, port=port,
                      threads=physical_cores())  # fmt: skip
    target = parse_size(target_vram) if target_vram is not None else None
    with err().status("tuning...") as status:
        spec, setup = prepare_device(spec, target_bytes=target,
                                     headroom_bytes=parse_size(headroom, True),
                                     gpus=detect_gpu_probe())  # fmt: skip
        progress = Progress(
            on_event=status.update,
            on_attempt=lambda attempt: err().print(describe(attempt), highlight=False),
            on_note=lambda note: err().print(note, highlight=False),
        )
        result = tune_with_profiles(facts, spec, setup, store=ProfileStore(), retune=retune,
                                    save=save, fill=Fill(tokens=fill),
                                    progress=progress)  # fmt: skip
    from moetune.report import run as rendered

    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import run_payload, run_profile_payload

        payload = run_payload(result)
        payload["profile"] = run_profile_payload(result)
        write_json(to_json(payload))
    else:
        out().print(rendered.render_run(result), soft_wrap=True)
        if (lines := rendered.render_run_profile(result, str(model))) is not None:
            out().print(lines, soft_wrap=True)
    if keep and result.best is not None:
        keep_serving(spec, result.best.n_cpu_moe,
                     loading=lambda: err().status("loading the best configuration"),
                     on_ready=err().print, on_stop=err().print)  # fmt: skip
