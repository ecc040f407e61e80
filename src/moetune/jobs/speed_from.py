"""The measured speeds a plan's forecast is calibrated on: those of ``plan --speed-from
FILE`` (read as `moetune calibrate` reads it), else those kept that were measured on this
machine, of every model (core/calibrate.py: the fitted factors are the machine's). A point of
another model is laid out with that model's facts, read from its file: where the file is not
readable here, the point is left out and a warning counts it. With no speed file kept,
nothing more is loaded (plan starts fast)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.core.calibrate import MIN_POINTS
from moetune.errors import BadValueError

if TYPE_CHECKING:
    from moetune.core.devices import DeviceSpec
    from moetune.core.speed import ForecastCalibration
    from moetune.records.speed import SpeedMachine, SpeedModel, SpeedPoint


def points_for(
    model: str,
    *,
    speed_from: Path | None,
    schema_version: int,
    warn: Callable[[str], None] = lambda text: None,
    store_dir: Path | None = None,
    devices: Sequence[DeviceSpec] | None = None,
) -> list[SpeedPoint]:
    """The points that calibrate ``model``'s forecast (a path, or a file name):
    ``speed_from``'s (any machine), of ``model`` and of the other models whose file is
    readable here (one error when there are none); else those kept (``store_dir``, default
    $MOETUNE_HOME/speed) that were measured on this machine (this CPU with ``devices``, found here;
    None: whatever its devices; records/speed.py ``same_machine``), of every model whose file
    is readable here."""
    from moetune.store.paths import speed_dir

    root = speed_dir() if store_dir is None else store_dir
    if speed_from is None and not (root.is_dir() and any(root.glob("*.json"))):
        return []
    from moetune.jobs.speed import machine_here, model_of

    here = model_of(model)
    if speed_from is None:
        return machine_points(machine_here(devices), here, warn, root)
    from moetune.jobs.calibrate import read_points

    _, points = read_points(speed_from, schema_version)
    found, left = usable_points(points, here)
    if found:
        _warn_left(left, str(speed_from), warn)
    else:
        models = ", ".join(sorted({p.model.file_name for p in points}))
        raise BadValueError(
            f"{speed_from} has no measurements of {here.file_name}, nor of a model whose file"
            f" is readable here (it has {models})",
            hint="pass a file measured with this model, or with a model file on this machine",
        )
    tests = [p for p in found if p.kind != "combined"]  # what a fit reads
    if len(tests) < MIN_POINTS:
        which = here.file_name
        if any(p.model.file_name != which for p in tests):
            which += " or of a model here"
        warn(
            f"{speed_from} has {len(tests)} prompt or generation measurement of {which}: "
            f"a calibration needs {MIN_POINTS}, the forecast is uncalibrated"
        )
    return found


def machine_points(
    machine: SpeedMachine,
    model: SpeedModel,
    warn: Callable[[str], None],
    store_dir: Path | None = None,
    *,
    leaving: str | None = None,
) -> list[SpeedPoint]:
    """The points kept that were measured on ``machine``, of ``model`` and of every other
    model whose file is readable here (``usable_points``); ``leaving``: without the files
    whose name starts with it (store/speed.py)."""
    from moetune.records.speed import same_machine
    from moetune.store.speed import SpeedStore

    kept = SpeedStore(store_dir).points(warn, leaving=leaving)
    found, left = usable_points([p for p in kept if same_machine(p.machine, machine)], model)
    _warn_left(left, "this machine", warn)
    return found


def usable_points(
    points: Sequence[SpeedPoint], model: SpeedModel
) -> tuple[list[SpeedPoint], dict[str, int]]:
    """``points`` of ``model``, and those of other models whose file is readable here (and
    still that model); and how many were left out, by model file name."""
    from moetune.jobs.speed import readable_here, same_model

    found: list[SpeedPoint] = []
    left: dict[str, int] = {}
    for point in points:
        if same_model(point.model, model) or readable_here(point.model):
            found.append(point)
        else:
            left[point.model.file_name] = left.get(point.model.file_name, 0) + 1
    return found, left


def _warn_left(left: dict[str, int], where: str, warn: Callable[[str], None]) -> None:
    if left:
        n, names = sum(left.values()), ", ".join(sorted(left))
        warn(
            f"{n} speed point{'s' if n > 1 else ''} of {where} left out of the calibration: "
            f"the model file is not readable here ({names})"
        )


def warn_disagreeing(
    calibration: ForecastCalibration,
    model: str,
    *,
    speed_from: Path | None,
    warn: Callable[[str], None],
    store_dir: Path | None = None,
) -> None:
    """Where a forecast's fit was not used (its points disagree beyond core/noise.py's bound:
    the forecast is uncalibrated), one warning: which points, and how to calibrate again
    (``calibrate --measure`` on a quiet machine, or remove the points: where they are)."""
    if calibration.refused_error is None:
        return
    from moetune.core.noise import loo_text

    if speed_from is not None:
        which, remedy = f"the points of {speed_from}", "pass measurements taken on a quiet machine"
    else:
        from moetune.store.paths import speed_dir

        where = speed_dir() if store_dir is None else store_dir
        which = "the points kept for this machine"
        remedy = (
            f"run `moetune calibrate --measure {model}` again on a quiet machine (other "
            f"programs closed), or remove the points in {where}"
        )
    warn(
        f"not calibrated: {which} disagree ({loo_text(calibration.refused_error)}): the "
        f"forecast is uncalibrated; {remedy}"
    )
