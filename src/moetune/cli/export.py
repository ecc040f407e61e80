"""`moetune export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import Argument, Option, command, err, handle_errors
from moetune.cli.options import (
    CtxOpt,
    PickCacheTypeOpt,
    PickGpuOpt,
    PickRpcOpt,
    PickTargetOpt,
    PickVramOpt,
    ProfileOpt,
    RamOpt,
    TimeoutOpt,
    pick,
)
from moetune.errors import BadValueError
from moetune.hub.env import DEFAULT_TIMEOUT_S


@command("export")
@handle_errors
def export(
    fmt: Annotated[str, Argument(help="preset or llama-swap.", metavar="FORMAT")],
    models: Annotated[
        list[str] | None,
        Argument(
            help="Models (paths or user/model:quant; default: every tuned profile).",
            metavar="[MODEL]...",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        Option("--out", help="Write (and update) this file instead of printing.", metavar="FILE"),
    ] = None,
    ctx: CtxOpt = None,
    cache_type: PickCacheTypeOpt = None,
    profile: ProfileOpt = None,
    target_vram: PickTargetOpt = None,
    rpc: PickRpcOpt = None,
    gpu: PickGpuOpt = None,
    vram: PickVramOpt = None,
    ram: RamOpt = None,
    require_tuned: Annotated[
        bool,
        Option("--require-tuned", help="Refuse a model with no tuned profile (no plan)."),
    ] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
) -> None:
    """Serve what was tuned: llama-server's router preset, or a llama-swap config.

    Each model gets the tuned profile its options pick (context, cache type, --target-vram,
    the device set: --gpu, --vram, --rpc; several that match are refused); one without a
    tuned profile gets its plan for the same options (default: the detected GPU, this
    machine's RAM), marked as predicted; a model whose plan does not fit is left out, the
    others exported (exit 6). Flags every model shares go into [*] (a llama-swap macro).
    With --out, moetune's own entries are updated and everything written by hand is kept.
    """
    from moetune.jobs.export import FORMATS, export_entries, llama_swap_text, preset_text
    from moetune.report.render import TextView, render

    if fmt not in FORMATS:
        raise BadValueError(f"unknown format {fmt!r}", hint=f"use {' or '.join(FORMATS)}")
    chosen = pick(
        "export",
        ctx=ctx,
        cache_type=cache_type,
        profile=profile,
        target=target_vram,
        rpc=rpc,
        gpu=gpu,
        vram=vram,
        ram=ram,
    )
    if out is not None:  # before the plans: a bad --out is said at once
        from moetune.store.files import check_writable

        check_writable(out)
    left_out: list[str] = []
    entries, binary = export_entries(
        models or [],
        chosen,
        require_tuned,
        left_out=left_out,
        warn=lambda line: err().print(f"warning: {line}", style="yellow", highlight=False),
    )

    def merged(existing: str | None) -> str:
        if fmt == "preset":
            return preset_text(entries, existing)
        return llama_swap_text(entries, binary, existing)

    if out is None:
        render(TextView(merged(None)))
    else:
        from moetune.store.files import update_text

        update_text(out, merged)
        err().print(f"wrote {len(entries)} model(s) to {out}", highlight=False)
    if left_out:  # the others are written: the exit code says one was left out
        from moetune.errors import DoesNotFitError

        raise DoesNotFitError(
            f"left out {len(left_out)} model(s) that do not fit: {', '.join(left_out)}",
            hint="give --ram/--vram/--gpu for the machine that serves them",
        )
