"""The RAM read bandwidth a speed forecast used, and where it came from (``jobs/figures.py``
finds it; plan's and bench's reports say it)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from moetune.record import OMIT_EMPTY, record

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
    # the share of it one thread reads (core/threads.py), where it was measured by thread count
    single_thread_share: float | None = field(default=None, metadata=OMIT_EMPTY)
