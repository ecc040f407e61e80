"""Noise where it is measured (core/noise.py): a point's samples that disagree, a fit whose
leave-one-out error is beyond the bound (a forecast does not use it), and `calibrate
--measure` with a fake llama-bench: a noisy run measured again once, refused if still noisy,
nothing kept where the fit is beyond the bound."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from moetune.core.calibrate import Measured, fit_speed, fitted_forecast
from moetune.core.noise import (
    LOO_ERROR_BOUND,
    POINT_SPREAD_BOUND,
    loo_beyond_bound,
    loo_text,
    samples_disagree,
    samples_spread,
)
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.core.speed import (
    Efficiency,
    forecast,
)
from moetune.jobs.calibrate import BenchKnobs, BenchRun, measure_model
from moetune.records.speed import CalibrateResult, FitCheck, SpeedPoint
from moetune.store.speed import SpeedStore

from support.speed_fit import FIGURES, example_layout

DATA = Path(__file__).parent.parent / "data" / "llama_bench"


def test_a_points_spread() -> None:
    """``(max - min) / median`` of its samples; none from fewer than two."""
    assert samples_spread([]) is None and samples_spread([40.0]) is None
    assert samples_spread([10.0, 12.0]) == pytest.approx(2 / 11)
    assert samples_spread([10.0, 11.0, 30.0]) == pytest.approx(20 / 11)
    # the N 2 on a loaded rig: 18.1-38.8 tok/s
    assert samples_disagree([18.1, 38.8]) and not samples_disagree([40.0])
    half = 100.0 * POINT_SPREAD_BOUND / 2  # at the bound, and past it
    assert not samples_disagree([100.0 - half, 100.0 + half])
    assert samples_disagree([100.0 - half - 0.1, 100.0 + half + 0.1])


def test_the_loo_bound() -> None:
    assert not loo_beyond_bound(None)  # too few points to leave one out: not judged
    assert not loo_beyond_bound(LOO_ERROR_BOUND) and loo_beyond_bound(LOO_ERROR_BOUND + 1e-9)
    assert loo_text(0.505) == "leave-one-out error 50 %, bound 25 %"


# --- a forecast on a fit whose points disagree ------------------------------------------

TRUE = Efficiency(device_memory=0.7, ram=0.55, link=0.8, device_compute=0.4, cpu_compute=0.5)


def _points(noise: Sequence[float]) -> list[Measured]:
    """A decode point per placement, its speed from core/speed at ``TRUE`` times the next of
    ``noise`` (1: as the model says)."""
    found = []
    for n, factor in zip((4, 8, 16, 24, 32, 40), noise, strict=True):
        layout = example_layout(n, 512)
        decode = forecast(layout, FIGURES, depth=64, efficiency=TRUE).decode_tok_s
        assert decode
        found.append(Measured(layout, 0, 128, 0, decode * factor))
    return found


def test_a_fit_beyond_the_bound_is_not_used() -> None:
    """Points that agree: the fit is used (calibrated). The same points, every other one
    measured at 2.5x or 0.4x: its leave-one-out error is beyond the bound, the forecast is
    the uncalibrated one and says why."""
    layout = example_layout(20, 512)
    quiet = fit_speed(_points([1.0] * 6), FIGURES)
    assert quiet.trusted and quiet.forecast_error == quiet.loo_median_error
    calibrated = fitted_forecast(layout, FIGURES, quiet, depth=64)
    assert calibrated.calibration.label.startswith("calibrated on 6 points")

    noisy = fit_speed(_points([1.0, 2.5, 1.0, 0.4, 2.5, 1.0]), FIGURES)
    assert noisy.loo_median_error is not None and noisy.loo_median_error > LOO_ERROR_BOUND
    assert not noisy.trusted and noisy.forecast_error is None
    found = fitted_forecast(layout, FIGURES, noisy, depth=64)
    uncalibrated = fitted_forecast(layout, FIGURES, None, depth=64)
    assert found.decode_tok_s == uncalibrated.decode_tok_s
    assert found.expected_error == uncalibrated.expected_error is not None
    assert found.calibration.points == 0
    assert found.calibration.refused_error == noisy.loo_median_error
    assert found.calibration.label == (
        f"not calibrated: its 6 measured points disagree ({loo_text(noisy.loo_median_error)})"
    )


# --- calibrate --measure with a fake llama-bench -----------------------------------------


def _fake_bench(tmp_path: Path, samples: Sequence[Sequence[float]]) -> Path:
    """A llama-bench that writes one pp64 row per call at its ``--n-cpu-moe``, its samples
    the next of ``samples`` (its calls counted in a file beside it)."""
    row = json.loads((DATA / "rig_tiny_rpc.jsonl").read_text().splitlines()[0])
    row["model_filename"] = str(tmp_path / "tiny.gguf")
    (tmp_path / "row.json").write_text(json.dumps(row))
    (tmp_path / "samples.json").write_text(json.dumps(list(samples)))
    tool = tmp_path / "llama-bench"
    tool.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, statistics, sys\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "count = here / 'calls'\n"
        "n = int(count.read_text()) if count.exists() else 0\n"
        "count.write_text(str(n + 1))\n"
        "row = json.loads((here / 'row.json').read_text())\n"
        "samples = json.loads((here / 'samples.json').read_text())[n]\n"
        "row['samples_ts'] = samples\n"
        "row['n_cpu_moe'] = int(sys.argv[sys.argv.index('--n-cpu-moe') + 1])\n"
        "row['avg_ts'] = statistics.mean(samples)\n"
        "row['stddev_ts'] = statistics.pstdev(samples)\n"
        "print(json.dumps(row))\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


RUNS = [BenchRun(Placement.with_n_cpu_moe(2), 32), BenchRun(Placement.with_n_cpu_moe(8), 32)]
KNOBS = BenchKnobs(
    n_prompt=64, n_gen=0, repetitions=2, threads=2, settings=Settings(n_ctx=8192), rpc=()
)
QUIET, NOISY = [100.0, 104.0], [40.0, 100.0]


def _measure(
    tmp_path: Path,
    samples: Sequence[Sequence[float]],
    check: FitCheck | None = None,
) -> tuple[CalibrateResult, SpeedStore, list[str], list[Sequence[SpeedPoint]]]:
    store = SpeedStore(tmp_path / "speed")
    events: list[str] = []
    checked: list[Sequence[SpeedPoint]] = []

    def fit(points: Sequence[SpeedPoint], replacing: str) -> FitCheck | None:
        checked.append(points)
        return check

    result = measure_model(
        str(tmp_path / "tiny.gguf"),
        RUNS,
        KNOBS,
        tool=_fake_bench(tmp_path, samples),
        devices=["RPC0"],
        schema_version=1,
        out_dir=tmp_path / "bench",
        on_event=events.append,
        timeout_s=60,
        store=store,
        check=fit,
    )
    return result, store, events, checked


def test_a_noisy_run_is_measured_again_once(tmp_path: Path) -> None:
    """The second run's samples disagree: it runs once more, quiet then; both points kept."""
    result, store, events, _ = _measure(tmp_path, [QUIET, NOISY, QUIET])
    assert (tmp_path / "calls").read_text() == "3"
    assert events[-1] == "llama-bench again 1/1: --n-cpu-moe 8, -ub 32 (its samples disagree)"
    (found,) = result.files
    assert found.remeasured == [
        "pp64 at --n-cpu-moe 8, -ub 32, -t 1: 2 samples 40.0-100.0 tok/s, spread 86 % (bound 20 %)"
    ]
    assert found.noisy == [] and len(found.points) == 2 and found.saved_path is not None
    assert result.refused is None and len(store.points(print)) == 2


