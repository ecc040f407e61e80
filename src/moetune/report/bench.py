"""Rendering of `moetune bench` results: tables, the forecast beside the measurements, the
verdict in words, a chart of decode speed against depth and one of measured against forecast
(drawn by report/chart.py, which alone imports the plotting library)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import median

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.records.fit import describe_fit
from moetune.records.results import (
    BenchForecast,
    BenchResult,
    ConfigRun,
    DepthResult,
    RowForecast,
    Stat,
    Verdict,
)
from moetune.report.common import fitted, new_table, plural, ram_line, short_path
from moetune.units import format_bytes, format_spread

_STATUS_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red"}
_METRIC_WORD = {"decode_tps": "decode", "prefill_tps": "prefill"}


def _num(value: float) -> str:
    """Three significant figures or so: 0.0123, 1.23, 12.3, 1234."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _secs(value: float) -> str:
    """Seconds: milliseconds shown below 10 s (0.026), tenths above (12.3)."""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def format_stat(stat: Stat | None, fmt: Callable[[float], str] = _num) -> str:
    """``41.2 (40.1-42.0)``; the median alone when every repeat agrees; ``-`` when unknown."""
    if stat is None:
        return "-"
    if fmt(stat.min) == fmt(stat.max):
        return fmt(stat.median)
    return f"{fmt(stat.median)} ({fmt(stat.min)}-{fmt(stat.max)})"


def _ranged(name: str, stat: Stat) -> str:
    """``plan 41.2 (40.1-42.0, spread 4.6 %)``."""
    return f"{name} {_num(stat.median)} ({_num(stat.min)}-{_num(stat.max)}, spread " + (
        f"{format_spread(stat.spread)})"
    )


def verdict_text(verdict: Verdict) -> str:
    """One line: who is fastest at this depth, and by how much; noisy, naming no winner, when
    another configuration's range reaches the fastest one's (each with its range and spread)."""
    word = _METRIC_WORD[verdict.metric]
    head = f"depth {verdict.depth}, {word}:"
    best = f"{_num(verdict.winner_median)} tok/s"
    if verdict.runner_up is None or verdict.runner_up_median is None:
        return f"{head} only {verdict.winner} measured ({best})"
    pair = f"{best} vs {_num(verdict.runner_up_median)}"
    if verdict.within_noise and verdict.winner_stat is not None and verdict.overlapping:
        others = [
            _ranged(n, s)
            for n, s in zip(verdict.overlapping, verdict.overlapping_stats, strict=True)
        ]
        return (
            f"{head} noisy, no winner: {_ranged(verdict.winner, verdict.winner_stat)} "
            f"overlaps {' and '.join(others)}"
        )
    if verdict.within_noise:  # a result saved before the ranges were kept with the verdict
        return f"{head} noisy, no winner: {verdict.winner} and {verdict.runner_up} overlap ({pair})"
    ratio = f"{verdict.ratio:.2f}x" if verdict.ratio is not None else "faster than"
    return f"{head} {verdict.winner} is fastest, {ratio} {verdict.runner_up} ({pair})"


def _header(result: BenchResult) -> Text:
    """Two lines: what ran where, then the workload."""
    where = f"bench of {result.server_url or short_path(result.model or '?')}"
    if result.device:
        where += f" on {result.device}"
    if result.device_budgets:
        pairs = zip(result.device_names, result.device_budgets, strict=True)
        where += ", budgets " + ", ".join(f"{n} {format_bytes(b)}" for n, b in pairs)
    elif result.budget_bytes is not None:
        where += f", budget {format_bytes(result.budget_bytes)}"
    workload = [
        f"{result.endpoint} endpoint",
        f"ctx {result.n_ctx}",
        f"{result.n_predict} generated tokens",
        _repeats_text(result),
    ]
    if result.image:
        workload.insert(1, f"image {result.image} with every request")
    return Text(f"{where}\n{' | '.join(workload)}")


def _repeats_text(result: BenchResult) -> str:
    """``3-10 repeats until within 10.0 %``; ``3 repeats`` for an older result (or when the
    least is the most)."""
    least, most = result.repeats, result.max_repeats
    if most is None or most == least or result.max_spread is None:
        return plural(least, "repeat")
    return f"{least}-{most} repeats until within {format_spread(result.max_spread)}"


