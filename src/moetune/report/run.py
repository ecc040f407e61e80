"""`moetune run`: the attempts, the best configuration, and what happened to its profile."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.search import Attempt
from moetune.records.results import ObjectiveRun, RunResult
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


_STATUS_STYLE = {"ok": "green", "over": "yellow", "oom": "red"}


def _n_cell(attempt: Attempt) -> str:
    """The N launched, or ``-ot`` for the -ot form launched beside it."""
    return "-ot" if attempt.override_tensor else str(attempt.n_cpu_moe)


def _form(attempt: Attempt) -> str:
    """``N=3``, or ``-ot`` (the -ot form launched beside N=3)."""
    return "-ot" if attempt.override_tensor else f"N={attempt.n_cpu_moe}"


def _one_device_table(result: RunResult) -> Table:
    table = new_table(
        f"attempts on {result.device} (memory: {result.probe})",
        _COLUMNS,
        right=tuple(c for c in _COLUMNS if c != "status"),
    )
    for a in result.attempts:
        table.add_row(
            _n_cell(a),
            format_bytes(a.predicted_bytes),
            format_bytes(a.measured_bytes),
            Text(a.status, style=_STATUS_STYLE.get(a.status, "")),
            fmt(a.ttft_s, ".2f"),
            fmt(a.prompt_tps, ".1f"),
            _decode_cell(a),
        )
    return table


def _device_cell(measured: int | None, predicted: int, budget: int) -> Text:
    """A device's measured peak (red over its budget), the prediction under it."""
    text = Text(format_bytes(measured), style="red" if measured and measured > budget else "")
    text.append(f"\n{format_bytes(predicted)}", style="dim")
    return text


def _devices_table(result: RunResult) -> Table:
    """Several devices: a column per device (measured, predicted under it)."""
    names = result.device_names
    columns = ("N", "-ts", *names, "status", "TTFT s", "decode tok/s")
    table = new_table(
        "attempts: each device measured (predicted)",
        columns,
        right=(*names, "TTFT s", "decode tok/s"),
    )
    for a in result.attempts:
        split = ",".join(f"{v:g}" for v in a.tensor_split)
        figures = zip(a.device_measured, a.device_predicted, result.device_budgets, strict=True)
        cells = [_device_cell(m, p, b) for m, p, b in figures]
        table.add_row(
            _n_cell(a),
            split,
            *cells,
            Text(a.status, style=_STATUS_STYLE.get(a.status, "")),
            fmt(a.ttft_s, ".2f"),
            _decode_cell(a),
        )
    return table


def _targets(result: RunResult) -> str:
    if result.device_names:
        pairs = zip(result.device_names, result.device_budgets, strict=True)
        return "targets " + ", ".join(f"{n} {format_bytes(b)}" for n, b in pairs)
    return f"target {format_bytes(result.target_bytes)}"


def render_run(result: RunResult) -> RenderableType:
    table = _devices_table(result) if result.device_names else _one_device_table(result)
    parts: list[RenderableType] = [
        Text(
            f"{_targets(result)}, ctx {result.settings.n_ctx}, "
            f"planned --n-cpu-moe {result.planned_n_cpu_moe}, "
            f"{plural(len(result.attempts), 'launch')}"
        ),
        table,
    ]
    if result.device_names:
        parts.append(Text(f"memory: {result.probe}", style="dim"))
    for a in result.attempts:
        if a.message:
            parts.append(Text(f"  {_form(a)}: {a.message}", style="dim"))
    if result.best is not None:
        best = result.best
        speed = format_speed(
            best.decode_tps, best.decode_tps_min, best.decode_tps_max, best.repeats
        )
        if result.objective is not None:
            parts += _objective_parts(result.objective)
        ub = "" if best.n_ubatch is None else f" -ub {best.n_ubatch}"
        prefill = "" if best.prompt_tps is None else f", prefill {best.prompt_tps:.1f} tok/s"
        placement = "the -ot form" if best.override_tensor else f"--n-cpu-moe {best.n_cpu_moe}"
        parts.append(Text(f"best: {placement}{ub}, decode {speed}{prefill}", style="bold green"))
        if (line := _forms_line(result, best)) is not None:
            parts.append(Text(line, style="dim"))
        if result.limiting_device:
            parts.append(
                Text(
                    f"the device that limited it: {result.limiting_device} (the least room left)",
                    style="dim",
                )
            )
        parts.append(shell_line(result.command))
        if best.noisy:
            parts.append(
                Text(
                    "the decode speeds spread over more than 20 % of their median: "
                    "the machine was busy, or measure longer with moetune bench",
                    style="yellow",
                )
            )
    return Group(*parts)


