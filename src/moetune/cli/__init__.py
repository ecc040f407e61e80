"""The command line: parse, call a job or the core, render.

Importing this package registers every command on ``app``, in the order ``--help`` lists them;
each command module keeps its heavy imports inside the command, so ``moetune inspect`` loads
neither the HTTP client nor the bench, and ``moetune --version`` loads almost nothing.
"""

from __future__ import annotations

import importlib

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
for _module in COMMAND_MODULES:
    importlib.import_module(f"moetune.cli.{_module}")

__all__ = ["app", "main"]


def main() -> None:
    app(prog_name="moetune")
