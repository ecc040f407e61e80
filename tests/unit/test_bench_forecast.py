"""The forecast beside each bench measurement (jobs/bench_forecast.py): calibrated on the
other configurations' points and the kept ones, never on the configuration's own; from
figures alone where too few remain; its rendering at 80 columns and its JSON."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from moetune.core.calibrate import fit_of, point_forecast
from moetune.core.facts import ModelFacts
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures
from moetune.hardware.host import cpu_model
from moetune.jobs.bench_forecast import NO_PLACEMENT, bench_forecast, devices_of, with_forecast
from moetune.jobs.loader import load_model_facts
from moetune.jobs.speed import bench_points, measured_of
from moetune.records import results as res
from moetune.report import SCHEMA_VERSION, payloads, to_json
from moetune.report.bench import render_report
from moetune.store import bench as saved
from moetune.store.speed import SpeedStore

from support.bench import SPEED_MACHINE, SPEEDS, speed_bench
from support.chart import panels, places
from support.helpers import EXAMPLE_QWEN, cli
from support.width import WIDTH


@pytest.fixture(scope="module")
def facts() -> ModelFacts:
    return load_model_facts(EXAMPLE_QWEN)


def _by_row(forecast: res.BenchForecast) -> dict[tuple[str, int], res.RowForecast]:
    return {(f.config, f.depth): f for f in forecast.rows}


def test_each_row_is_forecast_by_the_fit_of_the_other_configurations(facts: ModelFacts) -> None:
    result = speed_bench(SPEEDS)
    found = _by_row(bench_forecast(result, facts))
    devices = devices_of(result)
    figures = MachineFigures(devices=(DeviceFigures(),))
    settings = Settings(n_ctx=8192)
    points = bench_points(result, None)
    for row in result.results:
        own = [p for p in points if p.source.config == row.config]
        others = [p for p in points if p.source.config != row.config]
        fit = fit_of(measured_of(others, facts, settings, devices), figures)
        assert fit is not None
        mine = measured_of(own, facts, settings, devices)
        decode = next(m for m in mine if m.is_decode and m.n_depth == row.depth)
        prefill = next(m for m in mine if m.is_prefill and m.n_prompt == row.depth)
        shown = found[(row.config, row.depth)]
        assert shown.decode_tps is not None
        assert shown.decode_tps == pytest.approx(point_forecast(decode, figures, fit))
        assert shown.prefill_tps == pytest.approx(point_forecast(prefill, figures, fit))
        assert shown.decode_error == pytest.approx(
            abs(shown.decode_tps - row.decode_tps.median) / row.decode_tps.median
        )
        assert shown.calibration.points == len(others)  # 2 configurations x 2 depths x 2 kinds


def test_a_configurations_own_measurements_do_not_move_its_forecast(facts: ModelFacts) -> None:
    """Out of sample: the plan row's forecast is the same whatever plan measured."""
    before = _by_row(bench_forecast(speed_bench(SPEEDS), facts))
    faster = {**SPEEDS, "plan": {512: (80.0, 2000.0), 4096: (70.0, 1900.0)}}
    after = _by_row(bench_forecast(speed_bench(faster), facts))
    for depth in (512, 4096):
        assert after[("plan", depth)].decode_tps == pytest.approx(
            before[("plan", depth)].decode_tps
        )
        assert after[("plan", depth)].decode_error != before[("plan", depth)].decode_error
    assert after[("cpu-moe", 512)].decode_tps != pytest.approx(before[("cpu-moe", 512)].decode_tps)


def test_kept_points_of_the_same_placement_are_left_out(facts: ModelFacts) -> None:
    earlier = speed_bench({"plan": {1024: (39.0, 880.0)}, "cpu-moe": {1024: (21.0, 390.0)}})
    kept = bench_points(earlier, "earlier.json")
    found = _by_row(bench_forecast(speed_bench(SPEEDS), facts, kept))
    assert found[("plan", 512)].calibration.points == 8 + 2  # the cpu-moe ones kept, not plan's
    assert found[("layers", 512)].calibration.points == 8 + 4


