"""`moetune export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import Argument, Option, command, err, handle_errors
from moetune.cli.options import PICK_DEFAULTS, PickOptions, RamOpt, TimeoutOpt, pick_options
from moetune.errors import BadValueError
from moetune.jobs.names import DEFAULT_TIMEOUT_S


@command("export")
@handle_errors
@pick_options
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
    picking: PickOptions = PICK_DEFAULTS,
    ram: RamOpt = None,
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
    from moetune.jobs.export import (
        FORMATS,
        check_out,
        export_entries,
        export_text,
        write_export,
    )
    from moetune.report.line import warn
    from moetune.report.render import TextView, render

    if fmt not in FORMATS:
        raise BadValueError(f"unknown format {fmt!r}", hint=f"use {' or '.join(FORMATS)}")
    chosen = picking.pick("export", ram=ram)
    if out is not None:  # before the plans: a bad --out is said at once
        check_out(out)
    left_out: list[str] = []
    entries, binary = export_entries(
        models or [], chosen, picking.require_tuned, left_out=left_out, warn=warn
    )
    if out is None:
        render(TextView(export_text(fmt, entries, binary)))
    else:
        write_export(out, fmt, entries, binary)
        err().print(f"wrote {len(entries)} model(s) to {out}", highlight=False)
    if left_out:  # the others are written: the exit code says one was left out
        from moetune.errors import DoesNotFitError

        raise DoesNotFitError(
            f"left out {len(left_out)} model(s) that do not fit: {', '.join(left_out)}",
            hint="give --ram/--vram/--gpu for the machine that serves them",
        )
