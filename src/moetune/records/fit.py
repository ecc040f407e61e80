"""What llama.cpp's ``--fit`` chose, as data (llamacpp/log.py reads it from a server's log),
and the one line that describes it."""

from __future__ import annotations

from moetune.records.frozen import FrozenModel


class FitDevice(FrozenModel):
    """One device as ``--fit`` left it (the last summary line it printed for it)."""

    device: str
    layers: int
    overflowing: int
    used_mib: int
    free_mib: int


class FitChoice(FrozenModel):
    """What llama.cpp's ``--fit`` decided, from its log."""

    status: str  # unchanged | fitted | failed | error | unknown
    message: str | None
    devices: list[FitDevice]
    offloaded: str | None  # "9/9" from "offloaded 9/9 layers to GPU"
    target_mib: int | None  # the --fit-target moetune passed (None: llama.cpp's default)


def describe_fit(fit: FitChoice) -> str:
    """One line: ``fitted: RPC0 9 layers (6 with CPU experts)``."""
    parts = [
        f"{d.device.split(' (', 1)[0]} {d.layers} layers ({d.overflowing} with CPU experts)"
        for d in fit.devices
    ]
    if fit.message:
        parts.append(fit.message)
    if not parts and fit.offloaded:
        parts.append(f"{fit.offloaded} layers offloaded")
    return f"{fit.status}" + (f": {'; '.join(parts)}" if parts else "")