def test_uncalibrated_says_which_figures_are_missing(facts: ModelFacts) -> None:
    alone = speed_bench({"plan": SPEEDS["plan"]})
    row = _by_row(bench_forecast(alone, facts))[("plan", 512)]
    assert row.calibration.points == 0 and row.decode_tps is None and row.decode_error is None
    assert row.missing and all(isinstance(m, str) for m in row.missing)
    figures = MachineFigures(
        devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=1e14),),
        ram_bytes_per_s=60e9,
        cpu_flops_per_s=1e12,
    )
    known = _by_row(bench_forecast(alone, facts, figures=figures))[("plan", 512)]
    assert known.decode_tps is not None and known.decode_tps > 0 and not known.missing
    assert known.decode_error is not None


def test_a_fit_configuration_has_no_placement(facts: ModelFacts) -> None:
    found = _by_row(bench_forecast(speed_bench({**SPEEDS, "fit": {512: (41.0, 910.0)}}), facts))
    assert found[("fit", 512)].note == NO_PLACEMENT and found[("fit", 512)].decode_tps is None


def test_with_forecast_reads_the_kept_points_of_this_machine(tmp_path: Path) -> None:
    here = SPEED_MACHINE.model_copy(update={"cpu_info": cpu_model()})
    earlier = speed_bench({"cpu-moe": {1024: (21.0, 390.0)}}, machine=here)
    SpeedStore().save(bench_points(earlier, None), "bench-earlier")
    result = speed_bench({"plan": SPEEDS["plan"]}, machine=here)
    forecast = with_forecast(result, schema_version=SCHEMA_VERSION).forecast
    assert forecast is not None and forecast.kept_points == 2
    assert forecast.rows[0].calibration.points == 2 and forecast.rows[0].decode_tps is not None
    elsewhere = with_forecast(speed_bench({"plan": SPEEDS["plan"]}), schema_version=SCHEMA_VERSION)
    assert elsewhere.forecast is not None and elsewhere.forecast.kept_points == 0


def test_with_forecast_uses_this_machine_s_saved_ram_bandwidth() -> None:
    """A bench run here: its forecast takes the RAM read bandwidth saved for this machine
    (jobs/figures.py, as plan does), says so in the text and the JSON; one run elsewhere
    does not."""
    from moetune.hardware.host import LiveHostProbe
    from moetune.jobs.figures import machine_identity
    from moetune.store.machine import SavedRamBandwidth, save_ram_bandwidth

    entry = SavedRamBandwidth(
        machine=machine_identity(LiveHostProbe().host()),
        bytes_per_s=8_100_000_000,
        threads=2,
        buffer_bytes=512 * 1024**2,
        passes=5,
        measured_at="2026-12-07T10:00:00+00:00",
    )
    save_ram_bandwidth(entry)
    here = SPEED_MACHINE.model_copy(update={"cpu_info": cpu_model()})
    result = with_forecast(speed_bench({"plan": SPEEDS["plan"]}, machine=here), schema_version=1)
    assert result.forecast is not None and result.forecast.ram_read_bandwidth is not None
    assert result.forecast.ram_read_bandwidth.source == "saved"
    assert result.forecast.ram_read_bandwidth.bytes_per_s == 8_100_000_000
    document = json.loads(to_json(payloads.bench_payload(result)))
    assert document["forecast"]["ram_read_bandwidth"]["source"] == "saved"
    assert "RAM read 8.1 GB/s, measured on this machine 2026-12-07" in _text(result, 200)
    elsewhere = with_forecast(speed_bench({"plan": SPEEDS["plan"]}), schema_version=1)
    assert elsewhere.forecast is not None and elsewhere.forecast.ram_read_bandwidth is None


