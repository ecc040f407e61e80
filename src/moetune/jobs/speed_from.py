"""The measured speeds a plan's forecast is calibrated on: those of ``plan --speed-from
FILE`` (read as `moetune calibrate` reads it), else those kept for the model measured on this
machine's CPU. With no speed file kept, nothing more is loaded (plan starts fast)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.core.calibrate import MIN_POINTS
from moetune.errors import BadValueError

if TYPE_CHECKING:
    from moetune.records.speed import SpeedPoint


def _same_model(point: SpeedPoint, file_name: str, header_sha256: str | None) -> bool:
    if header_sha256 is not None and point.model.header_sha256 is not None:
        return point.model.header_sha256 == header_sha256
    return point.model.file_name == file_name


def points_for(
    model: str,
    *,
    speed_from: Path | None,
    schema_version: int,
    warn: Callable[[str], None] = lambda text: None,
    store_dir: Path | None = None,
) -> list[SpeedPoint]:
    """The points of ``model`` (a path, or a file name): ``speed_from``'s (any machine; one
    error when it has none of this model), else those kept (``store_dir``, default
    $MOETUNE_HOME/speed) that were measured on this CPU."""
    from moetune.store.paths import speed_dir

    root = speed_dir() if store_dir is None else store_dir
    if speed_from is None and not (root.is_dir() and any(root.glob("*.json"))):
        return []
    from moetune.jobs.speed import model_of

    here = model_of(model)
    name, digest = here.file_name, here.header_sha256
    if speed_from is not None:
        from moetune.jobs.calibrate import read_points

        _, points = read_points(speed_from, schema_version)
        found = [p for p in points if _same_model(p, name, digest)]
        if not found:
            models = ", ".join(sorted({p.model.file_name for p in points}))
            raise BadValueError(
                f"{speed_from} has no measurements of {name} (it has {models})",
                hint="pass a file measured with this model",
            )
        tests = [p for p in found if p.kind != "combined"]  # what a fit reads
        if len(tests) < MIN_POINTS:
            warn(
                f"{speed_from} has {len(tests)} prompt or generation measurement of {name}: "
                f"a calibration needs {MIN_POINTS}, the forecast is uncalibrated"
            )
        return found
    return kept_points(name, digest, warn, root)


def kept_points(
    file_name: str,
    header_sha256: str | None,
    warn: Callable[[str], None],
    store_dir: Path | None = None,
) -> list[SpeedPoint]:
    """The points kept of the model (by header digest, else file name) measured on this CPU."""
    from moetune.hardware.host import cpu_model
    from moetune.store.speed import SpeedStore

    cpu = cpu_model()
    kept = SpeedStore(store_dir).points(warn)
    return [
        p for p in kept if _same_model(p, file_name, header_sha256) and p.machine.cpu_info == cpu
    ]
