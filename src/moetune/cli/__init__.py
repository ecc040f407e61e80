"""The command line: parse, call a job or the core, render.

typer parses every command (cli/typer_app.py builds the app from the commands' declarations,
cli/base.py). ``main`` imports only the module of the command that the arguments name, so the
app holds only that command (``--help``, no command or an unknown name: every command, in the
order ``--help`` lists them, for the help and the did-you-mean). Each command module keeps its
heavy imports inside the command, so ``moetune inspect`` loads neither the HTTP client nor the
planner. In-process callers (the tests) call ``load_commands()`` for the whole tree on
``app``.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from moetune.cli.base import COMMAND_MODULES, COMMANDS

if TYPE_CHECKING:
    from moetune.cli.typer_app import app  # __getattr__: with what load_commands registered


# A command creates some 10^5 objects that live until it ends (modules, typer's and pydantic's
# schemas, a model's facts): at the collector's default (a pass over the young objects at every
# 700 more) a plan spent a large part of its time tracing them. A pass at every 100,000 more
# still bounds the garbage of a long command (run, bench).
YOUNG_COLLECTION_THRESHOLD = 100_000


__all__ = [
    "COMMANDS",
    "COMMAND_MODULES",
    "app",
    "import_commands",
    "load_commands",
    "main",
    "modules_for",
]


def modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The command modules that ``moetune ARGV`` needs: the one of the command it names (the
    first argument that is not an option: the app's own, ``--debug`` and ``--version``, take
    no value), none for ``--version`` (it answers before any command), else every one (the
    help, or click's "No such command" with its suggestions). ``argv`` None: every one."""
    for arg in argv or ():
        if arg == "--version":
            return ()
        if arg == "--" or not arg.startswith("-"):
            module = COMMANDS.get(arg)
            if module is None:
                break
            return (module,)
    return COMMAND_MODULES


def import_commands(argv: Sequence[str] | None = None) -> None:
    """Import the command modules ``moetune ARGV`` needs (``argv`` None: every one): each
    declares its commands in the registry (cli/base.py)."""
    for module in modules_for(argv):
        importlib.import_module(f"moetune.cli.{module}")


def load_commands(argv: Sequence[str] | None = None) -> None:
    """Register on ``app`` the commands ``moetune ARGV`` needs (``argv`` None: every one)."""
    from moetune.cli.typer_app import register

    import_commands(argv)
    register()


def __getattr__(name: str) -> Any:
    if name == "app":
        from moetune.cli.typer_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
    load_commands(sys.argv[1:])
    from moetune.cli.typer_app import app

    app(prog_name="moetune")
