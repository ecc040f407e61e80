"""Rendering of `moetune bench` results: tables, the verdict in words, a terminal bar chart."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.records.fit import describe_fit
from moetune.records.results import BenchResult, ConfigRun, DepthResult, Stat, Verdict
from moetune.report.common import fitted, new_table, plural, short_path
from moetune.units import format_bytes

BAR_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉"
_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")
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


def verdict_text(verdict: Verdict) -> str:
    """One line: who is fastest at this depth, and by how much (or that it is noise)."""
    word = _METRIC_WORD[verdict.metric]
    head = f"depth {verdict.depth}, {word}:"
    best = f"{_num(verdict.winner_median)} tok/s"
    if verdict.runner_up is None or verdict.runner_up_median is None:
        return f"{head} only {verdict.winner} measured ({best})"
    pair = f"{best} vs {_num(verdict.runner_up_median)}"
    if verdict.within_noise:
        return (
            f"{head} {verdict.winner} and {verdict.runner_up} are within noise "
            f"({pair}; their min-max spreads overlap)"
        )
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
        plural(result.repeats, "repeat"),
    ]
    if result.image:
        workload.insert(1, f"image {result.image} with every request")
    return Text(f"{where}\n{' | '.join(workload)}")


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


def render_bench(result: BenchResult) -> RenderableType:
    """The configurations, the measurements and the verdict."""
    parts: list[RenderableType] = [_header(result), Text("")]
    parts.append(_configs_table(result.configs, result.budget_bytes, result.device_budgets))
    parts += _config_notes(result.configs, _probe_note(result))
    if result.results:
        parts.append(fitted(_results_table(result), _results_table(result, stacked=True)))
    parts.append(Text("verdict", style="bold"))
    if not result.verdicts:
        parts.append(Text("nothing was measured: see the configurations above", style="red"))
    for verdict in result.verdicts:
        style = "dim" if verdict.within_noise else ""
        parts.append(Text(f"  {verdict_text(verdict)}", style=style))
    return Group(*parts)


def _bar(value: float, scale: float, width: int = BAR_WIDTH) -> str:
    """A bar of ``value / scale * width`` cells in eighths of a block."""
    eighths = round(max(0.0, value) / scale * width * 8) if scale > 0 else 0
    full, rest = divmod(min(eighths, width * 8), 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def render_chart(result: BenchResult, width: int = BAR_WIDTH) -> RenderableType:
    """Decode tok/s by depth, one bar per configuration (the median; the range in numbers)."""
    if not result.results:
        return Text("")
    scale = max(r.decode_tps.max for r in result.results)
    names = [c.name for c in result.configs if any(r.config == c.name for r in result.results)]
    pad = max(len(n) for n in names)
    lines: list[Text] = [Text("decode tok/s by depth (median, min-max)", style="bold")]
    for depth in sorted({r.depth for r in result.results}):
        lines.append(Text(f"depth {depth}"))
        for index, name in enumerate(names):
            row = next((r for r in result.results if r.config == name and r.depth == depth), None)
            if row is None:
                continue
            bar = _bar(row.decode_tps.median, scale, width).ljust(width)
            line = Text(f"  {name.ljust(pad)} ")
            line.append(bar, style=_COLOURS[index % len(_COLOURS)])
            line.append(f" {format_stat(row.decode_tps)}")
            lines.append(line)
    return Group(*lines)


def render_report(result: BenchResult) -> RenderableType:
    """``moetune report``: the saved result again, with the bar chart."""
    return Group(render_bench(result), Text(""), render_chart(result))
