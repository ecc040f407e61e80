"""The thread term (core/threads.py): the RAM read rate's saturating law, CPU compute by the
cores, the -t candidates; the forecast by threads; calibration fitting it; calibrate
--measure's second thread count."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moetune.core.calibrate import Measured, fit_speed, point_forecast
from moetune.core.placement import Placement
from moetune.core.speed import DeviceFigures, HomeLoad, MachineFigures, SpeedLayout, forecast
from moetune.core.threads import (
    TYPICAL_SINGLE_THREAD_SHARE,
    cpu_thread_share,
    ram_thread_share,
    second_thread_count,
    single_share_of,
    thread_candidates,
)
from moetune.jobs.calibrate import BenchRun, with_thread_run


def test_ram_share_saturates() -> None:
    """min(t s, 1) over min(cores s, 1): one thread at s, saturated from 1/s threads on."""
    assert ram_thread_share(1, 16, 0.25) == pytest.approx(0.25)
    assert ram_thread_share(2, 16, 0.25) == pytest.approx(0.5)
    assert ram_thread_share(4, 16, 0.25) == ram_thread_share(16, 16, 0.25) == 1.0
    # two cores that do not saturate the RAM: the figure is two threads' rate
    assert ram_thread_share(1, 2, 0.3) == pytest.approx(0.5)
    # more threads than cores: the cores; unknown threads or cores: the figure itself
    assert ram_thread_share(32, 16, 0.05) == 1.0
    assert ram_thread_share(None, 16, 0.1) == ram_thread_share(4, None, 0.1) == 1.0
    assert ram_thread_share(1, 16, None) == pytest.approx(TYPICAL_SINGLE_THREAD_SHARE)


def test_cpu_share_counts_cores_not_hyperthreads() -> None:
    assert cpu_thread_share(4, 16) == 0.25 and cpu_thread_share(32, 16) == 1.0
    assert cpu_thread_share(None, 16) == cpu_thread_share(4, None) == 1.0


def test_single_share_and_candidates() -> None:
    assert single_share_of({1: 10, 2: 18, 4: 20}) == pytest.approx(0.5)
    assert single_share_of({1: 10}) is None and single_share_of({}) is None
    assert thread_candidates(16) == [1, 2, 4, 8, 16]
    assert thread_candidates(12, own=6) == [1, 2, 4, 6, 8, 12]
    assert thread_candidates(None) == []
    assert second_thread_count(16) == 8 and second_thread_count(2) == 1
    assert second_thread_count(1) is None


LAYOUT = SpeedLayout(
    devices=(HomeLoad(dense_bytes=10**9),),
    cpu=HomeLoad(expert_bytes=8 * 10**9, expert_params=4 * 10**9),
    device_names=("CUDA0",),
    n_expert=8,
    n_expert_used=2,
    n_swa=0,
    n_cells=4096,
    n_ubatch=512,
    offload_to=None,
    n_blocks=8,
)
MACHINE = MachineFigures(
    devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=1e14),),
    ram_bytes_per_s=50e9,
    cpu_flops_per_s=1e12,
    physical_cores=8,
    ram_single_thread_share=0.25,
)


def test_forecast_by_threads() -> None:
    """Decode's RAM term is slower below the saturating count and the same above it; the
    prompt's CPU compute scales with the threads up to the cores."""
    at = {t: forecast(replace(LAYOUT, n_threads=t), MACHINE) for t in (1, 2, 4, 8, 16)}
    ram = {
        t: next(x for x in f.decode_terms if x.kind == "ram").seconds or 0.0 for t, f in at.items()
    }
    assert ram[1] == pytest.approx(4 * ram[8]) and ram[2] == pytest.approx(2 * ram[8])
    assert ram[4] == ram[8] == ram[16]
    cpu = {
        t: next(x for x in f.prefill_terms if x.kind == "cpu_compute").seconds or 0.0
        for t, f in at.items()
    }
    assert cpu[1] == pytest.approx(8 * cpu[8]) and cpu[16] == cpu[8]
    assert forecast(LAYOUT, MACHINE).decode_tok_s == at[8].decode_tok_s  # None: the cores


def test_calibration_fits_the_single_thread_share() -> None:
    """Decode points at 1, 2 and 8 threads timed with a single-thread share of 0.4 (and 60 %
    of the RAM figure): the fit finds the share near 0.4 and forecasts 4 threads."""
    truth = replace(MACHINE, ram_single_thread_share=0.4)
    points = []
    for t in (1, 2, 8):
        layout = replace(LAYOUT, n_threads=t)
        ram = next(x for x in forecast(layout, truth).decode_terms if x.kind == "ram").seconds
        dev = next(x for x in forecast(layout, truth).decode_terms if x.kind != "ram").seconds
        assert ram is not None and dev is not None
        points.append(Measured(layout, 0, 16, 0, 1 / (ram / 0.6 + dev)))
    fit = fit_speed(points, replace(MACHINE, ram_single_thread_share=None))
    assert fit.ram_single_thread_share is not None
    assert abs(fit.ram_single_thread_share - 0.4) <= 0.1
    four = replace(LAYOUT, n_threads=4)
    ram = next(x for x in forecast(four, truth).decode_terms if x.kind == "ram").seconds
    dev = next(x for x in forecast(four, truth).decode_terms if x.kind != "ram").seconds
    assert ram is not None and dev is not None
    got = point_forecast(Measured(four, 0, 16, 0, 1.0), MACHINE, fit)
    assert got == pytest.approx(1 / (ram / 0.6 + dev), rel=0.1)


def test_a_measure_adds_a_second_thread_count() -> None:
    """Each placement at the smallest ubatch again, at half the threads (two points at the
    other count: one alone is its own thread term when left out); none at one thread or
    unknown threads."""
    runs = [
        BenchRun(Placement.with_n_cpu_moe(2), 32),
        BenchRun(Placement.with_n_cpu_moe(8), 32),
        BenchRun(Placement.with_n_cpu_moe(3), 64),
        BenchRun(Placement.with_n_cpu_moe(8), 64),
    ]
    more = with_thread_run(runs, 8)
    assert more[:4] == runs and len(more) == 6
    assert [(r.n_cpu_moe, r.n_ubatch, r.threads) for r in more[4:]] == [(2, 32, 4), (8, 32, 4)]
    assert "-t 4" in more[4].describe()
    assert with_thread_run(runs, 1) == runs and with_thread_run(runs, None) == runs


def test_run_objective_launches_a_thread_count() -> None:
    """A -t candidate is its own launch (the same N and -ub at another -t), named with -t."""
    from moetune.core.objective import Candidate, measure_candidates

    launched: list[Candidate] = []

    def measure(candidate: Candidate) -> float:
        launched.append(candidate)
        return 120.0 if candidate.threads == 4 else 90.0

    choice = measure_candidates(
        [Candidate(4, 512, 110.0, threads=4), Candidate(4, 512, 80.0, threads=1)],
        Candidate(4, 512, 100.0),
        100.0,
        measure,
        error=0.05,
        goal="decode",
    )
    assert [c.threads for c in launched] == [4]
    assert choice.winner == 0 and choice.tried[0].threads == 4
    assert choice.why.startswith("--n-cpu-moe 4 -ub 512 -t 4 measured 120")
