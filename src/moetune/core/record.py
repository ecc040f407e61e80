"""The core's records (plain dataclasses) and their one JSON form.

The core's values are frozen or plain ``dataclasses`` (keyword-only): building one costs a
function call, and importing them costs nothing beyond the standard library, where a schema
library's models cost a large part of a short command's start. What a model library gave them
is here, once:
- ``field(metadata=HIDDEN)``: a field left out of the JSON (carried beside the figures, not
  one of them);
- ``field(metadata=OMIT_EMPTY)``: a field left out of the JSON while it is empty (0, None, []);
- a class's ``JSON_PROPERTIES``: properties written after its fields (derived figures);
- ``jsonable(value)``: the JSON-ready form of a record (and of anything holding records, a
  pydantic model included), with each number as its field declares it (an int in a float
  field is written as a float), enums as their values, tuples as lists, non-finite floats as
  null.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from moetune.errors import BadValueError

_JSON = "json"
_HIDDEN = "hidden"
_OMIT_EMPTY = "omit-empty"
# a field's ``metadata``: left out of the JSON; left out while empty (0, None, [])
HIDDEN: Mapping[str, str] = MappingProxyType({_JSON: _HIDDEN})
OMIT_EMPTY: Mapping[str, str] = MappingProxyType({_JSON: _OMIT_EMPTY})


# The number an annotation declares: "float" (an int is written as a float), "int" (a whole
# float is written as an int), or None (written as it is).
Number = str | None


def _number(annotation: str) -> Number:
    """What ``float | None``, ``list[float]``, ``dict[str, float | None]``, ``tuple[int, ...]``
    declare of their numbers (the values of a mapping, the items of a sequence)."""
    inner = annotation
    if "[" in inner and inner.endswith("]"):
        head, _, rest = inner.partition("[")
        rest = rest[:-1]
        if head.strip() in ("dict", "Mapping"):
            inner = rest.split(",", 1)[1] if "," in rest else rest
        else:
            inner = rest.split(",", 1)[0]
    atoms = {a.strip() for a in inner.split("|")} - {"None", "..."}
    if atoms == {"float"}:
        return "float"
    if atoms == {"int"}:
        return "int"
    return None


# per class: (name, how it is written, number) of each field
_Layout = tuple[tuple[str, str | None, Number], ...]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    found = _LAYOUTS.get(cls)
    if found is None:
        found = tuple(
            (
                f.name,
                f.metadata.get(_JSON),
                _number(f.type) if isinstance(f.type, str) else None,
            )
            for f in dataclasses.fields(cls)
        )
        _LAYOUTS[cls] = found
    return found


def _as_number(value: Any, number: Number) -> Any:
    if number == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if number == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _convert(value: Any, number: Number = None) -> Any:
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return _as_number(value, number)
    if isinstance(value, float):
        value = _as_number(value, number)
        return value if not isinstance(value, float) or math.isfinite(value) else None
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(value)
    if isinstance(value, Mapping):
        return {
            (k.value if isinstance(k, Enum) else k): _convert(v, number) for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_convert(v, number) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    dump: Callable[..., Any] | None = getattr(value, "model_dump", None)
    if dump is not None:  # a pydantic model holding records
        return dump(mode="json")
    return value


def jsonable(value: Any, *, exclude: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    """The JSON-ready form of a record: its fields in order (``exclude``d, hidden and empty
    omitted ones left out), then its ``JSON_PROPERTIES``; of a pydantic model: its dump."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        dump: Callable[..., dict[str, Any]] | None = getattr(value, "model_dump", None)
        if dump is None:
            raise TypeError(f"not a record: {type(value).__name__}")
        return dump(mode="json", exclude=set(exclude) or None)
    out: dict[str, Any] = {}
    for name, how, number in _layout(type(value)):
        if how == _HIDDEN or name in exclude:
            continue
        item = getattr(value, name)
        if how == _OMIT_EMPTY and not item:
            continue
        out[name] = _convert(item, number)
    for name in getattr(value, "JSON_PROPERTIES", ()):
        if name not in exclude:
            out[name] = _convert(getattr(value, name))
    return out


def require(record: object, name: str, ok: bool, what: str) -> None:
    """A field's bound (what a schema's ``gt``/``ge``/``le`` said): BadValueError if not ``ok``."""
    if not ok:
        value = getattr(record, name)
        raise BadValueError(f"{type(record).__name__}.{name} must be {what}, not {value!r}")
