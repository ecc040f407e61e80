"""`moetune plan`'s speed frontier: the table of candidates and charts of decode and prefill
tok/s against N, one series per ubatch, in plain characters within 80 columns (drawn by
report/chart.py, which alone imports the plotting library)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.frontier import Frontier, FrontierEntry, describe
from moetune.report.common import forecast_label, new_table
from moetune.units import format_bytes

MARKS = {512: "5", 1024: "1", 2048: "2", 4096: "4"}  # the ubatch's mark in the chart
TABLE_ROWS = 12  # the first rows in the goal's order (and the pick); --json has them all


def _rate(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _mem(n_bytes: int) -> str:
    return format_bytes(n_bytes, precision=1)


def _placement(entry: FrontierEntry) -> str:
    """``N 4``, ``-ot``; ``N 3 op>=1024`` where the command sets the op-offload threshold."""
    place = f"N {entry.n_cpu_moe}" if entry.form == "n_cpu_moe" else "-ot"
    found = entry.op_offload_min_batch
    return place if found is None else f"{place} op>={found}"


def _table(found: Frontier) -> Table:
    several = any(len(e.devices) > 1 for e in found.entries) or any(
        not e.all_devices for e in found.entries
    )
    threads = any(e.thread_variant for e in found.entries)
    columns = ["", "placement", "-ub"] + (["-t"] if threads else [])
    columns += ["devices", "device peak"] if several else ["GPU peak"]
    columns += ["RAM", "decode", "prefill"]
    ranked = _ranked_column(found)
    columns += [ranked] if ranked else []
    right = {"-ub", "-t", "device peak", "GPU peak", "RAM", "decode", "prefill", *columns[-1:]}
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
        row += [str(entry.threads or "-")] if threads else []
        if several:
            row += [",".join(entry.devices), " ".join(_mem(b) for b in entry.device_bytes)]
        else:
            row.append(_mem(entry.device_bytes[0]))
        row += [
            _mem(entry.host_bytes),
            _rate(entry.forecast.decode_tok_s),
            _rate(entry.forecast.prefill_tok_s),
        ]
        row += [_score(found, entry.score)] if ranked else []
        table.add_row(*row, style="bold" if entry.picked else None)
    return table


def _ranked_column(found: Frontier) -> str | None:
    """The column of the figure the rows are ranked by, where it is not decode or prefill
    itself: a workload's seconds per request, balanced's geometric mean of the two."""
    if found.goal.startswith("workload"):
        return "s/request"
    if found.goal == "throughput":  # --parallel N: the N streams' decode together
        return "aggregate"
    return "balanced" if found.goal == "balanced" else None


def _score(found: Frontier, score: float | None) -> str:
    if score is None or score <= 0:
        return "?"
    return f"{1 / score:.2f}" if found.goal.startswith("workload") else f"{score:.1f}"


def _ranked_by(found: Frontier) -> str:
    """What the rows are ranked by, in words."""
    if found.goal.startswith("workload"):
        return "ranked by seconds per request (prompt / prefill + generated / decode), least first"
    if found.goal == "balanced":
        return "ranked by the geometric mean of decode and prefill tok/s"
    if found.goal == "throughput":
        return "ranked by the decode tok/s of all the streams together (aggregate)"
    if found.goal == "latency":
        return "ranked by one stream's decode tok/s"
    return f"ranked by {found.goal} tok/s"


def _mark(n_ubatch: int, others: list[int]) -> str:
    """``5`` for ``-ub 512`` and so on; another ubatch takes one of the chart's own marks."""
    if n_ubatch in MARKS:
        return MARKS[n_ubatch]
    from moetune.report.chart import marks_for

    return marks_for(len(others))[others.index(n_ubatch)]


def chart_lines(found: Frontier, n_layers: int) -> list[str]:
    """Decode and prefill tok/s against N (the ``--n-cpu-moe`` candidates on every device),
    one series per ubatch, marked by its ubatch (``+`` where two meet), drawn by
    report/chart.py at 80 columns; what is unknown is said instead."""
    from moetune.report.chart import Series, plot

    base = next((e for e in found.entries if e.base), None)
    own = base.op_offload_min_batch if base is not None else None
    entries = [
        e
        for e in found.entries
        if e.form == "n_cpu_moe"
        and e.all_devices
        and not e.thread_variant
        and e.op_offload_min_batch == own
    ]
    used = sorted({e.n_ubatch for e in entries})
    others = [u for u in used if u not in MARKS]
    lines: list[str] = []
    for title, metric in (("decode tok/s", "decode_tok_s"), ("prefill tok/s", "prefill_tok_s")):
        series = []
        for ubatch in used:
            points = tuple(
                (float(e.n_cpu_moe or 0), value)
                for e in entries
                if e.n_ubatch == ubatch and (value := getattr(e.forecast, metric)) is not None
            )
            series.append(Series(label=f"-ub {ubatch}", mark=_mark(ubatch, others), points=points))
        chart = plot(
            series,
            title=f"{title} against --n-cpu-moe N",
            x_label=f"--n-cpu-moe N (of {n_layers} layers)",
            y_label="tok/s",
        )
        lines += chart or [f"{title}: unknown (no forecast has the figures it needs)"]
    return lines


def render_frontier(found: Frontier, n_layers: int) -> list[RenderableType]:
    """The table, the chart, the pick and why, and what the forecasts lack."""
    picked = found.entries[found.picked]
    parts: list[RenderableType] = [_table(found)]
    shown = max(TABLE_ROWS, found.picked + 1)
    more = len(found.entries) - shown
    parts.append(
        Text(
            f"tok/s: decode at depth {found.depth}, prefill of {found.n_prompt} tokens; "
            + _ranked_by(found)
            + (f"; {more} more candidates in --json" if more > 0 else "")
        )
    )
    parts += [Text(line) for line in chart_lines(found, n_layers)]
    parts.append(Text(f"pick (*): {describe(picked)}; {found.why}"))
    if not picked.forecast.calibration.points:  # what its figures rest on
        parts.append(Text(f"forecasts: {forecast_label(picked.forecast)}", style="dim"))
    if found.missing:
        parts.append(Text(f"missing figures: {', '.join(found.missing)}", style="yellow"))
    parts.append(Text(found.threads, style="dim"))
    return parts
