"""How a command's option values become Python values, without typer's per-parameter
pydantic adapters where the value is plain.

Recent typers coerce every parameter through a pydantic ``TypeAdapter`` built when the
command parses (and import pydantic's adapter machinery for it): a large part of a
command's start. The values moetune's options take are nearly all plain (our parsers, a
string, a flag, digits), and those are coerced here exactly as typer would; anything else
goes to typer's own coercion, so its results and its error messages stay typer's.
``plain_value`` is also what the fast path (cli/fast.py) makes of an option's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

NOT_PLAIN = object()
_WHOLE = re.compile(r"[0-9]+")


def plain_value(
    value: Any,
    annotation: Any,
    parse: Callable[[Any], Any] | None,
    bounds: tuple[int | None, int | None] = (None, None),
    *,
    refused: tuple[type[Exception], ...] = (),
) -> Any:
    """``value`` as typer would coerce it, where that is plain: a value the option's parser
    takes, a string, a bool, a whole number within its bounds; else ``NOT_PLAIN`` (a value
    the parser refuses with one of ``refused``, or typer's own ValueError or AssertionError,
    which typer words itself)."""
    if parse is not None:
        caught: tuple[type[Exception], ...] = (ValueError, AssertionError, *refused)
        try:
            return parse(value)
        except caught:
            return NOT_PLAIN
    if annotation is str and isinstance(value, str):
        return value
    if annotation is bool and isinstance(value, bool):
        return value
    if annotation is int:
        if isinstance(value, str) and _WHOLE.fullmatch(value):
            value = int(value)
        if type(value) is not int:
            return NOT_PLAIN
        low, high = bounds
        if (low is not None and value < low) or (high is not None and value > high):
            return NOT_PLAIN  # typer's own message
        return value
    return NOT_PLAIN


def _plain_value(info: Any, annotation: Any, value: Any) -> Any:
    if info.parser is None and annotation is int and getattr(info, "clamp", False):
        return NOT_PLAIN
    bounds = (getattr(info, "min", None), getattr(info, "max", None))
    return plain_value(value, annotation, info.parser, bounds)


class _PlainCoercion:
    """Coerces a parameter's plain values without typer's pydantic adapters (recent typers
    build one per parameter, and import pydantic for it: a large part of a command's start);
    any other value goes to typer's own coercion, built then, so its result and messages
    are typer's."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        descriptor = param.type_descriptor
        multiple = param.multiple or param.nargs == -1
        if value is None and not multiple:
            return None
        if not multiple:
            plain = _plain_value(descriptor.parameter_info, descriptor.annotation, value)
            if plain is not NOT_PLAIN:
                return plain
        param._runtime_param = None  # typer's own, from here on
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


_PLAIN = _PlainCoercion()


def plain_coercion(params: list[Any]) -> list[Any]:
    """``params``, given the plain coercion where this typer coerces lazily through their
    ``_runtime_param`` (older typers coerce through click types: nothing to do)."""
    for param in params:
        if getattr(param, "_runtime_param", _PLAIN) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = _PLAIN
    return params