def _peak(run: ConfigRun, budget: int | None, budgets: Sequence[int] = ()) -> Text:
    """The measured device peak, red when over the budget; several devices: each one's,
    a line each."""
    if run.device_peaks and budgets:
        text = Text()
        for i, (peak, limit) in enumerate(zip(run.device_peaks, budgets, strict=True)):
            over = peak is not None and peak > limit
            shown = format_bytes(peak) if peak is not None else "-"
            text.append(("\n" if i else "") + shown, style="red" if over else "")
        return text
    if run.peak_device_bytes is None:
        return Text("-")
    over = budget is not None and run.peak_device_bytes > budget
    return Text(format_bytes(run.peak_device_bytes), style="red" if over else "")


def _configs_table(
    configs: Sequence[ConfigRun], budget: int | None, budgets: Sequence[int] = ()
) -> Table:
    grid = new_table(
        "configurations",
        ("config", "status", "placement", "predicted", "device peak", "load s"),
        right=("predicted", "device peak", "load s"),
        fold=("placement",),
    )
    for run in configs:
        grid.add_row(
            run.name,
            Text(run.status, style=_STATUS_STYLE[run.status]),
            run.description,
            format_bytes(run.predicted_bytes) if run.predicted_bytes is not None else "-",
            _peak(run, budget, budgets),
            f"{run.load_s:.1f}" if run.load_s is not None else "-",
        )
    return grid


def _config_notes(configs: Sequence[ConfigRun], probe_note: str) -> list[Text]:
    """What the table has no room for: --fit's choice, why one was skipped or failed, logs."""
    lines = []
    for run in configs:
        note = run.message or ""
        if run.memory_note:
            note = run.memory_note + (f"; {note}" if note else "")
        if run.fit is not None:
            note = describe_fit(run.fit) + (f"; {note}" if note else "")
        if run.status == "failed" and run.log_path:
            note += f" (log: {short_path(run.log_path)})"
        if note:
            style = "dim" if run.status == "ok" else _STATUS_STYLE[run.status]
            lines.append(Text(f"  {run.name}: {note}", style=style))
    if probe_note:
        lines.append(Text(probe_note, style="dim"))
    return lines


def _unsettled_notes(result: BenchResult) -> list[Text]:
    """The rows whose requests never agreed within the bound."""
    lines = []
    for row in result.results:
        if row.settled:
            continue
        lines.append(
            Text(
                f"  {row.config} at depth {row.depth}: not settled after "
                f"{plural(len(row.samples), 'request')} (not within "
                f"{format_spread(result.max_spread)}): decode spread "
                f"{format_spread(row.decode_tps.spread)}, prefill "
                f"{format_spread(row.prefill_tps.spread)}",
                style="yellow",
            )
        )
    return lines


def _best_decode(results: Sequence[DepthResult]) -> dict[int, float]:
    best: dict[int, float] = {}
    for row in results:
        best[row.depth] = max(best.get(row.depth, 0.0), row.decode_tps.median)
    return best


_RESULT_COLUMNS = (
    "config",
    "depth",
    "TTFT s",
    "prefill tok/s",
    "decode tok/s",
    "vs best",
    "device mem",
)


def _stat_cell(stat: Stat | None, fmt: Callable[[float], str], stacked: bool) -> Text:
    """``median (min-max)`` on one line, or the range under the median (``stacked``)."""
    if not stacked or stat is None or fmt(stat.min) == fmt(stat.max):
        return Text(format_stat(stat, fmt))
    text = Text(fmt(stat.median))
    text.append(f"\n{fmt(stat.min)}-{fmt(stat.max)}", style="dim")
    return text


def _results_table(result: BenchResult, stacked: bool = False) -> Table:
    title = "measurements: median, min-max below" if stacked else "measurements: median (min-max)"
    grid = new_table(title, _RESULT_COLUMNS, right=_RESULT_COLUMNS[1:])
    if result.shortest_prompt:
        grid.caption = f"depth = prompt tokens; the shortest prompt is {result.shortest_prompt}" + (
            " (the chat template alone)" if result.endpoint == "chat" else ""
        )
        grid.caption_justify = "left"
    best = _best_decode(result.results)
    for row in sorted(result.results, key=lambda r: (r.depth, _order(result, r.config))):
        top = best.get(row.depth, 0.0)
        share = f"{row.decode_tps.median / top:.2f}x" if top > 0 else "-"
        grid.add_row(
            row.config,
            str(row.depth),
            _stat_cell(row.ttft_s, _secs, stacked),
            _stat_cell(row.prefill_tps, _num, stacked),
            _stat_cell(row.decode_tps, _num, stacked),
            share,
            format_bytes(row.device_bytes) if row.device_bytes is not None else "-",
        )
    return grid


