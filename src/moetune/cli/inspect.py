"""`moetune inspect`."""

from __future__ import annotations

from typing import Annotated

from moetune.cli.base import Option, command, handle_errors
from moetune.cli.options import JsonOpt, ModelArg, TimeoutOpt
from moetune.jobs.names import DEFAULT_TIMEOUT_S


@command()
@handle_errors
def inspect(
    model: ModelArg,
    as_json: JsonOpt = False,
    layers: Annotated[bool, Option("--layers", help="Show the per-block table.")] = False,
    tensors: Annotated[bool, Option("--tensors", help="Include every tensor in --json.")] = False,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
) -> None:
    """Architecture, blocks, experts, and bytes per block by tensor role."""
    from moetune.jobs.models import open_model
    from moetune.report.render import InspectView, render

    facts = open_model(model).facts
    render(InspectView(facts, layers=layers, tensors=tensors), as_json)
