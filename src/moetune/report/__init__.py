"""Rendering for humans (rich) and machines (JSON): one module per command.

This package's ``__init__`` is light (JSON only); the renderer modules import rich.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_VERSION = 1


def to_json(payload: dict[str, Any]) -> str:
    """``payload`` as indented JSON, with the schema version first."""
    return json.dumps({"schema_version": SCHEMA_VERSION, **payload}, indent=2)
