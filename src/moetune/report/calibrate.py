"""Rendering of `moetune calibrate`: the points imported, per model and machine, and where
they are kept."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from moetune.records.speed import CalibrateResult, FitCheck, SpeedPlacement, SpeedPoint
from moetune.report.common import new_table, plural, short_path

_DEFAULT_LAYERS = (-1, None)


def describe_placement(placement: SpeedPlacement) -> str:
    """``ncmoe 20``, ``-ot 3 rules``, ``ngl 30``, ``ts 3/1``, ``fit``; ``-`` when none."""
    parts = []
    if placement.fit:
        parts.append("fit")
    if placement.n_cpu_moe:
        parts.append(f"ncmoe {placement.n_cpu_moe}")
    if placement.override_tensor:
        rules = placement.override_tensor
        parts.append(f"-ot {rules[0]}" if len(rules) == 1 else f"-ot {len(rules)} rules")
    if placement.n_gpu_layers not in _DEFAULT_LAYERS:
        parts.append(f"ngl {placement.n_gpu_layers}")
    if placement.tensor_split:
        parts.append("ts " + "/".join(f"{v:g}" for v in placement.tensor_split))
    if placement.no_op_offload:
        parts.append("no op offload")
    return ", ".join(parts) or "-"


def test_name(point: SpeedPoint) -> str:
    """llama-bench's name of the test: ``pp512``, ``tg128``, ``pp512+tg128``."""
    return {
        "prompt": f"pp{point.n_prompt}",
        "generation": f"tg{point.n_gen}",
        "combined": f"pp{point.n_prompt}+tg{point.n_gen}",
    }[point.kind]


def _tps(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _group(points: Sequence[SpeedPoint]) -> dict[tuple[str, str], list[SpeedPoint]]:
    groups: dict[tuple[str, str], list[SpeedPoint]] = {}
    for point in points:
        groups.setdefault((point.model.file_name, point.machine.label), []).append(point)
    return groups


def _table(points: Sequence[SpeedPoint]) -> RenderableType:
    table = new_table(
        None,
        ["placement", "ub", "t", "depth", "test", "tok/s"],
        right={"ub", "t", "depth", "tok/s"},
        fold={"placement"},
    )
    for p in points:
        table.add_row(
            describe_placement(p.placement),
            str(p.n_ubatch or "-"),
            str(p.n_threads or "-"),
            str(p.n_depth),
            test_name(p),
            _tps(p.tps),
        )
    return table


def render_calibrate(result: CalibrateResult) -> RenderableType:
    parts: list[RenderableType] = []
    for imported in result.files:
        state = "already kept in" if imported.already_saved else "kept in"
        lines = [
            short_path(imported.file, 76),
            f"  {imported.tool}: {plural(len(imported.points), 'point')}"
            + (f", {plural(imported.refused, 'row')} refused" if imported.refused else ""),
            f"  {state} {short_path(imported.saved_path, 66)}"
            if imported.saved_path is not None
            else "  not kept: the machine was too noisy",
        ]
        lines += [f"  refused: {text}" for text in imported.refusals]
        if imported.refused > len(imported.refusals):
            lines.append(f"  and {imported.refused - len(imported.refusals)} more refused")
        lines += [f"  measured again, its samples disagreeing: {t}" for t in imported.remeasured]
        lines += [f"  refused, its samples disagreeing twice: {t}" for t in imported.noisy]
        lines += [f"  kept, its samples disagreeing: {t}" for t in imported.disagreeing]
        parts.append(Text("\n".join(lines)))
        for (model, machine), points in _group(imported.points).items():
            parts += [Text(f"{model}\n  on {machine}", style="bold"), _table(points)]
    if result.fit is not None:
        parts.append(_fit_line(result.fit))
    parts.append(
        Text(f"{plural(result.total_points, 'speed point')} kept in {short_path(result.store, 60)}")
    )
    return Group(*parts)


def _fit_line(fit: FitCheck) -> Text:
    """``fit of 10 points on this machine (4 kept before): leave-one-out error 8.1 % (max 14
    %), within the 25 % bound``."""
    kept = f" ({fit.kept_points} kept before)" if fit.kept_points else ""
    head = f"fit of {plural(fit.points, 'point')} on this machine{kept}: "
    if fit.median_error is None or fit.max_error is None:
        return Text(head + "too few to leave one out")
    error = f"leave-one-out error {fit.median_error:.1%} (max {fit.max_error:.0%})"
    if fit.within:
        return Text(f"{head}{error}, within the {fit.bound:.0%} bound".replace("%", " %"))
    return Text(
        f"{head}{error}, beyond the {fit.bound:.0%} bound: the machine was too noisy".replace(
            "%", " %"
        ),
        style="yellow",
    )
