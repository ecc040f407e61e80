"""The base of the records' frozen models: no field changes after validation, and a field
the model does not declare is refused (a saved file with one is not this record)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
