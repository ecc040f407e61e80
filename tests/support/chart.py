"""Reading a chart of report/chart.py back: its plot's rows and where its marks are."""

from __future__ import annotations

from collections.abc import Sequence


def panels(lines: Sequence[str]) -> list[list[str]]:
    """Each panel's plot rows (inside its box), top first."""
    found: list[list[str]] = []
    rows: list[str] | None = None
    for line in lines:
        if line.startswith("┌"):
            rows = []
        elif line.startswith("└") and rows is not None:
            found.append(rows)
            rows = None
        elif rows is not None:
            rows.append(line[1 : line.index("│", 1)])
    return found


def places(rows: Sequence[str], marks: str) -> dict[tuple[int, int], str]:
    """(row, column) of each of ``marks`` in a panel's rows, and the mark there."""
    return {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row) if ch in marks}
