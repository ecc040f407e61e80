"""Charts in plain characters: uniplot's home (tests/unit/test_layers.py, ``HOMES``).

The speed frontier (report/frontier.py) and bench's charts (report/bench.py) hand their
series here; uniplot draws them. Only the drawing imports it (inside ``plot``), so a plan
without a chart, and every ``--json``, loads neither uniplot nor the numpy it brings.

Why uniplot rather than plotext (both tried at 80 columns on 2026-12-07): uniplot is pure
Python, typed (``py.typed``), and ``plot_to_string`` is one call with no state between
charts; its ASCII character set takes one mark per series, which its legend repeats, so the
series stay apart without colour; its axis labels are rounded figures of the data's range.
plotext 6.1 reads as well (axis titles, a legend box, more ticks) but loads a compiled C++
kernel through ctypes, keeps one global figure, its legend box hides the points beneath it,
and 6.x renamed 5.x's whole API. Importing uniplot took 0.48 billion instructions above a
bare interpreter (0.34 of them numpy's, which gguf brings anyway), plotext 0.79 billion
(valgrind; ``-X importtime``'s best of 11 on a loaded machine: 109 ms against 149 ms).

Marks are characters, never colours: a chart reads the same in a terminal, a pipe, a log and
a test. Where points of several series fall in one cell, the cell shows ``+`` (uniplot would
show the last series' mark alone). The y range is the data's, not forced from 0 (from 0 a
frontier whose candidates differ by a few per cent is one flat row), but at least
``MIN_SPAN`` of its largest value tall, so that differences below that (noise, a forecast's
rounding) stay within a row or two instead of filling the height.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from moetune.record import record

COLUMNS = 80  # every line of a chart, the axis labels and the legend included
HEIGHT = 10  # the plot's rows
MIN_SPAN = 0.1  # the y range's least height, a share of the largest |y|
# A series' mark when its caller has none of its own; no digit, so that they never meet the
# frontier's ubatch marks, and not ``+`` (points of several series in one cell).
MARKS = "ox*#@%&=~"
SEVERAL = "+"
_PAD = 0.001  # uniplot's own margin around the data, a share of the range
_Range = tuple[float, float]


@record(frozen=True, kw_only=True)
class Series:
    """One series: its points (x, y) and the one character that marks each of them; a
    ``line`` is drawn point to point (a reference such as y = x) and beneath the others."""

    label: str
    mark: str
    points: tuple[tuple[float, float], ...]
    line: bool = False


def marks_for(count: int) -> list[str]:
    """``count`` marks from ``MARKS`` (cycled past their number)."""
    return [MARKS[i % len(MARKS)] for i in range(count)]


def _range(values: Sequence[float], least: float = 0.0) -> _Range:
    """The values' range, at least ``least`` tall (about their middle, not below 0 when
    none is), with uniplot's margin; one value: itself plus and minus 1."""
    low, high = min(values), max(values)
    if high - low < least:
        middle = (low + high) / 2
        low, high = middle - least / 2, middle + least / 2
        if low < 0 <= min(values):
            low, high = 0.0, least
    if high == low:
        return low - 1, high + 1
    pad = (high - low) * _PAD
    return low - pad, high + pad


def _cell(value: float, span: _Range, steps: int) -> int:
    """The cell uniplot puts ``value`` in (its discretizer: the share of the range, floored)."""
    return int((value - span[0]) / (span[1] - span[0]) * steps)


def _merged(
    series: Sequence[Series], x_span: _Range, y_span: _Range, width: int, height: int
) -> list[Series]:
    """``series`` with every point that shares a cell with another series' point moved to
    one ``+`` series, drawn last (lines are references: never merged)."""
    owners: dict[tuple[int, int], set[int]] = {}
    for index, one in enumerate(series):
        if not one.line:
            for x, y in one.points:
                cell = (_cell(x, x_span, width), _cell(y, y_span, height))
                owners.setdefault(cell, set()).add(index)
    shared = {cell for cell, who in owners.items() if len(who) > 1}
    if not shared:
        return list(series)
    kept: list[Series] = []
    several: list[tuple[float, float]] = []
    for one in series:
        if one.line:
            kept.append(one)
            continue
        points: list[tuple[float, float]] = []
        for x, y in one.points:
            cell = (_cell(x, x_span, width), _cell(y, y_span, height))
            (several if cell in shared else points).append((x, y))
        kept.append(Series(label=one.label, mark=one.mark, points=tuple(points)))
    return [*kept, Series(label="two or more in one place", mark=SEVERAL, points=tuple(several))]


def plot(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    columns: int = COLUMNS,
    height: int = HEIGHT,
    x_range: _Range | None = None,
    y_range: _Range | None = None,
) -> list[str]:
    """The chart's lines: the title, the plot with y labels (``y_label`` their unit) and
    x labels, the x axis's name, then the legend (each series' mark and label). A point that
    is not a finite number is left out, and so is a series without points; none at all gives
    no lines. The ranges are the data's unless given."""
    drawn = [
        Series(label=s.label, mark=s.mark, points=finite, line=s.line)
        for s in series
        if (finite := tuple(p for p in s.points if math.isfinite(p[0]) and math.isfinite(p[1])))
    ]
    if not drawn:
        return []
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    x_span = x_range or _range(xs)
    y_span = y_range or _range(ys, MIN_SPAN * max(abs(y) for y in ys))
    # the plot's columns: the box and the widest y label (``12,345.6 tok/s``) beside it
    label = len(f"{max(abs(v) for v in y_span):,.0f}") + len(".0 ") + len(y_label)
    width = columns - 3 - label
    drawn = [s for s in drawn if s.line] + [s for s in drawn if not s.line]
    drawn = _merged(drawn, x_span, y_span, width, height)

    from uniplot import plot_to_string

    # a series whose every point went to ``+`` is in the legend alone: one point out of view
    away = [x_span[1] + 2 * (x_span[1] - x_span[0])], [y_span[0]]
    text = plot_to_string(
        [[y for _, y in s.points] or away[1] for s in drawn],
        [[x for x, _ in s.points] or away[0] for s in drawn],
        title=title,
        legend_labels=[s.label for s in drawn],
        character_set="ascii",
        force_ascii_characters=[s.mark for s in drawn],
        lines=[s.line for s in drawn],
        color=False,
        height=height,
        width=width,
        line_length_hard_cap=columns,
        x_min=x_span[0],
        x_max=x_span[1],
        y_min=y_span[0],
        y_max=y_span[1],
        y_unit=f" {y_label}",
        x_gridlines=[],
        y_gridlines=[],
    )
    lines = [line.rstrip() for line in text.splitlines()]
    ticks = next(i for i, line in enumerate(lines) if line.startswith("└")) + 2
    return [*lines[:ticks], f"{x_label:^{width + 2}}".rstrip(), *lines[ticks:]]