def _order(result: BenchResult, name: str) -> int:
    names = [c.name for c in result.configs]
    return names.index(name) if name in names else len(names)


def _probe_note(result: BenchResult) -> str:
    if result.probe is None:
        return ""
    note = f"device memory: {result.probe}"
    if not result.probe_includes_overhead:
        note += "; buffers only, without the runtime's own overhead"
    return note


def _error(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}".replace("%", " %")


def _maybe(value: float | None) -> str:
    return "-" if value is None else _num(value)


_FORECAST_COLUMNS = (
    "config",
    "depth",
    "decode",
    "forecast",
    "error",
    "prefill",
    "forecast ",
    "error ",
)


def forecast_of(result: BenchResult, config: str, depth: int) -> RowForecast | None:
    """The forecast of one measured row, if any."""
    rows = result.forecast.rows if result.forecast is not None else []
    return next((f for f in rows if f.config == config and f.depth == depth), None)


def _forecast_table(result: BenchResult) -> Table:
    grid = new_table(
        "forecast beside measured, tok/s",
        _FORECAST_COLUMNS,
        right=_FORECAST_COLUMNS[1:],
    )
    for row in sorted(result.results, key=lambda r: (r.depth, _order(result, r.config))):
        found = forecast_of(result, row.config, row.depth)
        grid.add_row(
            row.config,
            str(row.depth),
            _num(row.decode_tps.median),
            _maybe(found.decode_tps) if found else "-",
            _error(found.decode_error) if found else "-",
            _num(row.prefill_tps.median),
            _maybe(found.prefill_tps) if found else "-",
            _error(found.prefill_error) if found else "-",
        )
    return grid


def _forecast_notes(result: BenchResult, forecast: BenchForecast) -> list[Text]:
    """What each configuration's forecast rests on (its own points left out)."""
    lines = []
    if forecast.note:
        lines.append(Text(f"forecast: {forecast.note}", style="yellow"))
    if forecast.rows:
        lines.append(Text("each configuration's forecast, without its own points:", style="dim"))
    if forecast.rows and forecast.ram_read_bandwidth is not None:
        lines.append(Text(f"  {ram_line(forecast.ram_read_bandwidth)}", style="dim"))
    for name in dict.fromkeys(f.config for f in forecast.rows):
        first = next(f for f in forecast.rows if f.config == name)
        if first.note:
            about = first.note
        elif first.calibration.points or first.calibration.refused_error is not None:
            about = first.calibration.label
        else:
            about = "uncalibrated (fewer than two other points)"
            if first.missing:
                about += "; missing figures: " + ", ".join(first.missing)
        lines.append(Text(f"  {name}: {about}", style="dim"))
    return lines


_STREAMS_COLUMNS = ("config", "N", "aggregate", "per stream", "TTFT", "forecast", "error")


def _streams_table(result: BenchResult) -> Table:
    """``bench --parallel``: each configuration at each N, decode tok/s of the N streams
    together and of one, the time to first token, and the aggregate's forecast."""
    grid = new_table(
        "concurrent streams: decode tok/s (aggregate: all together)",
        _STREAMS_COLUMNS,
        right=_STREAMS_COLUMNS[1:],
    )
    rows = result.forecast.streams_rows if result.forecast is not None else []
    for run in result.configs:
        for found in run.streams:
            fc = next(
                (f for f in rows if f.config == run.name and f.streams == found.streams), None
            )
            grid.add_row(
                run.name,
                str(found.streams),
                format_stat(found.decode_tps_aggregate),
                format_stat(found.decode_tps_per_stream),
                format_stat(found.ttft_s, _secs),
                _maybe(fc.decode_tps) if fc else "-",
                _error(fc.decode_error) if fc else "-",
            )
    return grid


