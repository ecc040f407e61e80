"""`moetune run`: the attempts, the best configuration, and what happened to its profile."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.command import shell_join
from moetune.jobs.results import RunResult
from moetune.report.common import fmt
from moetune.units import format_bytes


def render_run(result: RunResult) -> RenderableType:
    table = Table(
        title=f"attempts on {result.device} (memory: {result.probe})", title_justify="left"
    )
    for column in (
        "N",
        "predicted",
        "measured",
        "status",
        "TTFT s",
        "prompt tok/s",
        "decode tok/s",
    ):
        table.add_column(column, justify="right" if column != "status" else "left")
    for a in result.attempts:
        style = {"ok": "green", "over": "yellow", "oom": "red"}.get(a.status, "")
        table.add_row(
            str(a.n_cpu_moe),
            format_bytes(a.predicted_bytes),
            format_bytes(a.measured_bytes),
            Text(a.status, style=style),
            fmt(a.ttft_s, ".2f"),
            fmt(a.prompt_tps, ".1f"),
            fmt(a.decode_tps, ".1f"),
        )
    parts: list[RenderableType] = [
        Text(
            f"target {format_bytes(result.target_bytes)}, ctx {result.settings.n_ctx}, "
            f"planned --n-cpu-moe {result.planned_n_cpu_moe}, {len(result.attempts)} launches"
        ),
        table,
    ]
    if result.best is not None:
        parts += [
            Text(f"best: --n-cpu-moe {result.best.n_cpu_moe}", style="bold green"),
            Text(shell_join(result.command)),
        ]
    return Group(*parts)


def render_run_profile(result: RunResult, model: str) -> RenderableType | None:
    """What `moetune run` did with tuned profiles: reused one, or saved one (and what next)."""
    if result.profile_name is None:
        return None
    how = "confirmed" if result.reused_profile else "saved"
    return Group(
        Text(f"tuned profile {result.profile_name} {how} ({result.profile_path})", style="green"),
        Text(f"daily use: moetune alias NAME {shell_join([model])}  (prints a shell function)",
             style="dim"),
    )  # fmt: skip