def test_with_forecast_without_the_model_or_a_placement() -> None:
    gone = with_forecast(
        speed_bench(SPEEDS, model="/nowhere/m.gguf"), schema_version=SCHEMA_VERSION
    )
    assert gone.forecast is not None and not gone.forecast.rows
    assert gone.forecast.note == "the model file /nowhere/m.gguf is not readable here: " + (
        "measurements only"
    )
    served = with_forecast(
        speed_bench(SPEEDS, server_url="http://127.0.0.1:8080"), schema_version=SCHEMA_VERSION
    )
    assert served.forecast is not None and "running server" in (served.forecast.note or "")


def _text(result: res.BenchResult, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(render_report(result))
    return console.export_text()


def test_report_at_80_columns_with_the_chart(facts: ModelFacts) -> None:
    result = speed_bench(SPEEDS)
    result = result.model_copy(update={"forecast": bench_forecast(result, facts)})
    text = _text(result, WIDTH)
    assert all(len(line.rstrip()) <= WIDTH for line in text.splitlines()), text
    assert "forecast beside measured" in text
    assert "decode tok/s: measured against forecast" in text
    assert "prefill tok/s: measured against forecast" in text
    assert "forecast tok/s" in text and ".. measured = forecast" in text
    assert "oo plan" in text and "xx cpu-moe" in text and "** layers" in text
    decode, prefill = panels(text.splitlines())[1:]  # after decode against depth
    for rows in (decode, prefill):  # two configurations x two depths each, apart
        shown = places(rows, "ox*+")
        assert sorted(shown.values()) == ["*", "*", "o", "o", "x", "x"], "\n".join(rows)
    assert result.forecast is not None
    errors = [f.decode_error for f in result.forecast.rows if f.decode_error is not None]
    shown_error = f"{statistics.median(errors):.0%}".replace("%", " %")
    assert f"median error {shown_error} over 6 rows" in text


def test_report_without_the_model_shows_measurements_only(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    gone = speed_bench(SPEEDS, model=str(tmp_path / "gone.gguf"))
    saved.write_result(path, to_json(payloads.bench_payload(gone)))
    code, out, err = cli("report", str(path))
    assert code == 0, err
    assert "is not readable here: measurements only" in " ".join(out.split())
    assert "decode tok/s: no forecast: measurements only" in out
    assert "prefill tok/s: no forecast: measurements only" in out
    assert "measured against forecast" not in out
    assert "decode tok/s (median) against depth" in out  # the measurements are charted


def test_report_json_carries_the_forecast_per_row(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    saved.write_result(path, to_json(payloads.bench_payload(speed_bench(SPEEDS))))
    code, out, err = cli("report", str(path), "--json")
    assert code == 0, err
    rows = json.loads(out)["forecast"]["rows"]
    assert len(rows) == 6
    assert set(rows[0]) >= {"config", "depth", "decode_tps", "prefill_tps", "decode_error"}
    assert rows[0]["calibration"]["points"] == 8
    assert all(r["decode_tps"] > 0 and r["prefill_error"] >= 0 for r in rows)


def test_the_same_placement_spelled_otherwise_is_left_out(facts: ModelFacts) -> None:
    """``--n-cpu-moe 48 -ngl 99`` on a 48-block model is ``-cmoe``: a kept point of it is
    the configuration's own, not another's."""
    assert facts.n_layers == 48
    earlier = speed_bench({"cpu-moe": {1024: (21.0, 390.0)}, "plan": {1024: (39.0, 880.0)}})
    spelled = ["-m", "q.gguf", "-ngl", "99", "--n-cpu-moe", "48"]
    earlier = earlier.model_copy(
        update={
            "configs": [
                c.model_copy(update={"args": spelled}) if c.name == "cpu-moe" else c
                for c in earlier.configs
            ]
        }
    )
    kept = bench_points(earlier, None)
    found = _by_row(bench_forecast(speed_bench(SPEEDS), facts, kept))
    assert found[("cpu-moe", 512)].calibration.points == 8 + 2  # plan's kept, not its own
