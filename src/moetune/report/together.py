"""``plan A B --together``'s text: each model's placement and command, what it holds on each
device and its forecast beside its best alone, and the shared sums against the budgets."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rich.text import Text

from moetune.units import format_bytes

if TYPE_CHECKING:
    from moetune.core.together import TogetherModel, TogetherPlan


def _speed(model: TogetherModel, goal: str) -> str:
    if model.score is None:
        return "no forecast (a figure is missing)"
    unit = " tok/s" if goal in ("decode", "prefill", "balanced") else " requests/s"
    alone = f" (alone: {model.alone_score:.1f}{unit})" if model.alone_score is not None else ""
    return f"{model.score:.1f}{unit}{alone}"


def together_text(plan: TogetherPlan) -> Text:
    """The plan as lines: a head, a block per model, the per-device sums."""
    n = len(plan.models)
    how = "together" if plan.together else "one at a time"
    lines = [
        f"{n} models planned {how}, split by {plan.goal} (weighted), --models-max {plan.models_max}"
    ]
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
            f"  {shlex.join(first.command)}",
        ]
    sums = ", ".join(
        f"{name} {format_bytes(s)} of {format_bytes(b)}"
        for name, s, b in zip(plan.device_names, plan.device_sums, plan.device_budgets, strict=True)
    )
    what = "together" if plan.together else "the largest of them"
    lines += ["", f"devices ({what}): {sums}; host {format_bytes(plan.host_bytes)}"]
    if plan.reason:
        lines.append(f"one at a time: {plan.reason}")
    return Text("\n".join(lines))
