"""The command line: parses, calls the core, renders; maps errors to exit codes in one place."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console

from moetune import __version__, report
from moetune.errors import ExitCode, MoetuneError
from moetune.model import load_model_facts

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


def main() -> None:
    app(prog_name="moetune")
