"""report/chart.py: uniplot's charts at 80 columns, plain characters, a mark per series,
``+`` where series meet, the ranges the data's."""

from __future__ import annotations

import math

import pytest

from moetune.report import chart
from moetune.report.chart import Series, plot

from support.chart import panels, places
from support.width import WIDTH


def _two(a: tuple[tuple[float, float], ...], b: tuple[tuple[float, float], ...]) -> list[str]:
    return plot(
        [Series(label="first", mark="o", points=a), Series(label="second", mark="x", points=b)],
        title="speed against N",
        x_label="--n-cpu-moe N",
        y_label="tok/s",
    )


def test_a_chart_at_80_columns_has_its_axes_and_legend() -> None:
    lines = _two(((0, 100.0), (10, 80.0)), ((20, 40.0),))
    text = "\n".join(lines)
    assert all(len(line) <= WIDTH for line in lines), text
    assert "\x1b" not in text  # no colour codes, in a terminal or not
    assert lines[0].strip() == "speed against N"
    assert "--n-cpu-moe N" in text and " tok/s" in text  # x's name, y's unit
    assert "oo first" in text and "xx second" in text  # each mark and its series
    (rows,) = panels(lines)
    shown = places(rows, "ox+")
    # the ranges are the data's: the first point top left, the last bottom right
    assert shown[(0, 0)] == "o" and shown[(len(rows) - 1, len(rows[0]) - 1)] == "x"
    assert sorted(shown.values()) == ["o", "o", "x"]


@pytest.mark.parametrize("top", [50.0, 12_345.6, 987_654.3])
def test_distinct_points_keep_distinct_places(top: float) -> None:
    """Points of two series one apart in N and a per cent apart in value: wherever they share
    a cell (as the plot's width and uniplot's discretizer place them) the cell is ``+``,
    elsewhere each has its own mark; wide y labels never push a line past 80 columns."""
    a = tuple((float(n), top * (1 - n / 100)) for n in range(0, 40, 3))
    b = tuple((float(n) + 1, top * (1 - n / 100) * 0.99) for n in range(0, 40, 3))
    lines = _two(a, b)
    assert all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    (rows,) = panels(lines)
    shown = places(rows, "ox+")
    counts = {m: list(shown.values()).count(m) for m in "ox+"}
    assert counts["o"] + counts["x"] + 2 * counts["+"] == len(a) + len(b)


def test_points_of_two_series_in_one_cell_are_one_plus() -> None:
    lines = _two(((0, 10.0), (5, 20.0)), ((0, 10.0), (9, 30.0)))
    (rows,) = panels(lines)
    assert sorted(places(rows, "ox+").values()) == ["+", "o", "x"]
    assert "++ two or more in one place" in "\n".join(lines)
    # a series whose every point met another's stays in the legend
    lines = _two(((0, 10.0),), ((0, 10.0), (9, 30.0)))
    assert "oo first" in "\n".join(lines)


def test_a_flat_series_is_not_stretched_over_the_height() -> None:
    """Values within 0.02 % of each other (a forecast's rounding) sit on one or two rows of
    a range ``MIN_SPAN`` of their size tall, not on the top and bottom rows."""
    lines = plot(
        [Series(label="", mark="5", points=((30, 1523.4), (31, 1523.6), (32, 1523.5)))],
        title="flat",
        x_label="N",
        y_label="tok/s",
    )
    (rows,) = panels(lines)
    used = {r for r, _ in places(rows, "5")}
    assert len(used) <= 2 and 0 not in used and len(rows) - 1 not in used
    assert chart.MIN_SPAN == 0.1


def test_one_point_and_no_point() -> None:
    lines = plot(
        [Series(label="-ub 512", mark="5", points=((12, 30.0),))],
        title="t",
        x_label="N",
        y_label="s",
    )
    (rows,) = panels(lines)
    assert list(places(rows, "5").values()) == ["5"]
    assert (
        plot([Series(label="none", mark="o", points=())], title="t", x_label="N", y_label="s") == []
    )
    odd = ((math.nan, 1.0), (1.0, math.inf))  # not finite: left out
    assert (
        plot([Series(label="odd", mark="o", points=odd)], title="t", x_label="N", y_label="s") == []
    )


def test_a_line_is_drawn_beneath_the_points() -> None:
    diagonal = Series(label="y = x", mark=".", points=((0, 0), (100, 100)), line=True)
    point = Series(label="config", mark="o", points=((50, 50),))
    lines = plot([point, diagonal], title="t", x_label="x", y_label="y")
    (rows,) = panels(lines)
    assert list(places(rows, "o").values()) == ["o"]  # on the line, not hidden by it
    assert sum(row.count(".") for row in rows) > len(rows)
    assert "two or more" not in "\n".join(lines)


def test_marks_for_cycles_and_avoids_digits_and_plus() -> None:
    marks = chart.marks_for(12)
    assert marks[: len(chart.MARKS)] == list(chart.MARKS) and marks[len(chart.MARKS)] == "o"
    assert not any(m.isdigit() or m == chart.SEVERAL for m in chart.MARKS)
