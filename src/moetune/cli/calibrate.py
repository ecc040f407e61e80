"""`moetune calibrate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from moetune.cli.app import app, err, handle_errors
from moetune.cli.options import Command, JsonOpt


@app.command(cls=Command)
@handle_errors
def calibrate(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="llama-bench results (-o json or -o jsonl) or `moetune bench` result files.",
            metavar="FILE...",
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Import measured speeds as speed points (kept under $MOETUNE_HOME/speed).

    Each llama-bench test, and each configuration and depth of a moetune bench, becomes a
    point: placement, ubatch, threads, depth, tokens and tok/s, with the model and machine.
    Importing the same file again keeps nothing twice.
    """
    from moetune.jobs.calibrate import import_files
    from moetune.report import SCHEMA_VERSION
    from moetune.report.render import CalibrateView, render

    result = import_files(
        files,
        schema_version=SCHEMA_VERSION,
        warn=lambda text: err().print(f"warning: {text}", style="yellow", highlight=False),
    )
    render(CalibrateView(result), as_json)