def _forms_line(result: RunResult, best: Attempt) -> str | None:
    """Which form won and what the other keeps: the -ot form launched beside the converged
    N, kept where its measured peaks were within the targets (else why not)."""
    tried = next((a for a in result.attempts if a.override_tensor), None)
    if tried is None or not result.override_gain_bytes:
        return None
    where = "the devices" if result.device_names else "the device"
    gain = format_bytes(result.override_gain_bytes)
    if best.override_tensor:
        return (
            f"the -ot form keeps {gain} more weights on {where} than --n-cpu-moe "
            f"{best.n_cpu_moe} (its command below; --n-cpu-moe {best.n_cpu_moe} fits too)"
        )
    if tried.status == "oom":
        why = "ran out of memory"
    else:
        budgets = result.device_budgets or [result.target_bytes]
        names = result.device_names or [result.device]
        over = [
            f"{format_bytes(m)} on {name} (target {format_bytes(b)})"
            for m, b, name in zip(tried.device_measured, budgets, names, strict=True)
            if m is not None and m > b
        ]
        why = "measured " + (", ".join(over) or "over the target")
    return (
        f"the -ot form would keep {gain} more weights on {where} than --n-cpu-moe "
        f"{best.n_cpu_moe}, but {why}: kept --n-cpu-moe {best.n_cpu_moe}"
    )


def _objective_parts(run: ObjectiveRun) -> list[RenderableType]:
    """run --objective: the converged placement and each extra launch, forecast beside
    measured, and why the winner won."""
    columns = ("N", "-ub", "forecast decode", "forecast prefill", "expected", "measured", "")
    table = new_table(
        f"--objective {run.goal}: extra launches (prefill of {run.n_prompt} tokens; "
        f"forecast {run.calibration})",
        columns,
        right=columns[:-1],
    )
    table.add_row(
        str(run.base_n_cpu_moe),
        str(run.base_n_ubatch),
        fmt(run.base_forecast_decode_tps, ".1f"),
        fmt(run.base_forecast_prefill_tps, ".1f"),
        "",  # its own measurement is what the others' forecasts are scaled by
        fmt(run.base_measured_score, ".4g"),
        Text("converged", style="dim"),
    )
    for i, launch in enumerate(run.launches):
        status = launch.attempt.status + (" winner" if i == run.winner else "")
        status += f" (-t {launch.n_threads})" if launch.n_threads else ""
        table.add_row(
            str(launch.n_cpu_moe),
            str(launch.n_ubatch),
            fmt(launch.forecast_decode_tps, ".1f"),
            fmt(launch.forecast_prefill_tps, ".1f"),
            fmt(launch.expected_score, ".4g"),
            fmt(launch.measured_score, ".4g"),
            Text(status, style=_STATUS_STYLE.get(launch.attempt.status, "")),
        )
    return [
        table,
        Text(
            f"score: {_SCORES.get(run.goal, 'requests/s')}; expected: the forecast scaled by "
            "the converged placement's measured/forecast",
            style="dim",
        ),
        Text(f"{plural(len(run.launches), 'extra launch')}; stopped: {run.stopped}", style="dim"),
        Text(run.why),
    ]


_SCORES = {
    "decode": "decode tok/s",
    "prefill": "prefill tok/s",
    "balanced": "the geometric mean of decode and prefill tok/s",
}


def render_run_profile(result: RunResult, model: str) -> RenderableType | None:
    """What `moetune run` did with tuned profiles: reused one, or saved one (and what next)."""
    if result.profile_name is None:
        return None
    how = "confirmed" if result.reused_profile else "saved"
    path = result.profile_path or ""
    folder, _, file = path.rpartition("/")
    where = f"in {folder}" if folder and file == f"{result.profile_name}.json" else path
    return Group(
        Text(f"tuned profile {result.profile_name} {how} ({where})", style="green"),
        Text("daily use (prints a shell function for your dotfiles):", style="dim"),
        shell_line(["moetune", "alias", "NAME", model], style="dim"),
    )
