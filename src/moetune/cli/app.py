"""The typer app, the stderr console, and the one place where errors become a line and an
exit code (a command's output goes through report.render).

Command modules register themselves on ``app``; each imports what its command needs inside
the command, so that starting moetune costs only typer and the command that runs.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from typer.core import TyperGroup

from moetune import __version__
from moetune.cli.coercion import plain_coercion
from moetune.cli.helpfmt import whole_short_help, write_commands
from moetune.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from moetune.jobs.status import LiveStatus


class Group(TyperGroup):
    """moetune's command group: its options (--debug, --version, --help) coerced plainly."""

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_coercion(super().get_params(ctx))

    def get_short_help_str(self, limit: int = 45) -> str:
        return whole_short_help(self)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        write_commands(self, ctx, formatter)


app = typer.Typer(
    cls=Group,
    name="moetune",
    help="Tune llama.cpp Mixture-of-Experts expert offload for your GPU.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors, the value names of cli/options.py
)

P = ParamSpec("P")
R = TypeVar("R")


class _State:
    debug: bool = False


@functools.lru_cache(maxsize=1)
def err() -> Console:
    """The console for progress, warnings and errors (stderr)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


@contextlib.contextmanager
def live_status(label: str) -> Iterator[LiveStatus]:
    """A job's live status on stderr: a spinner line (starting as ``label``) on a terminal,
    else plain lines (a phase change, the fill done, memory at most every few seconds)."""
    from rich.text import Text

    from moetune.jobs.status import LiveStatus

    console = err()
    if not console.is_terminal:
        yield LiveStatus(emit=lambda line: console.print(line, markup=False, highlight=False))
        return
    with console.status(label) as spinner:
        yield LiveStatus(show=lambda line: spinner.update(Text(line)))


def stop_on_signals(child: str = "llama-server") -> None:
    """Ctrl-C, SIGTERM and SIGHUP unwind (``child`` stops); the first says so at once."""
    from moetune.llamacpp.process import install_signal_handlers

    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over a progress spinner's line
    install_signal_handlers(f"{clear}moetune: interrupted, stopping {child}...\n".encode())


def fail(exc: BaseException, document: bool) -> typer.Exit:
    """Report ``exc``: one line on stderr with its named code (the traceback with --debug), and
    with ``document`` the error's JSON document on stdout; the Exit to raise. An exception
    ``named_error`` does not know is a bug: INTERNAL."""
    from moetune.errors import named_error
    from moetune.report.common import render_error

    named = named_error(exc)
    if named is not None:
        code, message, hint = named.exit_code, named.message, named.hint
    else:
        code, message = ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        hint = None if _State.debug else "rerun with --debug for the traceback"
    if _State.debug:
        import traceback

        err().print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
    if document:
        error_document(code, message, hint)
    err().print(render_error(message, hint, code))
    return typer.Exit(int(code))


def error_document(code: ExitCode, message: str, hint: str | None) -> None:
    """A failure on stdout (``--json``), beside its line on stderr: the ``error`` of the
    document the command had made (plan's DOES_NOT_FIT), or a document of its own."""
    from moetune.report.payloads import error_payload
    from moetune.report.render import release_json

    with contextlib.suppress(OSError):  # stdout closed: the line on stderr still says it
        release_json(error_payload(code, message, hint))


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn every error into one line on stderr and a named exit code (traceback: --debug);
    under ``--json`` (the command's ``as_json``) also on stdout: the command's documents are
    held until it ends, and a failure goes into the last one as its ``error`` (plan's
    DOES_NOT_FIT, doctor's CHECK_FAILED), or is the one document where there was none."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from moetune.report.render import hold_json, release_json

        as_json = bool(kwargs.get("as_json"))
        if as_json:
            hold_json()
        try:
            result = func(*args, **kwargs)
        except typer.Exit:
            if as_json:
                release_json()
            raise
        except (Exception, KeyboardInterrupt) as exc:
            raise fail(exc, as_json) from None
        if as_json:
            release_json()
        return result

    return wrapper


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"moetune {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    _State.debug = debug