def test_still_noisy_is_refused(tmp_path: Path) -> None:
    """Noisy twice: that point is refused with why, the other kept; noisy everywhere: nothing
    kept, and the result says the machine was too noisy (no fit is tried)."""
    result, store, _, _ = _measure(tmp_path, [QUIET, NOISY, NOISY])
    (found,) = result.files
    assert len(found.points) == 1 and len(found.noisy) == 1 and "spread 86 %" in found.noisy[0]
    assert len(store.points(print)) == 1

    again = tmp_path / "again"
    again.mkdir()
    result, store, _, checked = _measure(again, [NOISY] * 4)
    assert (again / "calls").read_text() == "4"  # two runs, each measured once more, no more
    assert result.refused == (
        "not calibrated: the machine was too noisy (every test's samples disagreed beyond "
        "20 %, measured twice)"
    )
    assert store.points(print) == [] and checked == []
    assert result.files[0].saved_path is None


def test_a_fit_beyond_the_bound_keeps_nothing(tmp_path: Path) -> None:
    """Every point agrees with itself, but their fit's leave-one-out error is beyond the
    bound: nothing kept (the store as it was), the result says so; within it, kept."""
    store = SpeedStore(tmp_path / "speed")
    before, _ = store.save([_kept()], "llama-bench-before")
    beyond = FitCheck(
        points=4, kept_points=1, median_error=0.505, max_error=11.1, bound=0.25, within=False
    )
    result, store, _, checked = _measure(tmp_path, [QUIET, QUIET], check=beyond)
    assert [len(c) for c in checked] == [2]
    assert result.refused == (
        "not calibrated: the machine was too noisy (leave-one-out error 50 %, bound 25 %)"
    )
    assert sorted(p.name for p in store.root.iterdir()) == [before.name]
    within = beyond.model_copy(update={"median_error": 0.1, "within": True})
    again = tmp_path / "again"
    again.mkdir()
    result, store, _, _ = _measure(again, [QUIET, QUIET], check=within)
    assert result.refused is None and len(store.points(print)) == 2


def _kept() -> SpeedPoint:
    from moetune.records.speed import SpeedMachine, SpeedModel, SpeedPlacement, SpeedSource

    return SpeedPoint(
        kind="generation",
        model=SpeedModel(file_name="q.gguf"),
        placement=SpeedPlacement(n_cpu_moe=2),
        n_prompt=0,
        n_gen=4,
        tps=10.0,
        machine=SpeedMachine(),
        source=SpeedSource(tool="llama-bench"),
    )
