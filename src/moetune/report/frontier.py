"""`moetune plan`'s speed frontier: the table of candidates and a chart of decode and prefill
tok/s against N, one mark per ubatch, in plain characters within 80 columns."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.frontier import Frontier, FrontierEntry, describe
from moetune.report.common import new_table
from moetune.units import format_bytes

CHART_WIDTH = 60  # the plot's columns; with the axis labels within 80
CHART_HEIGHT = 10
MARKS = {512: "5", 1024: "1", 2048: "2", 4096: "4"}  # the ubatch's mark
OTHER_MARK = "*"
TABLE_ROWS = 12  # the first rows in the goal's order (and the pick); --json has them all


def _rate(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _mem(n_bytes: int) -> str:
    return format_bytes(n_bytes, precision=1)


def _placement(entry: FrontierEntry) -> str:
    return f"N {entry.n_cpu_moe}" if entry.form == "n_cpu_moe" else "-ot"


def _table(found: Frontier) -> Table:
    several = any(len(e.devices) > 1 for e in found.entries) or any(
        not e.all_devices for e in found.entries
    )
    columns = ["", "placement", "-ub"]
    columns += ["devices", "device peak"] if several else ["GPU peak"]
    columns += ["RAM", "decode", "prefill"]
    right = {"-ub", "device peak", "GPU peak", "RAM", "decode", "prefill"}
    table = new_table(
        f"speed frontier by {found.goal}",
        columns,
        right=right,
        fold=("devices", "device peak"),
    )
    for index, entry in enumerate(found.entries):
        if index >= TABLE_ROWS and not entry.picked:
            continue
        mark = "*" if entry.picked else "best" if index == found.best else ""
        row = [mark, _placement(entry), str(entry.n_ubatch)]
        if several:
            row += [",".join(entry.devices), " ".join(_mem(b) for b in entry.device_bytes)]
        else:
            row.append(_mem(entry.device_bytes[0]))
        row += [
            _mem(entry.host_bytes),
            _rate(entry.forecast.decode_tok_s),
            _rate(entry.forecast.prefill_tok_s),
        ]
        table.add_row(*row, style="bold" if entry.picked else None)
    return table


def _plot(title: str, points: Sequence[tuple[int, float, str]], n_max: int) -> list[str]:
    """One panel: ``points`` (N, tok/s, mark) on a grid, N across, tok/s up from 0."""
    top = max(value for _, value, _ in points)
    grid = [[" "] * CHART_WIDTH for _ in range(CHART_HEIGHT)]
    for n, value, mark in points:
        x = round(n / max(n_max, 1) * (CHART_WIDTH - 1))
        y = CHART_HEIGHT - 1 - round(value / top * (CHART_HEIGHT - 1)) if top > 0 else 0
        cell = grid[y][x]
        grid[y][x] = mark if cell in (" ", mark) else "+"
    label = f"{top:.0f}"
    width = max(len(label), 1)
    lines = [title]
    for row_index, row in enumerate(grid):
        axis = label if row_index == 0 else "0" if row_index == CHART_HEIGHT - 1 else ""
        lines.append(f"{axis:>{width}} |{''.join(row).rstrip()}")
    lines.append(f"{'':>{width}} +{'-' * CHART_WIDTH}")
    ticks = f"N 0{n_max!s:>{CHART_WIDTH - 3}}"
    lines.append(f"{'':>{width}}  {ticks}")
    return lines


def chart_lines(found: Frontier, n_layers: int) -> list[str]:
    """Decode and prefill tok/s against N (the ``--n-cpu-moe`` candidates on every device),
    one mark per ubatch (``+`` where two meet); what is unknown is said instead."""
    entries = [e for e in found.entries if e.form == "n_cpu_moe" and e.all_devices]
    lines: list[str] = []
    for title, values in (
        ("decode tok/s", [(e, e.forecast.decode_tok_s) for e in entries]),
        ("prefill tok/s", [(e, e.forecast.prefill_tok_s) for e in entries]),
    ):
        points = [
            (e.n_cpu_moe or 0, v, MARKS.get(e.n_ubatch, OTHER_MARK))
            for e, v in values
            if v is not None
        ]
        if not points:
            lines.append(f"{title}: unknown (no forecast has the figures it needs)")
            continue
        lines += _plot(f"{title} against --n-cpu-moe N", points, n_layers)
    used = sorted({e.n_ubatch for e in entries})
    legend = ", ".join(f"{MARKS.get(u, OTHER_MARK)} -ub {u}" for u in used)
    lines.append(f"marks: {legend}; + two or more")
    return lines


def render_frontier(found: Frontier, n_layers: int) -> list[RenderableType]:
    """The table, the chart, the pick and why, and what the forecasts lack."""
    picked = found.entries[found.picked]
    parts: list[RenderableType] = [_table(found)]
    shown = max(TABLE_ROWS, found.picked + 1)
    more = len(found.entries) - shown
    parts.append(
        Text(
            f"tok/s: decode at depth {found.depth}, prefill of {found.n_prompt} tokens"
            + (f"; {more} more candidates in --json" if more > 0 else "")
        )
    )
    parts += [Text(line) for line in chart_lines(found, n_layers)]
    parts.append(Text(f"pick (*): {describe(picked)}; {found.why}"))
    if found.missing:
        parts.append(Text(f"missing figures: {', '.join(found.missing)}", style="yellow"))
    parts.append(Text(found.threads, style="dim"))
    return parts
