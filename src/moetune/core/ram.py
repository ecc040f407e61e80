"""The RAM read bandwidth a speed forecast used, and where it came from (``jobs/figures.py``
finds it; plan's and bench's reports say it)."""

from __future__ import annotations

from typing import Literal

from moetune.record import record

RamSource = Literal["given", "saved", "measured"]


@record(frozen=True, kw_only=True)
class RamFigure:
    """The RAM read bandwidth a forecast used, and where it came from: ``given``
    (``--ram-bandwidth``; ``ram``: the RAM's type, rate and channels where they were given,
    ``bytes_per_s`` then their peak), ``saved`` (measured on this machine at ``measured_at``,
    kept in ``file``) or ``measured`` now (and kept in ``file``, None where it could not be)."""

    bytes_per_s: int
    source: RamSource
    ram: str | None = None
    measured_at: str | None = None  # UTC, ISO 8601
    file: str | None = None
