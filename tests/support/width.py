"""Output at 80 columns: the tables in a text and the check that a narrow rendering keeps
what the wide one says."""

from __future__ import annotations

import itertools
import re

WIDTH = 80


_FLAG_RE = re.compile(r"^--?[a-z][a-z0-9-]*$")
# a line that ends inside a phrase: a figure whose unit starts the next line, "KV" or "ctx"
# without what follows, a flag without its value
_ENDS_IN_FIGURE = re.compile(r"\d$")
_STARTS_WITH_UNIT = re.compile(r"^\(?(B|KiB|MiB|GiB|TiB|kB|MB|GB|TB|tok/s|GB/s|%)([\s,;:.)\]]|$)")
# a unit opening an aside that the next line closes: "(MiB ⏎ kept free)"
_ENDS_IN_OPEN_UNIT = re.compile(r"(^|\s)\((B|KiB|MiB|GiB|TiB|tok/s|GB/s)$")
_ENDS_IN_LABEL = re.compile(r"(^|\s)\(?(KV|ctx)$")
_ENDS_IN_FLAG = re.compile(r"(^|\s)\(?--?[a-z][a-z0-9-]*$")
_STARTS_WITH_VALUE = re.compile(r"^(\d|[qf]\d|bf16|iq\d|on\b|off\b)")


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
    rows = [line for line in narrow.splitlines() if not _is_command(line)]
    too_wide = [line for line in rows if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    trailing = [line for line in narrow.splitlines() + wide.splitlines() if line != line.rstrip()]
    assert not trailing, "trailing spaces:\n" + "\n".join(map(repr, trailing))
    assert not re.search(r"…(?!/)", narrow), narrow  # only a path's middle, "…/"
    flags = {w for w in narrow.split() if _FLAG_RE.match(w)}
    assert flags <= set(wide.split()), flags - set(wide.split())
    broken = broken_phrases(narrow)
    assert not broken, "a phrase broken over two lines:\n" + "\n".join(broken)


def broken_phrases(text: str) -> list[str]:
    """Each pair of lines (joined by ``⏎``) where the first ends inside a phrase: a size
    whose unit starts the next line (``216.00 ⏎ MiB``), ``KV ⏎ q8_0/q8_0``, ``ctx ⏎
    32768``, a flag whose value starts the next line (``-ctk ⏎ q8_0``), a unit that opens an
    aside the next line closes (``(MiB ⏎ kept free)``); a table's last
    row and the line under it are not one phrase."""
    lines, rows = text.splitlines(), set(table_lines(text))
    found = []
    for line, after in itertools.pairwise(lines):
        end, start = line.rstrip(), after.strip()
        if line not in rows and (
            (_ENDS_IN_FIGURE.search(end) and _STARTS_WITH_UNIT.match(start))
            or (_ENDS_IN_LABEL.search(end) and start)
            or (_ENDS_IN_OPEN_UNIT.search(end) and start)
            or (_ENDS_IN_FLAG.search(end) and _STARTS_WITH_VALUE.match(start))
        ):
            found.append(f"{end} ⏎ {start}")
    return found


def _is_command(line: str) -> bool:
    return line.lstrip("# ").startswith(("llama-server ", "moetune ", "-ot "))
