"""Figures measured on a machine, kept for later commands: the RAM read bandwidth that
``moetune doctor`` measures, one entry per machine (its CPU model and RAM size), in one JSON
file (``store.paths.machine_file``). ``saved_ram_bandwidth`` reads it back (plan, calibrate).

A measurement replaces the entry of its machine under the file's lock and keeps the others
(a home shared between machines); a file that is not a valid one is replaced whole, since a
new measurement gives back all it held for this machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from moetune.errors import BadValueError
from moetune.store.files import parse_json, read_text, update_text
from moetune.store.paths import machine_file
from moetune.store.validate import describe_validation

SCHEMA_VERSION: Literal[1] = 1
RAM_MATCH = 0.02  # the same machine: the same CPU model and RAM within 2 % (kernel reserve)


class MachineIdentity(BaseModel):
    """What tells one machine from another for its figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_model: str
    ram_total_bytes: int = Field(gt=0)

    def matches(self, other: MachineIdentity) -> bool:
        return (
            self.cpu_model == other.cpu_model
            and abs(self.ram_total_bytes - other.ram_total_bytes)
            <= RAM_MATCH * self.ram_total_bytes
        )


class SavedRamBandwidth(BaseModel):
    """A machine's RAM read bandwidth as measured (a read-only streaming figure: ``threads``
    threads over a ``buffer_bytes`` buffer, the median of ``passes`` passes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    machine: MachineIdentity
    bytes_per_s: int = Field(gt=0)
    threads: int = Field(gt=0)
    buffer_bytes: int = Field(gt=0)
    passes: int = Field(gt=0)
    by_threads: dict[int, int] = {}
    measured_at: str  # UTC, ISO 8601


class MachineFile(BaseModel):
    """The file's contents."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    ram_read_bandwidth: list[SavedRamBandwidth] = []


def _parse(text: str, path: Path) -> MachineFile:
    """The file's contents; BadValueError naming the file when it is not one."""
    try:
        return MachineFile.model_validate(parse_json(text))
    except ValidationError as exc:
        raise BadValueError(f"{path}: {describe_validation(exc)}") from None
    except ValueError as exc:
        raise BadValueError(f"{path} is not JSON: {exc}") from None


def saved_ram_bandwidth(
    machine: MachineIdentity, path: Path | None = None
) -> SavedRamBandwidth | None:
    """The RAM read bandwidth saved for ``machine``; ``None`` when none is. BadValueError
    when the file cannot be read or is not one of moetune's."""
    path = machine_file() if path is None else path
    try:
        text = read_text(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise BadValueError(f"cannot read {path}: {why}") from None
    found = _parse(text, path).ram_read_bandwidth
    return next((entry for entry in found if entry.machine.matches(machine)), None)


def save_ram_bandwidth(entry: SavedRamBandwidth, path: Path | None = None) -> Path:
    """Keep ``entry`` in place of its machine's previous one (atomically, under the file's
    lock); the file's path. BadValueError when it cannot be written."""
    path = machine_file() if path is None else path

    def merge(old: str | None) -> str:
        try:
            held = _parse(old, path).ram_read_bandwidth if old is not None else []
        except BadValueError:
            held = []
        others = [e for e in held if not e.machine.matches(entry.machine)]
        document = MachineFile(ram_read_bandwidth=[*others, entry])
        return json.dumps(document.model_dump(mode="json"), indent=2) + "\n"

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror or exc}") from None
    update_text(path, merge)
    return path
