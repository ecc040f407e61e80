"""The thread term of the speed model: what ``-t N`` gives the CPU's side of a placement.

- **RAM read rate** (decode's CPU-side experts and weights, and a prompt's where the CPU
  computes them): a saturating law, ``min(t * r1, r_all)``. One thread keeps only so many
  reads in flight (its line-fill buffers), so the rate grows with the threads until the memory
  controllers saturate. ``r_all`` is the RAM figure (doctor's best thread count's, or the
  given peak); ``r1 / r_all`` is the share one thread reaches: doctor's ``by_threads`` where it
  was measured on this machine (its 1-thread figure over its best), else fitted by calibration
  where the points differ in threads, else ``TYPICAL_SINGLE_THREAD_SHARE``.
- **CPU compute** (a prompt's CPU-side matmuls and attention): ``min(t, cores) / cores`` of
  the all-core figure; hyper-threads add nothing (they share a core's vector units).

Both are relative to the figure at the physical cores (what the RAM figure and a CPU FLOP/s
figure are the rate of), so a forecast at ``-t`` = the physical cores is the one without a
thread term; so is one whose threads or cores are unknown. More threads than cores are timed
as the cores: the contention of oversubscribed threads is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping

# the share of the all-thread RAM read rate one thread reaches where this machine's is not
# measured: 19.9 of 116.0 GB/s, a read-only AVX2 stream on one socket of an AMD EPYC 7402
# (https://github.com/kvcache-ai/ktransformers/pull/2175, a comment of 2026-09-10: one
# thread 19.9 GB/s, 32 threads over 8 L3 domains 116.0 GB/s)
TYPICAL_SINGLE_THREAD_SHARE = 0.17
TYPICAL_SOURCE = "https://github.com/kvcache-ai/ktransformers/pull/2175"


def effective_threads(n_threads: int | None, physical_cores: int | None) -> int | None:
    """The threads that count: ``n_threads`` at most the physical cores (None: the cores)."""
    if physical_cores is None or physical_cores < 1:
        return None
    return physical_cores if n_threads is None else max(1, min(n_threads, physical_cores))


def ram_thread_share(
    n_threads: int | None, physical_cores: int | None, single_share: float | None
) -> float:
    """The share of the RAM figure (its rate at the physical cores) ``n_threads`` threads read
    at: ``min(1, t s) / min(1, cores s)`` with ``s`` the share one thread reaches
    (None: ``TYPICAL_SINGLE_THREAD_SHARE``); 1.0 where the threads or the cores are unknown."""
    used = effective_threads(n_threads, physical_cores)
    if used is None or physical_cores is None:
        return 1.0
    s = TYPICAL_SINGLE_THREAD_SHARE if single_share is None else single_share
    return min(1.0, used * s) / min(1.0, physical_cores * s)


def cpu_thread_share(n_threads: int | None, physical_cores: int | None) -> float:
    """The share of the all-core CPU FLOP/s ``n_threads`` threads reach: ``min(t, cores) /
    cores`` (1.0 where the threads or the cores are unknown)."""
    used = effective_threads(n_threads, physical_cores)
    if used is None or physical_cores is None:
        return 1.0
    return used / physical_cores


def single_share_of(by_threads: Mapping[int, int]) -> float | None:
    """The share one thread reaches of the best figure in doctor's ``by_threads`` (None: no
    1-thread figure, or only that one)."""
    one = by_threads.get(1)
    best = max(by_threads.values(), default=0)
    if not one or best <= 0 or len(by_threads) < 2:
        return None
    return min(1.0, one / best)


def thread_candidates(physical_cores: int | None, own: int | None = None) -> list[int]:
    """The ``-t`` counts a frontier forecasts: 1, 2, 4, ... below the physical cores, the
    cores, and ``own`` (the plan's); none where the cores are unknown."""
    if physical_cores is None or physical_cores < 1:
        return []
    counts = {physical_cores}
    t = 1
    while t < physical_cores:
        counts.add(t)
        t *= 2
    if own is not None and own >= 1:
        counts.add(own)
    return sorted(counts)


def second_thread_count(threads: int) -> int | None:
    """The other ``-t`` a calibration measures beside ``threads``: half of it (at least 1);
    None where ``threads`` is 1 (there is no other count below it)."""
    return max(1, threads // 2) if threads > 1 else None
