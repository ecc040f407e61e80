"""Sizes: the only place that parses or formats byte counts.

Parsing follows the conventions people type for GPU memory: ``24G``, ``24GB`` and ``24GiB``
all mean 24 GiB (nvidia-smi and llama.cpp report binary units, and nobody means 24e9 bytes
when they say their card has 24G). An explicit decimal suffix with an ``i``-less ``B`` is
still binary; this is deliberate and documented in the README.
"""

from __future__ import annotations

import re

from moetune.errors import BadValueError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_SUFFIX = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str, allow_zero: bool = False) -> int:
    """Parse ``"22G"``, ``"1.5GiB"``, ``"800M"``, ``"24000MiB"`` or plain bytes into bytes.

    Sizes must be positive, except where ``allow_zero`` (a headroom or overhead of 0)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise BadValueError(
            f"not a size: {text!r}",
            hint="use a number with a unit, e.g. 24G, 22.5GiB, 800M or 24000MiB",
        )
    number, unit = match.groups()
    value = float(number) * _SUFFIX[unit.upper()]
    if value < 0 or (value == 0 and not allow_zero):
        raise BadValueError(f"size must be positive: {text!r}")
    return round(value)


def format_bytes(n_bytes: int | None, precision: int = 2) -> str:
    """Format bytes with a binary unit: ``17.48 GiB``, ``384.00 MiB``; ``?`` for unknown."""
    if n_bytes is None:
        return "?"
    sign = "-" if n_bytes < 0 else ""
    value = abs(n_bytes)
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value >= scale:
            return f"{sign}{value / scale:.{precision}f} {unit}"
    return f"{sign}{value} B"


def format_mib(n_bytes: int) -> str:
    """Format as llama.cpp prints buffer sizes: MiB with two decimals."""
    return f"{n_bytes / MIB:.2f} MiB"
