"""Saved bench results: JSON files under ``$MOETUNE_HOME/bench`` (or the user data dir)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from moetune.errors import BadValueError, ModelFileError, denied
from moetune.records.results import RESULT_KIND, BenchResult
from moetune.store.files import parse_json, read_text, save_text
from moetune.store.paths import bench_dir


def default_result_path(result: BenchResult) -> Path:
    """``<bench dir>/<UTC time>-<model or "server">.json``."""
    stem = Path(result.model).stem if result.model else "server"
    stamp = re.sub(r"[^0-9T]", "", result.created.split("+")[0])
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] or "model"
    return bench_dir() / f"{stamp}-{slug}.json"


def write_result(path: Path, text: str) -> Path:
    """Write ``text`` (the JSON report) to ``path`` atomically, creating folders; the path."""
    return save_text(path, text + "\n")


def load_result(path: Path, schema_version: int) -> BenchResult:
    """A saved bench result; ModelFileError when unreadable, BadValueError when not one."""
    try:
        data: Any = parse_json(read_text(path))
    except PermissionError as exc:
        raise denied(path, exc, doing="cannot read") from exc
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:  # JSON, UTF-8
        raise BadValueError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("kind") != RESULT_KIND:
        raise BadValueError(
            f"{path} is not a moetune bench result", hint="pass a file written by `moetune bench`"
        )
    version = data.pop("schema_version", None)
    if version != schema_version:
        raise BadValueError(
            f"{path} has schema version {version}; this moetune reads {schema_version}"
        )
    try:
        result = BenchResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BadValueError(f"{path} is not a valid bench result: {where}: {first['msg']}") from exc
    names = {config.name for config in result.configs}
    unknown = sorted({row.config for row in result.results} - names)
    if unknown:
        raise BadValueError(
            f"{path} is not a valid bench result: results of {', '.join(unknown)}, "
            "which is not among its configs"
        )
    return result