def render_bench(result: BenchResult) -> RenderableType:
    """The configurations, the measurements, the forecast beside them and the verdict."""
    parts: list[RenderableType] = [_header(result), Text("")]
    parts.append(_configs_table(result.configs, result.budget_bytes, result.device_budgets))
    parts += _config_notes(result.configs, _probe_note(result))
    if result.results:
        parts.append(fitted(_results_table(result), _results_table(result, stacked=True)))
        parts += _unsettled_notes(result)
    if result.results and result.forecast is not None:
        if result.forecast.rows:
            parts.append(_forecast_table(result))
        parts += _forecast_notes(result, result.forecast)
    if any(run.streams for run in result.configs):
        parts.append(_streams_table(result))
    parts.append(Text("verdict", style="bold"))
    if not result.verdicts:
        parts.append(Text("nothing was measured: see the configurations above", style="red"))
    for verdict in result.verdicts:
        style = "dim" if verdict.within_noise else ""
        parts.append(Text(f"  {verdict_text(verdict)}", style=style))
    return Group(*parts)


def _series(result: BenchResult) -> list[tuple[str, str]]:
    """Each measured configuration's name and its mark, in the configurations' order."""
    from moetune.report.chart import marks_for

    names = [c.name for c in result.configs if any(r.config == c.name for r in result.results)]
    names += sorted({r.config for r in result.results} - set(names))
    return list(zip(names, marks_for(len(names)), strict=True))


def render_chart(result: BenchResult) -> RenderableType:
    """Decode tok/s (the median) against depth, one series per configuration, drawn by
    report/chart.py at 80 columns (the ranges are in the measurements' table)."""
    from moetune.report.chart import Series, plot

    if not result.results:
        return Text("")
    series = [
        Series(
            label=name,
            mark=mark,
            points=tuple(
                (float(r.depth), r.decode_tps.median) for r in result.results if r.config == name
            ),
        )
        for name, mark in _series(result)
    ]
    lines = plot(
        series,
        title="decode tok/s (median) against depth",
        x_label="depth (prompt tokens)",
        y_label="tok/s",
    )
    return Text("\n".join(lines))


def _metric_chart(result: BenchResult, metric: str) -> list[str]:
    """Measured tok/s of ``metric`` (decode or prefill) against its forecast, a point per
    configuration and depth, beside the line where they agree; and the median error."""
    from moetune.report.chart import Series, plot

    pairs: dict[str, list[tuple[float, float]]] = {}
    errors: list[float] = []
    for row in result.results:
        found = forecast_of(result, row.config, row.depth)
        value: float | None = getattr(found, f"{metric}_tps") if found else None
        measured: float = getattr(row, f"{metric}_tps").median
        if value is None or not math.isfinite(value) or not math.isfinite(measured):
            continue
        pairs.setdefault(row.config, []).append((value, measured))
        error = getattr(found, f"{metric}_error")
        if error is not None:
            errors.append(error)
    if not pairs:
        return [f"{metric} tok/s: no forecast: measurements only"]
    every = [v for points in pairs.values() for point in points for v in point]
    span = (min(every), max(every))
    span = (span[0] * 0.95, span[1] * 1.05) if span[0] < span[1] else (span[0] - 1, span[1] + 1)
    series = [
        Series(
            label="measured = forecast",
            mark=".",
            points=((span[0], span[0]), (span[1], span[1])),
            line=True,
        ),
        *(
            Series(label=n, mark=m, points=tuple(pairs[n]))
            for n, m in _series(result)
            if n in pairs
        ),
    ]
    lines = plot(
        series,
        title=f"{metric} tok/s: measured against forecast",
        x_label="forecast tok/s",
        y_label="tok/s",
        x_range=span,
        y_range=span,
    )
    if errors:
        lines.append(f"median error {_error(median(errors))} over {plural(len(errors), 'row')}")
    return lines


def render_forecast_chart(result: BenchResult) -> RenderableType:
    """Measured against forecast, decode then prefill, at 80 columns: above the dotted line
    a configuration ran faster than its forecast, below it slower."""
    if not result.results:
        return Text("")
    return Text("\n".join([*_metric_chart(result, "decode"), *_metric_chart(result, "prefill")]))


def render_report(result: BenchResult) -> RenderableType:
    """``moetune report``: the saved result again, with the bar chart and measured against
    forecast."""
    return Group(
        render_bench(result),
        Text(""),
        render_chart(result),
        Text(""),
        render_forecast_chart(result),
    )
