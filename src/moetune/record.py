"""moetune's records (dataclasses declared with ``record``) and their one JSON form.

The values of the core, the probes and the jobs are frozen or plain dataclasses (most of them
keyword-only): building one costs a function call, and importing them costs nothing beyond
the standard library, where a schema library's models cost a large part of a short command's
start. ``record`` declares one: a dataclass whose ``__repr__``, ``__eq__`` and ``__hash__``
are shared functions rather than ones generated and compiled for each class at import (about
7 % of a plan's start), the same values as a dataclass's own. What a model library gave them
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

import builtins
import dataclasses
import math
import sys
from collections.abc import Callable, Mapping, MutableMapping
from enum import Enum
from operator import attrgetter
from pathlib import PurePath
from types import MappingProxyType, UnionType
from typing import TYPE_CHECKING, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from moetune.errors import BadValueError

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorator: decorator


C = TypeVar("C", bound=type)

_JSON = "json"
_HIDDEN = "hidden"
_OMIT_EMPTY = "omit-empty"
# a field's ``metadata``: left out of the JSON; left out while empty (0, None, [])
HIDDEN: Mapping[str, str] = MappingProxyType({_JSON: _HIDDEN})
OMIT_EMPTY: Mapping[str, str] = MappingProxyType({_JSON: _OMIT_EMPTY})


# The number an annotation declares: "float" (an int is written as a float), "int" (a whole
# float is written as an int), or None (written as it is).
Number = str | None
_MAPPINGS = frozenset({dict, Mapping, MutableMapping})
_UNIONS = frozenset({Union, UnionType})


def _number(annotation: Any) -> Number:
    """What ``float | None``, ``list[float]``, ``dict[str, float | None]``, ``tuple[int, ...]``
    declare of their numbers (the values of a mapping, the items of a sequence); a union of
    anything but one number and None declares none (``list[float] | None`` included)."""
    inner, origin, args = annotation, get_origin(annotation), get_args(annotation)
    if origin is not None and origin not in _UNIONS and args:
        inner = args[-1] if origin in _MAPPINGS else args[0]
    atoms = get_args(inner) if get_origin(inner) in _UNIONS else (inner,)
    kept = [atom for atom in atoms if atom is not type(None) and atom is not Ellipsis]
    if kept == [float]:
        return "float"
    if kept == [int]:
        return "int"
    return None


class _TypeCheckingOnly:
    """What a name imported for the type checker alone (under ``TYPE_CHECKING``) reads as."""


class _ModuleNames(dict[str, Any]):
    """The names an annotation of ``module`` may use: a name the module does not hold at run
    time (nor builtins) is ``_TypeCheckingOnly``, which declares no number."""

    def __init__(self, module: str) -> None:
        super().__init__()
        self.known = vars(sys.modules[module])

    def __missing__(self, name: str) -> Any:
        if name in self.known or hasattr(builtins, name):
            raise KeyError(name)
        return _TypeCheckingOnly


def _hints(cls: type) -> dict[str, Any]:
    """The class's annotations as types (``typing.get_type_hints``)."""
    try:
        return get_type_hints(cls)
    except NameError:  # a name imported under TYPE_CHECKING
        return get_type_hints(cls, localns=_ModuleNames(cls.__module__))


# per class: (name, how it is written, number) of each field
_Layout = tuple[tuple[str, str | None, Number], ...]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    found = _LAYOUTS.get(cls)
    if found is None:
        hints = _hints(cls)
        found = tuple(
            (f.name, f.metadata.get(_JSON), _number(hints[f.name])) for f in dataclasses.fields(cls)
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


# --- declaring a record -------------------------------------------------------------------------


@dataclass_transform(field_specifiers=(dataclasses.field,))
def record(*, frozen: bool = False, kw_only: bool = False, eq: bool = True) -> Callable[[C], C]:
    """``dataclasses.dataclass(frozen=, kw_only=, eq=)``, with the shared ``__repr__``,
    ``__eq__`` and (frozen) ``__hash__`` below, unless the class defines its own: what the
    dataclass would generate, compared and hashed over the same fields, shown the same way."""

    def declare(cls: C) -> C:
        shared: dict[str, Any] = {"__repr__": _repr}
        if eq:
            shared |= {"__eq__": _eq, "__hash__": _hash if frozen else None}
        # the class's own (an __eq__ of its own comes with its __hash__, None or its own)
        shared = {name: f for name, f in shared.items() if name not in cls.__dict__}
        dataclasses.dataclass(repr=False, eq=False, frozen=frozen, kw_only=kw_only)(cls)
        for name, method in shared.items():
            setattr(cls, name, method)
        return cls

    return declare


_Key = Callable[[Any], tuple[Any, ...]]
_KEYS: dict[type, tuple[_Key, _Key]] = {}  # per class: its compared fields, its hashed ones


def _getter(names: tuple[str, ...]) -> _Key:
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda value: (one(value),)
    return attrgetter(*names) if names else (lambda value: ())


def _keys(cls: type) -> tuple[_Key, _Key]:
    found = _KEYS.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        compared = tuple(f.name for f in fields if f.compare)
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        found = _KEYS[cls] = (_getter(compared), _getter(hashed))
    return found


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = _keys(self.__class__)[0]
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(_keys(self.__class__)[1](self))


def _repr(self: Any) -> str:
    shown = ", ".join(
        f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr
    )
    return f"{type(self).__qualname__}({shown})"
