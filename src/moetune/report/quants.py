"""`moetune plan user/model`: every quant of a repository against this machine, two picks."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from moetune.jobs.quants import QuantRow, QuantsResult
from moetune.report.common import new_table, shell_line
from moetune.units import format_bytes, tokens_arg

_RAM_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def _placement(row: QuantRow) -> str:
    if row.gpu_bytes is None:
        return "-"
    if row.all_on_gpu:
        return "all on the GPU"
    return f"N {row.n_cpu_moe}" if row.n_cpu_moe is not None else "partial"


def _fits(row: QuantRow) -> Text:
    return Text("yes", style="green") if row.fits else Text("no", style="red")


def render_quants(result: QuantsResult, gpu_source: str) -> RenderableType:
    """The table (biggest file first), the picks with their commands, and why rows fail."""
    ctx = f"ctx {result.n_ctx}" if result.n_ctx else "each quant's default context"
    head = Text(
        f"{result.repo} @ {result.commit[:12]} | GPU: {gpu_source} | {ctx}, KV "
        f"{result.cache_type or '-'}"
    )
    table = new_table(
        "quants",
        ("quant", "size", "fits", "placement", "max ctx", "RAM", "GPU peak"),
        right=("size", "max ctx", "GPU peak"),
    )
    for row in result.quants:
        mark = " (best)" if row.tag == result.best else ""
        mark += " (best GPU-only)" if row.tag == result.best_gpu_only else ""
        table.add_row(
            Text(row.tag + mark, style="bold" if mark else ""),
            format_bytes(row.size_bytes),
            _fits(row),
            _placement(row),
            tokens_arg(row.max_ctx) if row.max_ctx else "-",
            Text(row.ram or "-", style=_RAM_STYLE.get(row.ram or "", "")),
            format_bytes(row.gpu_bytes) if row.gpu_bytes is not None else "-",
        )
    lines: list[RenderableType] = [head, Text(), table]
    for label, tag in (("best", result.best), ("best GPU-only", result.best_gpu_only)):
        pick = next((r for r in result.quants if r.tag == tag), None)
        if pick is not None:
            what = f"{label}: {pick.name} ({format_bytes(pick.size_bytes)}, {_placement(pick)})"
            lines += [Text(what, style="bold"), shell_line(pick.command)]
    if result.best is None:
        lines.append(Text(f"no quant fits: {result.reason}", style="red"))
    notes: dict[str, list[str]] = {}  # the quants of each reason, in table order
    for row in result.quants:
        if not row.fits and row.reason:
            notes.setdefault(row.reason, []).append(row.tag)
    if notes:
        said = "; ".join(f"{_some(tags)}: {reason}" for reason, tags in notes.items())
        lines.append(Text(f"not fitting: {said}", style="dim"))
    return Group(*lines)


def _some(tags: list[str], shown: int = 3) -> str:
    more = f" and {len(tags) - shown} more" if len(tags) > shown else ""
    return ", ".join(tags[:shown]) + more
