"""The command line: parse, call a job or the core, render.

``main`` registers on ``app`` only the command that the arguments name (``moetune plan ...``
builds the options of ``plan`` alone); ``--help``, no command or an unknown name register
every command, in the order ``--help`` lists them. Each command module keeps its heavy
imports inside the command, so ``moetune inspect`` loads neither the HTTP client nor the
planner, and ``moetune --version`` loads almost nothing. In-process callers (the tests) call
``load_commands()`` for the whole tree. ``main`` ends the process itself (``exit_now``),
skipping the interpreter's teardown.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from moetune.cli.app import app

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

# A command creates some 10^5 objects that live until it ends (modules, typer's and pydantic's
# schemas, a model's facts): at the collector's default (a pass over the young objects at every
# 700 more) a plan spent a large part of its time tracing them. A pass at every 100,000 more
# still bounds the garbage of a long command (run, bench).
YOUNG_COLLECTION_THRESHOLD = 100_000

# each command's name, and the module that registers it
COMMANDS = {name: name for name in COMMAND_MODULES} | {"report": "bench"}

__all__ = ["COMMANDS", "COMMAND_MODULES", "app", "exit_now", "load_commands", "main", "modules_for"]


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


def load_commands(argv: Sequence[str] | None = None) -> None:
    """Register on ``app`` the commands ``moetune ARGV`` needs (``argv`` None: every one)."""
    for module in modules_for(argv):
        importlib.import_module(f"moetune.cli.{module}")


def main() -> None:
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
    load_commands(sys.argv[1:])
    try:
        app(prog_name="moetune")
    except SystemExit as done:
        exit_now(done)


def exit_now(done: SystemExit) -> NoReturn:
    """End the process as ``done`` says, without the interpreter's teardown of every module
    and object (a large part of a short command's time: typer's, pydantic's and the plan's
    objects freed one by one). What a normal exit does that matters still happens first: the
    ``atexit`` functions run (``tempfile``'s cleanups, ``logging``'s flush among them) and
    stdout and stderr are flushed. With another thread still running, or a stream that cannot
    be flushed (a closed pipe), the normal exit ends it, and says what it always says."""
    if threading.active_count() > 1:
        raise done
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except OSError:
        raise done from None
    code = done.code
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code)
    raise done  # a message as the code: the normal exit prints it
