"""`moetune export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import Argument, Option, command, err, handle_errors
from moetune.cli.options import (
    PICK_DEFAULTS,
    JsonOpt,
    PickOptions,
    RamOpt,
    TimeoutOpt,
    WeightsOpt,
    bounds,
    pick_options,
    whole,
)
from moetune.errors import BadValueError
from moetune.jobs.names import DEFAULT_TIMEOUT_S, MAX_MODELS_MAX


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
    models_max: Annotated[
        int,
        Option(
            "--models-max",
            help="Models the router keeps loaded at once (its own --models-max; 0: no limit); "
            f"more than 1 is refused unless they fit together; {bounds(0, MAX_MODELS_MAX)}.",
            metavar="N",
            parser=whole(0, MAX_MODELS_MAX),
        ),
    ] = 1,
    together: Annotated[
        bool,
        Option(
            "--together",
            help="Plan the named models to stay loaded at once on the same devices and RAM "
            "(the budgets shared, split by the forecast); each loads when the router starts "
            "(load-on-startup), --models-max is their number; llama-swap: one group that "
            "runs them at once.",
        ),
    ] = False,
    weights: WeightsOpt = None,
    picking: PickOptions = PICK_DEFAULTS,
    ram: RamOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    as_json: JsonOpt = False,
) -> None:
    """Serve what was tuned: llama-server's router preset, or a llama-swap config.

    Each model gets the tuned profile its options pick (context, cache type, --target-vram,
    the device set: --gpu, --vram, --rpc; several that match are refused); one without a
    tuned profile gets its plan for the same options (default: the detected GPU, this
    machine's RAM), marked as predicted; a model whose plan does not fit is left out, the
    others exported (exit 6). Flags every model shares that move neither memory nor
    placement go into [*] (a llama-swap macro). Prints the router's command line: one model
    loaded at a time (--models-max 1); llama-swap runs one at a time too. With --out,
    moetune's own entries are updated and everything written by hand is kept.
    """
    from moetune.jobs.export import (
        FORMATS,
        ExportResult,
        check_out,
        check_together,
        export_entries,
        export_text,
        router_command,
        serve_notes,
        together_entries,
        write_export,
    )
    from moetune.report.line import warn
    from moetune.report.render import ExportView, TextView, render

    if fmt not in FORMATS:
        raise BadValueError(f"unknown format {fmt!r}", hint=f"use {' or '.join(FORMATS)}")
    check_together(fmt, [], models_max)  # a value refused whatever the models
    chosen = picking.pick("export", ram=ram)
    if out is not None:  # before the plans: a bad --out is said at once
        check_out(out)
    left_out: list[str] = []
    group = False  # llama-swap: one group runs them at once
    if together:
        entries, binary, group = together_entries(models or [], chosen, weights, warn=warn)
        models_max = len(entries) if group else 1
        if fmt != "preset":
            models_max = 1
    else:
        if weights is not None:
            raise BadValueError("--weights weighs models planned --together")
        entries, binary = export_entries(
            models or [], chosen, picking.require_tuned, left_out=left_out, warn=warn
        )
    check_together(fmt, entries, models_max, group=group)
    command = router_command(fmt, binary, out, models_max)
    notes = serve_notes(fmt, command, models_max, group=group)
    text = None
    if out is None:
        text = export_text(fmt, entries, binary, None, models_max, group=group)
        if not as_json:
            render(TextView(text))
    else:
        write_export(out, fmt, entries, binary, models_max, group=group)
        err().print(f"wrote {len(entries)} model(s) to {out}", highlight=False)
    for note in notes:
        err().print(note, highlight=False, markup=False, soft_wrap=True)
    if as_json:
        result = ExportResult(
            format=fmt,
            out=None if out is None else str(out),
            router_command=command,
            models_max=models_max,
            models=tuple(entries),
            left_out=left_out,
            notes=notes,
            text=text,
        )
        render(ExportView(result), as_json=True)
    if left_out:  # the others are written: the exit code says one was left out
        from moetune.errors import DoesNotFitError

        raise DoesNotFitError(
            f"left out {len(left_out)} model(s) that do not fit: {', '.join(left_out)}",
            hint="give --ram/--vram/--gpu for the machine that serves them",
        )
