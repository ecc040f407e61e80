"""RAM read bandwidth: a short streaming read of a buffer larger than the CPU's last-level
cache (the only module that imports numpy).

Each pass sums the buffer with ``numpy.add.reduce``, one contiguous share per thread (numpy
leaves the GIL while it reduces, so threads read in parallel); a pass's figure is the buffer's
bytes over its wall time, and a thread count's figure the median of its passes. One thread
rarely saturates the memory controllers, so the thread count doubles from 1 up to the
physical cores while it still gains; the best count is reported. The buffer is written first
by as many threads (a fresh allocation maps the shared zero page, which would be read from
cache; first touch puts each thread's pages on its NUMA node). This is a
read-only figure, what decoding needs (every token reads the CPU's weights); copies and
writes run slower.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from moetune.hardware.base import RamBandwidth
from moetune.units import MIB

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
MIN_BUFFER_BYTES = 256 * MIB
MAX_BUFFER_BYTES = 2048 * MIB
LLC_MULTIPLE = 2  # the buffer is at least twice the last-level cache, so no pass reads it
RAM_SHARE = 8  # and at most an eighth of the available RAM
SECONDS = 1.0  # the budget, the buffer's fill included
MAX_PASSES = 5
GAIN = 1.05  # more threads must read at least 5 % faster to be tried further
_SIZE_UNITS = {"K": 1024, "M": MIB, "G": 1024 * MIB}


def last_level_cache_bytes(cache_dir: Path = CACHE_DIR) -> int | None:
    """The size of CPU 0's highest cache level (Linux sysfs); ``None`` when not reported."""
    best: tuple[int, int] | None = None
    try:
        entries = sorted(cache_dir.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        try:
            level = int((entry / "level").read_text().strip())
            size = (entry / "size").read_text().strip()
            kind = (entry / "type").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        unit = _SIZE_UNITS.get(size[-1].upper())
        number = size[:-1] if unit else size
        if not number.isdigit():
            continue
        found = (level, int(number) * (unit or 1))
        best = found if best is None or found > best else best
    return None if best is None else best[1]


def buffer_bytes_for(llc_bytes: int | None, available_bytes: int) -> int | None:
    """The buffer to stream: ``LLC_MULTIPLE`` times the last-level cache, at least
    ``MIN_BUFFER_BYTES`` and at most ``MAX_BUFFER_BYTES``, in whole MiB; ``None`` when an
    eighth of the available RAM is not enough for it."""
    wanted = max(MIN_BUFFER_BYTES, LLC_MULTIPLE * (llc_bytes or 0))
    if wanted > available_bytes // RAM_SHARE:
        return None
    return min(wanted, MAX_BUFFER_BYTES) // MIB * MIB


def thread_counts(max_threads: int) -> list[int]:
    """1, 2, 4, ... below ``max_threads``, then ``max_threads`` itself."""
    counts = [1]
    while counts[-1] * 2 < max_threads:
        counts.append(counts[-1] * 2)
    if max_threads > 1:
        counts.append(max_threads)
    return counts


def _passes(buffer: np.ndarray, threads: int, deadline: float) -> list[float]:
    """Seconds per pass over ``buffer`` with ``threads`` threads: up to ``MAX_PASSES``, none
    started after ``deadline`` but the first."""
    shares = np.array_split(buffer, threads)
    seconds: list[float] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while len(seconds) < MAX_PASSES and not (seconds and time.perf_counter() > deadline):
            start = time.perf_counter()
            list(pool.map(np.add.reduce, shares))
            seconds.append(time.perf_counter() - start)
    return seconds


def _fill(share: np.ndarray) -> None:
    share.fill(1)


def measure_read_bandwidth(
    buffer_bytes: int, max_threads: int, seconds: float = SECONDS
) -> RamBandwidth:
    """Stream-read a ``buffer_bytes`` buffer with 1, 2, 4 ... up to ``max_threads`` threads
    within about ``seconds`` (the buffer's fill included; one pass per count runs
    whatever the time), while more threads gain; the best count's median figure.
    MemoryError when the buffer cannot be allocated."""
    began = time.perf_counter()
    deadline = began + seconds
    buffer = np.empty(max(buffer_bytes // 8, 1), dtype=np.uint64)
    with ThreadPoolExecutor(max_workers=max(max_threads, 1)) as pool:  # pages fault in parallel
        list(pool.map(_fill, np.array_split(buffer, max(max_threads, 1))))
    size = buffer.nbytes
    by_threads: dict[int, int] = {}
    passes: dict[int, int] = {}
    counts = thread_counts(max(max_threads, 1))
    for index, threads in enumerate(counts):
        before = max(by_threads.values(), default=0)
        # each count gets an equal share of what is left of the budget (at least one pass)
        share = max(deadline - time.perf_counter(), 0.0) / (len(counts) - index)
        timed = _passes(buffer, threads, time.perf_counter() + share)
        by_threads[threads] = round(size / statistics.median(timed))
        passes[threads] = len(timed)
        if by_threads[threads] < GAIN * before:
            break
    threads = max(by_threads, key=lambda n: (by_threads[n], -n))
    del buffer
    return RamBandwidth(
        bytes_per_s=by_threads[threads],
        threads=threads,
        buffer_bytes=size,
        passes=passes[threads],
        by_threads=by_threads,
        seconds=time.perf_counter() - began,
    )


class StreamingReadProbe:
    """This machine's RAM read bandwidth, measured in about a second (``seconds``).

    ``cache_dir`` is where the last-level cache's size is read (sysfs); ``buffer_bytes``
    replaces the buffer's size (tests: a small one, whatever the cache).
    """

    name = "numpy"

    def __init__(
        self,
        seconds: float = SECONDS,
        cache_dir: Path = CACHE_DIR,
        buffer_bytes: int | None = None,
    ) -> None:
        self._seconds = seconds
        self._cache_dir = cache_dir
        self._buffer_bytes = buffer_bytes
        self._why: str | None = None

    @property
    def why(self) -> str | None:
        """Why the last ``measure()`` returned ``None``."""
        return self._why

    def measure(self, max_threads: int, available_bytes: int) -> RamBandwidth | None:
        """A fresh figure; ``None`` (with ``why``) when RAM is too short for a buffer larger
        than the last-level cache."""
        self._why = None
        size = self._buffer_bytes
        if size is None:
            llc = last_level_cache_bytes(self._cache_dir)
            size = buffer_bytes_for(llc, available_bytes)
            if size is None:
                wanted = max(MIN_BUFFER_BYTES, LLC_MULTIPLE * (llc or 0)) // MIB
                self._why = (
                    f"not measured: a {wanted} MiB buffer (larger than the CPU's cache) needs "
                    f"{RAM_SHARE} times as much RAM available"
                )
                return None
        try:
            return measure_read_bandwidth(size, max_threads, self._seconds)
        except MemoryError:
            self._why = f"not measured: no {size // MIB} MiB buffer could be allocated"
            return None
