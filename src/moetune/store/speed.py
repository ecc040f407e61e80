"""Speed points: JSON files under ``$MOETUNE_HOME/speed`` (store/paths.speed_dir), one per
source (an imported llama-bench file, a bench, one run launch).

A file is named by a digest of its points (the file they were read from aside), so the same
measurements saved again, from the same file or a copy of it, land on the same file: nothing
is counted twice. A file that does not load, or holds a point past records/speed.py's bounds
(the ones every import is checked against), is named in a warning with the field and skipped,
never fatal.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from moetune.errors import BadValueError
from moetune.records.speed import SPEED_KIND, SpeedBatch, SpeedPoint
from moetune.store.files import parse_json, read_text, save_text
from moetune.store.paths import speed_dir
from moetune.store.validate import describe_validation

_DIGEST_CHARS = 16


def point_digest(points: Sequence[SpeedPoint]) -> str:
    """SHA-256 of the points as data, without the file they were read from."""
    data = [
        p.model_dump(
            mode="json",
            # one stream: as before the field was (the same points, the same file)
            exclude={"source": {"file"}, **({"n_streams": True} if p.n_streams == 1 else {})},
        )
        for p in points
    ]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:60] or "points"


class SpeedStore:
    """Speed points as JSON files in one folder."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = speed_dir() if root is None else root

    def _files(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("*.json") if not p.name.startswith("."))

    def save(
        self, points: Sequence[SpeedPoint], stem: str, *, replacing: str | None = None
    ) -> tuple[Path, bool]:
        """Keep ``points`` in ``<stem>-<digest>.json``, written atomically; the path, and
        whether the store had them already (then nothing is written). With ``replacing``,
        the other files whose name starts with it go (a measure made again replaces the
        last one's points). BadValueError when the file cannot be written."""
        if not points:
            raise ValueError("no points to save")
        tag = point_digest(points)[:_DIGEST_CHARS]
        # a file of that name that does not load (hand-edited, an older version) is written
        # again: the points are not kept until a file holds them
        same = [
            p
            for p in self._files()
            if p.stem.endswith(f"-{tag}") and not isinstance(_load(p), BadValueError)
        ]
        if same:
            path, known = same[0], True
        else:
            batch = SpeedBatch(
                saved=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                points=list(points),
            )
            path = save_text(
                self.root / f"{_slug(stem)}-{tag}.json", batch.model_dump_json(indent=2) + "\n"
            )
            known = False
        if replacing is not None:
            prefix = _slug(replacing)
            for old in self._files():
                if old.name.startswith(prefix) and old != path:
                    old.unlink(missing_ok=True)
        return path, known

    def scan(self) -> list[tuple[Path, SpeedBatch | BadValueError]]:
        """Every file, loaded or as the error that says why not."""
        return [(path, _load(path)) for path in self._files()]

    def points(
        self, warn: Callable[[str], None], *, leaving: str | None = None
    ) -> list[SpeedPoint]:
        """Every point kept, each once (a point in two files counts once); ``warn`` names each
        file that does not load. ``leaving``: without the files whose name starts with it
        (those ``save(replacing=...)`` would replace)."""
        found: dict[str, SpeedPoint] = {}
        prefix = None if leaving is None else _slug(leaving)
        for path, entry in self.scan():
            if prefix is not None and path.name.startswith(prefix):
                continue
            if isinstance(entry, BadValueError):
                warn(f"skipping a broken speed file: {entry.message}")
                continue
            for point in entry.points:
                found.setdefault(point_digest([point]), point)
        return list(found.values())


def _load(path: Path) -> SpeedBatch | BadValueError:
    try:
        data = parse_json(read_text(path))
    except OSError as exc:
        return BadValueError(f"{path}: cannot read: {exc.strerror or exc}")
    except ValueError as exc:  # JSON, UTF-8
        return BadValueError(f"{path}: not valid JSON: {exc}")
    if not isinstance(data, dict) or data.get("kind") != SPEED_KIND:
        return BadValueError(f"{path}: not a moetune speed file")
    try:
        return SpeedBatch.model_validate(data)
    except ValidationError as exc:
        return BadValueError(f"{path}: {describe_validation(exc)}")
