"""`moetune inspect`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors, print_report, write_json
from moetune.cli.options import Command, JsonOpt, ModelArg


@app.command(cls=Command)
@handle_errors
def inspect(
    model: ModelArg,
    as_json: JsonOpt = False,
    layers: Annotated[bool, typer.Option("--layers", help="Show the per-block table.")] = False,
    tensors: Annotated[
        bool, typer.Option("--tensors", help="Include every tensor in --json.")
    ] = False,
) -> None:
    """Architecture, blocks, experts, and bytes per block by tensor role."""
    from moetune.cli.models import open_model

    facts = open_model(model).facts
    if as_json:
        from moetune.report import to_json
        from moetune.report.payloads import inspect_payload

        write_json(to_json(inspect_payload(facts, with_tensors=tensors)))
        return
    from moetune.report.inspect import render_inspect

    print_report(render_inspect(facts, show_layers=layers))
