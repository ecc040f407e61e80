"""`moetune inspect`."""

from __future__ import annotations

from typing import Annotated

import typer

from moetune.cli.app import app, handle_errors
from moetune.cli.options import Command, JsonOpt, ModelArg, TimeoutOpt
from moetune.hub.env import DEFAULT_TIMEOUT_S


@app.command(cls=Command)
@handle_errors
def inspect(
    model: ModelArg,
    as_json: JsonOpt = False,
    layers: Annotated[bool, typer.Option("--layers", help="Show the per-block table.")] = False,
    tensors: Annotated[
        bool, typer.Option("--tensors", help="Include every tensor in --json.")
    ] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
) -> None:
    """Architecture, blocks, experts, and bytes per block by tensor role."""
    from moetune.jobs.models import open_model
    from moetune.report.render import InspectView, render

    facts = open_model(model).facts
    render(InspectView(facts, layers=layers, tensors=tensors), as_json)
