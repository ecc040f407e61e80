"""Output at 80 columns: the tables in a text and the check that a narrow rendering keeps
what the wide one says."""

from __future__ import annotations

import re

WIDTH = 80


_FLAG_RE = re.compile(r"^--?[a-z][a-z0-9-]*$")


def table_lines(text: str) -> list[str]:
    """The lines of every table: from the header above a ``───`` rule to the next blank line."""
    lines = text.splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if set(line.strip()) == {"─"}:
            found.append(lines[index - 1])
            for after in lines[index:]:
                if not after.strip():
                    break
                found.append(after)
    return found


def check(narrow: str, wide: str) -> None:
    """Tables within the width; prose too, but for the commands to copy (ShellLines, one
    whole line each, however long); no line of either rendering ends in spaces."""
    rows = table_lines(narrow) or narrow.splitlines()  # doctor's table has no header
    rows += [line for line in narrow.splitlines() if not _is_command(line)]
    too_wide = [line for line in rows if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    trailing = [line for line in narrow.splitlines() + wide.splitlines() if line != line.rstrip()]
    assert not trailing, "trailing spaces:\n" + "\n".join(map(repr, trailing))
    assert not re.search(r"…(?!/)", narrow), narrow  # only a path's middle, "…/"
    flags = {w for w in narrow.split() if _FLAG_RE.match(w)}
    assert flags <= set(wide.split()), flags - set(wide.split())


def _is_command(line: str) -> bool:
    return line.lstrip("# ").startswith(("llama-server ", "moetune ", "-ot "))
