"""Reading a profile or result file into a pydantic model, with one clear message on failure."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from moetune.errors import ProfileError


def _one_problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown field '{field}'"
    if error["type"] == "missing":
        return f"missing field '{field}'"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"field '{field}': {message} (got {error.get('input')!r})"


def describe_validation(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error as one line naming each field (the first ``limit`` problems)."""
    errors = exc.errors()
    text = "; ".join(_one_problem(error) for error in errors[:limit])
    more = len(errors) - limit
    return text + (f"; and {more} more problem{'s' if more > 1 else ''}" if more > 0 else "")


def validated(model: type[Any], data: object, source: str, hint: str) -> Any:
    """``model.model_validate(data)``, or a ProfileError naming the file and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{source}: {describe_validation(exc)}", hint=hint) from None
