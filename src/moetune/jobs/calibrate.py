"""`moetune calibrate FILE...`: read measured speeds (llama-bench's ``-o json``/``-o jsonl``,
moetune's own bench results) and keep them as speed points. Returns data;
report/calibrate.py renders it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from moetune.errors import BadValueError, ModelFileError
from moetune.jobs.speed import bench_points, model_of
from moetune.llamacpp.bench_results import parse_bench_text
from moetune.records.results import RESULT_KIND
from moetune.records.speed import CalibrateResult, ImportedFile, SpeedPoint, Tool
from moetune.store.bench import load_result
from moetune.store.files import parse_json, read_text
from moetune.store.speed import SpeedStore


def read_text_file(path: Path) -> str:
    """A file's UTF-8 text; one clear error when it cannot be read."""
    try:
        return read_text(path)
    except FileNotFoundError:
        raise ModelFileError(f"cannot read {path}: no such file") from None
    except UnicodeDecodeError:
        raise BadValueError(f"{path} is not UTF-8 text", hint=_HINT) from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None


_HINT = "pass llama-bench -o json or -o jsonl, or a `moetune bench` result"


def _is_bench_result(text: str) -> bool:
    try:
        data = parse_json(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("kind") == RESULT_KIND


def _with_identity(points: list[SpeedPoint]) -> list[SpeedPoint]:
    """llama-bench's points with moetune's identity of each model file found here."""
    models = {p.model.path: model_of(p.model.path) for p in points if p.model.path}
    found = []
    for point in points:
        here = models.get(point.model.path) if point.model.path else None
        if here is None or here.header_sha256 is None:
            found.append(point)
            continue
        update = {"file_bytes": here.file_bytes, "header_sha256": here.header_sha256}
        found.append(point.model_copy(update={"model": point.model.model_copy(update=update)}))
    return found


def read_points(path: Path, schema_version: int) -> tuple[Tool, list[SpeedPoint]]:
    """The points of one file: which tool wrote it, and its measurements."""
    text = read_text_file(path)
    if _is_bench_result(text):
        points = bench_points(load_result(path, schema_version), str(path))
        if not points:
            raise BadValueError(
                f"{path} has no measurements of a placement moetune launched",
                hint="a bench of --server-url or one that measured nothing has none",
            )
        return "moetune bench", points
    return "llama-bench", _with_identity(parse_bench_text(text, str(path)))


def import_files(
    paths: Sequence[Path],
    *,
    schema_version: int,
    store: SpeedStore | None = None,
    warn: Callable[[str], None] = lambda text: None,
) -> CalibrateResult:
    """Read every file first (one bad file: its error, nothing kept), then keep each one's
    points; the same points imported again are not kept twice."""
    store = store or SpeedStore()
    read = [(path, *read_points(path, schema_version)) for path in paths]
    files = []
    for path, tool, points in read:
        saved, known = store.save(points, f"{tool.split()[-1]}-{path.stem}")
        files.append(
            ImportedFile(
                file=str(path), tool=tool, points=points, saved_path=str(saved), already_saved=known
            )
        )
    return CalibrateResult(files=files, store=str(store.root), total_points=len(store.points(warn)))
