"""`moetune run`: the attempts, the best configuration, and what happened to its profile."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from moetune.core.search import Attempt
from moetune.jobs.results import RunResult
from moetune.report.common import fmt, new_table, plural, shell_line
from moetune.units import format_bytes, format_speed

_COLUMNS = ("N", "predicted", "measured", "status", "TTFT s", "prompt tok/s", "decode tok/s")


def _decode_cell(attempt: Attempt) -> Text:
    """The median of the timed requests, their range under it, ``noisy`` when wide."""
    text = Text(fmt(attempt.decode_tps, ".1f"))
    if attempt.decode_tps_min is not None and attempt.decode_tps_max is not None:
        text.append(f"\n{attempt.decode_tps_min:.1f}-{attempt.decode_tps_max:.1f}", style="dim")
    if attempt.noisy:
        text.append("\nnoisy", style="yellow")
    return text


def render_run(result: RunResult) -> RenderableType:
    table = new_table(f"attempts on {result.device} (memory: {result.probe})", _COLUMNS,
                      right=tuple(c for c in _COLUMNS if c != "status"))  # fmt: skip
    for a in result.attempts:
        style = {"ok": "green", "over": "yellow", "oom": "red"}.get(a.status, "")
        table.add_row(
            str(a.n_cpu_moe), format_bytes(a.predicted_bytes), format_bytes(a.measured_bytes),
            Text(a.status, style=style), fmt(a.ttft_s, ".2f"), fmt(a.prompt_tps, ".1f"),
            _decode_cell(a),
        )  # fmt: skip
    parts: list[RenderableType] = [
        Text(
            f"target {format_bytes(result.target_bytes)}, ctx {result.settings.n_ctx}, "
            f"planned --n-cpu-moe {result.planned_n_cpu_moe}, "
            f"{plural(len(result.attempts), 'launch')}"
        ),
        table,
    ]
    for a in result.attempts:
        if a.message:
            parts.append(Text(f"  N={a.n_cpu_moe}: {a.message}", style="dim"))
    if result.best is not None:
        best = result.best
        speed = format_speed(best.decode_tps, best.decode_tps_min, best.decode_tps_max,
                             best.repeats)  # fmt: skip
        parts += [
            Text(f"best: --n-cpu-moe {best.n_cpu_moe}, decode {speed}", style="bold green"),
            shell_line(result.command),
        ]
        if best.noisy:
            parts.append(Text("the decode speeds spread over more than 20 % of their median: "
                              "the machine was busy, or measure longer with moetune bench",
                              style="yellow"))  # fmt: skip
    return Group(*parts)


def render_run_profile(result: RunResult, model: str) -> RenderableType | None:
    """What `moetune run` did with tuned profiles: reused one, or saved one (and what next)."""
    if result.profile_name is None:
        return None
    how = "confirmed" if result.reused_profile else "saved"
    return Group(
        Text(f"tuned profile {result.profile_name} {how} ({result.profile_path})", style="green"),
        Text("daily use (prints a shell function for your dotfiles):", style="dim"),
        shell_line(["moetune", "alias", "NAME", model], style="dim"),
    )  # fmt: skip
