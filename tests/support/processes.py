"""Waiting on processes and on conditions: a deadline and a poll, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil


def wait_until(ready: Callable[[], bool], what: str, within_s: float = 10.0) -> None:
    """Return as soon as ``ready()`` holds; TimeoutError naming ``what`` after ``within_s``."""
    deadline = time.monotonic() + within_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {within_s:g} s: {what}")
        time.sleep(0.01)


def gone(pid: int, within_s: float = 10.0) -> bool:
    """True once ``pid`` no longer runs (absent or a zombie awaiting its reaper)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
