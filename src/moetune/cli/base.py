"""What every command module uses: the registry the commands declare themselves in
(``command``, ``group``; cli/typer_app.py puts them on the typer app), their options as typer
declares them (``Option``, ``Argument``: ``typer.Option`` and ``typer.Argument``, with our
parsers' errors reported as moetune reports errors), the stderr console, and the one place
where errors become a line and an exit code (a command's output goes through report.render).

A command module imports this and cli/options.py, not typer itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer

from moetune.errors import BadValueError, ExitCode
from moetune.record import record

if TYPE_CHECKING:
    from rich.console import Console

    from moetune.jobs.status import LiveStatus

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

PASS_THROUGH = "pass_through"  # the context's meta key: the arguments after --

COMMAND_MODULES = (
    "inspect",
    "plan",
    "run",
    "bench",
    "calibrate",
    "profiles",
    "alias",
    "export",
    "doctor",
)

# each command's name, and the module that registers it
COMMANDS = {name: name for name in COMMAND_MODULES} | {"report": "bench"}


# What a command and an option's callback get as their context (typer finds it by this type):
# the arguments after ``--`` in ``meta``, and resources held until the command ends.
CommandContext = typer.Context


class BadValueParameter(typer.BadParameter):
    """A malformed option value: one line and BAD_VALUE, like any moetune error."""

    exit_code = int(ExitCode.BAD_VALUE)

    def __init__(self, error: BadValueError) -> None:
        super().__init__(error.message)
        self.error = error

    def format_message(self) -> str:
        name = self.param.opts[0] if self.param is not None and self.param.opts else None
        return f"{name}: {self.error.message}" if name else self.error.message

    def show(self, file: Any = None) -> None:
        say_error(self.format_message(), self.error.hint, ExitCode.BAD_VALUE)


def reported(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A typer parser: ``parse``, its BadValueError shown as moetune shows errors."""

    def parser(value: str) -> T:
        if not isinstance(value, str):  # a default given as the value itself, parsed already
            return value
        try:
            return parse(value)
        except BadValueError as exc:
            raise BadValueParameter(exc) from None

    parser.__name__ = parse.__name__
    return parser


def Option(*decls: str, parser: Callable[[str], Any] | None = None, **settings: Any) -> Any:
    """``typer.Option(*decls, **settings)``; ``parser``, a function of the text that raises
    BadValueError, reported as moetune reports errors (BAD_VALUE)."""
    if parser is not None:
        settings["parser"] = reported(parser)
    return typer.Option(*decls, **settings)


def Argument(*, parser: Callable[[str], Any] | None = None, **settings: Any) -> Any:
    """``typer.Argument(**settings)``, its ``parser`` as ``Option``'s."""
    if parser is not None:
        settings["parser"] = reported(parser)
    return typer.Argument(**settings)


@record(frozen=True)
class Spec:
    """A registered command (or group, ``func`` None): its name, the group it is in, and
    whether llama-server's arguments follow ``--``."""

    name: str
    func: Callable[..., Any] | None
    group: str | None = None
    pass_through: bool = False
    help: str | None = None


REGISTRY: list[Spec] = []  # in the order the modules declared them (the help lists them so)


def command(
    name: str | None = None, *, group: str | None = None, pass_through: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare a command (its function's name, underscores as dashes, unless ``name``), in
    ``group`` if given; ``pass_through``: it launches llama-server, and what follows ``--``
    is passed to it."""

    def declare(func: Callable[P, R]) -> Callable[P, R]:
        named = name or func.__name__.replace("_", "-")
        REGISTRY.append(Spec(name=named, func=func, group=group, pass_through=pass_through))
        return func

    return declare


def group(name: str, *, help: str) -> None:
    """Declare a group of commands (``moetune profiles list``)."""
    REGISTRY.append(Spec(name=name, func=None, help=help))


def version_line() -> str:
    """What ``moetune --version`` prints."""
    from moetune import __version__

    return f"moetune {__version__}\n"


class Exit(SystemExit):
    """The end of a command with this exit code (after its line on stderr)."""


class State:
    debug: bool = False


def err() -> Console:
    """The console for progress, warnings and errors (stderr): report/line.py's one."""
    from moetune.report.line import stderr_console

    return stderr_console()


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
    from moetune.jobs.launch import install_signal_handlers

    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over a progress spinner's line
    install_signal_handlers(f"{clear}moetune: interrupted, stopping {child}...\n".encode())


def fail(exc: BaseException, document: bool) -> Exit:
    """Report ``exc``: one line on stderr with its named code (the traceback with --debug), and
    with ``document`` the error's JSON document on stdout; the Exit to raise. An exception
    ``named_error`` does not know is a bug: INTERNAL."""
    from moetune.errors import named_error

    named = named_error(exc)
    if named is not None:
        code, message, hint = named.exit_code, named.message, named.hint
    else:
        code, message = ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
        hint = None if State.debug else "rerun with --debug for the traceback"
    if State.debug:
        import traceback

        err().print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
    if document:
        error_document(code, message, hint)
    say_error(message, hint, code)
    return Exit(int(code))


def say_error(message: str, hint: str | None, code: ExitCode) -> None:
    """The one error line on stderr: styled on a terminal (or where FORCE_COLOR asks for
    colour), else plain, without loading the renderer for it."""
    if sys.stderr.isatty() or os.environ.get("FORCE_COLOR"):
        from moetune.report.common import render_error

        err().print(render_error(message, hint, code))
        return
    from moetune.report.line import error_line

    sys.stderr.write(error_line(message, hint, code) + "\n")
    sys.stderr.flush()


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
        except Exit:
            if as_json:
                release_json()
            raise
        except (Exception, KeyboardInterrupt) as exc:
            raise fail(exc, as_json) from None
        if as_json:
            release_json()
        return result

    return wrapper
