"""How a command group lists its commands in ``--help``: each one's whole first paragraph,
wrapped between words only."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any


def whole_short_help(command: Any) -> str:
    """The first paragraph of a command's help, whole: the line a group's ``--help`` lists it
    with (click cuts it at the column's width with "..."; the group's formatter wraps it)."""
    text = command.short_help or command.help or ""
    first = inspect.cleandoc(text).split("\n\n")[0]
    return " ".join(first.split())


def write_commands(group: Any, ctx: Any, formatter: Any) -> None:
    """A group's "Commands" section: each command's whole first paragraph, wrapped at the
    formatter's width between words only (click's wrap also breaks at a hyphen:
    ``llama-`` / ``swap``)."""
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            rows.append((name, whole_short_help(command)))
    if not rows:
        return
    first = max(len(name) for name, _ in rows)
    with formatter.section("Commands"):
        indent = " " * formatter.current_indent
        width = max(formatter.width - formatter.current_indent - first - 2, 20)
        for name, text in rows:
            lines = textwrap.wrap(text, width, break_on_hyphens=False) or [""]
            formatter.write(f"{indent}{name:<{first}}  {lines[0]}\n")
            for line in lines[1:]:
                formatter.write(f"{indent}{'':<{first}}  {line}\n")
