"""Reading architecture hyperparameters (``{arch}.*`` metadata) as llama.cpp's loader does.

``hparams`` is the architecture's own keys with the ``{arch}.`` prefix removed. A key may hold
a scalar or, for per-layer values (head counts, SWA flags), an array with one entry per block
(src/llama-model-loader.cpp ``get_key_or_arr``).
"""

from __future__ import annotations

import math

from moetune.errors import GGUFFormatError

Scalar = int | float | bool | str
HParam = Scalar | list[Scalar]
HParams = dict[str, HParam]


def as_int(value: object) -> int:
    """An integer array entry (bools count as 0/1); GGUFFormatError for anything else."""
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise GGUFFormatError(f"expected an integer, got {value!r}")


def scalar(hp: HParams, key: str, default: int) -> int:
    """A scalar integer hparam (``default`` when missing or not an integer)."""
    value = hp.get(key, default)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default


def largest(hp: HParams, key: str, default: int) -> int:
    """A model-wide integer: a scalar, or the largest entry of a per-layer array."""
    value = hp.get(key, default)
    if isinstance(value, list):
        value = max((v for v in value if isinstance(v, int)), default=default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return int(value)


def per_layer(hp: HParams, key: str, n: int, default: int) -> list[int]:
    """``get_key_or_arr``: a scalar fills all ``n`` layers; an array must have exactly ``n``
    entries ("key ... has wrong array length" otherwise)."""
    value = hp.get(key, default)
    if not isinstance(value, list):
        return [scalar(hp, key, default)] * n
    if len(value) != n:
        raise GGUFFormatError(f"{key} has {len(value)} entries, expected one per block ({n})")
    return [as_int(v) for v in value[:n]]


def first(hp: HParams, key: str) -> int:
    """Layer 0's value of a scalar-or-array hparam (``n_head()`` is ``n_head(0)``), 0 if absent."""
    value = hp.get(key, 0)
    if isinstance(value, list):
        return as_int(value[0]) if value else 0
    return scalar(hp, key, 0)
