"""``plan A B --together``'s text: each model's placement and command, what it holds on each
device and its forecast beside its best alone, and the shared sums against the budgets."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from moetune.report.common import forecast_label, shell_line
from moetune.units import format_bytes

if TYPE_CHECKING:
    from moetune.core.together import TogetherModel, TogetherPlan
    from moetune.jobs.together import TogetherRun


def _speed(model: TogetherModel, goal: str) -> str:
    if model.score is None:
        return "no forecast (a figure is missing)"
    unit = " tok/s" if goal in ("decode", "prefill", "balanced") else " requests/s"
    alone = f" (alone: {model.alone_score:.1f}{unit})" if model.alone_score is not None else ""
    return f"{model.score:.1f}{unit}{alone}"


def together_text(plan: TogetherPlan) -> Group:
    """The plan: a head, a block per model (its command a ShellLine: whole, with its
    variables), the per-device sums."""
    n = len(plan.models)
    how = "together" if plan.together else "one at a time"
    lines = [
        f"{n} models planned {how}, split by {plan.goal} (weighted), --models-max {plan.models_max}"
    ]
    forecasts = [m.plan.forecast for m in plan.models if m.plan.forecast is not None]
    if forecasts:  # what the speeds rest on: one machine's calibration, every model's figures
        every = replace(forecasts[0], figures=[s for f in forecasts for s in f.figures])
        lines.append(f"speed forecasts: {forecast_label(every)}")
    parts: list[RenderableType] = []
    for model in plan.models:
        first = model.plan.first
        peaks = ", ".join(
            f"{name} {format_bytes(b)}"
            for name, b in zip(plan.device_names, model.device_bytes, strict=True)
        )
        lines += [
            "",
            f"{model.name} (weight {model.weight:g}, planned within {model.share}/16 of each "
            "budget)",
            f"  peak: {peaks}; host {format_bytes(model.host_bytes)}",
            f"  {plan.goal}: {_speed(model, plan.goal)}",
        ]
        parts += [Text("\n".join(lines)), shell_line(first.command, env=first.env)]
        lines = []
    sums = ", ".join(
        f"{name} {format_bytes(s)} of {format_bytes(b)}"
        for name, s, b in zip(plan.device_names, plan.device_sums, plan.device_budgets, strict=True)
    )
    what = "together" if plan.together else "the largest of them"
    lines += ["", f"devices ({what}): {sums}; host {format_bytes(plan.host_bytes)}"]
    if plan.reason:
        lines.append(f"one at a time: {plan.reason}")
    return Group(*parts, Text("\n".join(lines)))


def _mib(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


def together_run_text(run: TogetherRun) -> Group:
    """``run A B --together``: a head, a block per model (its N, its own measured use of each
    device, its speed with all loaded, its profile), and each device's sum against its
    budget."""
    n = len(run.models)
    how = (
        f"converged in {len(run.launches)} launch(es)"
        if run.converged
        else f"did not converge in {len(run.launches)} launch(es)"
    )
    lines = [f"{n} models run together (set {run.set_id}): {how}"]
    parts: list[RenderableType] = []
    for model in run.models:
        used = ", ".join(
            f"{name} {_mib(b)}"
            for name, b in zip(run.device_names, model.device_measured, strict=True)
        )
        speed = f"decode {model.decode_tps:.1f} tok/s" if model.decode_tps is not None else ""
        lines += [
            "",
            f"{model.name} (weight {model.weight:g}): --n-cpu-moe {model.n_cpu_moe} "
            f"(planned {model.planned_n_cpu_moe})",
            f"  measured with all loaded: {used}" + (f"; {speed}" if speed else ""),
        ]
        if model.command:
            parts += [Text("\n".join(lines)), shell_line(model.command)]
            lines = []
        if model.profile_name:
            lines.append(f"  saved as tuned profile {model.profile_name}")
    if run.device_measured:
        sums = ", ".join(
            f"{name} {_mib(s)} of {format_bytes(b)}"
            for name, s, b in zip(
                run.device_names, run.device_measured, run.device_budgets, strict=True
            )
        )
        lines += ["", f"devices (all loaded, measured): {sums}"]
    lines += [f"note: {note}" for note in run.notes]
    return Group(*parts, Text("\n".join(lines)))
