"""Concurrent streams on the test rig (a tiny MoE model, ggml-rpc-server on 127.0.0.1 as the
device, two layers' experts on the CPU): `bench --parallel 1,4` measures one stream and four
at once, keeps them as speed points, and `plan --parallel 4`, calibrated on them, forecasts
the four streams' aggregate decode within 20 % of what bench measured."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moetune.core.noise import samples_disagree, samples_spread
from moetune.errors import ExitCode
from moetune.llamacpp.batched_bench import parse_batched_rows

from support.factory import ModelFactory
from support.helpers import moetune
from support.llama import rpc_server

# --n-cpu-moe 2 on this model: the experts of 6 layers on the device, of 2 on the CPU
BUDGET = ("--ctx", "1024", "--target-vram", "30M", "--overhead", "0")
# one thread: on the rig's 2 shared cores, llama-server's default (a thread per core) loses
# its threads to any other process between two barriers (tests/server/test_bench.py)
SERVER = ("-t", "1")
N_PREDICT = 64  # tokens per stream: long enough that a step's noise averages out
WITHIN = 0.20
TRIES = 3  # measured again, in a new MOETUNE_HOME, while the noise gate refuses the points


# The device on a core of its own, moetune and the llama-server it starts on the others, as a
# GPU computes beside the CPU: on the rig's 2 cores, unpinned, the scheduler may keep the RPC
# server's and llama-server's busy threads on one core for a while, and two one-stream
# measurements of one bench disagreed (the fresh-clone CI of df5a23c refused all three tries:
# leave-one-out 53 % of 4 points, one stream 387 tok/s in the last). Unpinned where fewer.
CORES = sorted(os.sched_getaffinity(0))
DEVICE_CORES, HOST_CORES = (CORES[-1:], CORES[:-1]) if len(CORES) >= 2 else ((), ())
PINNED = ("taskset", "-c", ",".join(map(str, HOST_CORES))) if HOST_CORES else ()


@pytest.fixture(scope="module")
def rpc() -> Iterator[str]:
    """This module's ggml-rpc-server, on DEVICE_CORES."""
    with rpc_server(cpus=DEVICE_CORES) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


class Measured:
    """One `bench --parallel 1,4` and the `plan --parallel 4` calibrated on its points."""

    def __init__(self, bench: dict[str, Any], plan: dict[str, Any]) -> None:
        self.bench = bench
        self.plan = plan
        (self.config,) = bench["configs"]
        self.streams = {s["streams"]: s for s in self.config["streams"]}
        self.forecast: dict[str, Any] = plan["forecast"]

    @property
    def refused(self) -> bool:
        """The noise gate refused the points (core/noise.py): the forecast is uncalibrated."""
        return bool(self.forecast["calibration"].get("refused_points"))


def _measure(model: Path, rpc: str, home: Path) -> Measured:
    done = moetune(
        "bench",
        str(model),
        *("--configs", "plan", "--depths", "0", "--parallel", "1,4"),
        *("--n-predict", str(N_PREDICT), "--repeats", "3", "--max-repeats", "8"),
        *BUDGET,
        "--json",
        "--",
        *("--rpc", rpc, *SERVER),
        home=home,
        prefix=PINNED,
    )
    assert done.returncode == 0, done.stderr
    planned = moetune(
        "plan",
        str(model),
        *BUDGET,
        "--rpc",
        rpc,
        "--parallel",
        "4",
        "--json",
        "--",
        *SERVER,
        home=home,
        prefix=PINNED,
    )
    assert planned.returncode == 0, planned.stderr
    return Measured(json.loads(done.stdout), json.loads(planned.stdout))


@pytest.fixture(scope="module")
def measured(model: Path, rpc: str, tmp_path_factory: pytest.TempPathFactory) -> Measured:
    found = _measure(model, rpc, tmp_path_factory.mktemp("parallel"))
    for _ in range(TRIES - 1):
        if not found.refused:
            break
        found = _measure(model, rpc, tmp_path_factory.mktemp("parallel"))
    return found


def test_bench_measures_one_stream_and_four(measured: Measured) -> None:
    """Each N: rounds of N requests at once on a server of -np 4, the aggregate the sum of
    the streams and the per-stream rate their mean, kept as a speed point of N streams."""
    config = measured.config
    assert config["status"] == "ok" and "-np" in config["args"]
    assert config["args"][config["args"].index("-np") + 1] == "4"
    assert sorted(measured.streams) == [1, 4]
    for n, found in measured.streams.items():
        assert found["predicted_n"] == N_PREDICT
        for requests in found["rounds"]:
            assert len(requests) == n
            assert all(r["predicted_n"] == N_PREDICT for r in requests)
        aggregate = found["decode_tps_aggregate"]["median"]
        per_stream = found["decode_tps_per_stream"]["median"]
        assert aggregate > 0 and per_stream > 0
        assert aggregate == pytest.approx(n * per_stream, rel=0.5)  # the sum of n alike
        assert found["ttft_s"]["median"] > 0
    rows = measured.bench["forecast"]["streams_rows"]
    assert sorted(r["streams"] for r in rows) == [1, 4]


def test_plan_forecasts_each_stream_and_all_together(measured: Measured) -> None:
    found = measured.forecast
    assert found["streams"] == 4
    assert found["decode_tps_aggregate"] > found["decode_tps_per_stream"] > 0
    assert found["decode_tps_aggregate"] == pytest.approx(4 * found["decode_tps_per_stream"])
    # the placement bench measured
    assert f"--n-cpu-moe {measured.plan['n_cpu_moe']}" == measured.config["description"]
    assert measured.plan["n_cpu_moe"] > 0  # some experts on the CPU, the rest on the device


def test_calibrated_aggregate_within_20_percent_of_measured(measured: Measured) -> None:
    """The forecast of four streams' decode together, calibrated on bench's points (one
    stream's and four's, the prompt's), within 20 % of bench's measured aggregate."""
    calibration = measured.forecast["calibration"]
    if measured.refused:
        aggregates = {
            n: round(s["decode_tps_aggregate"]["median"]) for n, s in measured.streams.items()
        }
        pytest.skip(
            f"the rig was too noisy to calibrate {TRIES} times: leave-one-out error "
            f"{calibration['refused_error']:.0%} of {calibration['refused_points']} points "
            f"(the last try's aggregate tok/s by streams: {aggregates})"
        )
    assert calibration["points"] >= 3, calibration
    four = measured.streams[4]
    measured_tps = four["decode_tps_aggregate"]["median"]
    forecast = measured.forecast["decode_tps_aggregate"]
    error = abs(forecast / measured_tps - 1)
    samples = [sum(r["decode_tps"] for r in requests) for requests in four["rounds"]]
    if error > WITHIN and samples_disagree(samples):
        pytest.skip(
            f"the rig was too noisy: four streams' aggregate {measured_tps:.0f} tok/s spread "
            f"{samples_spread(samples):.0%} over {len(samples)} rounds, forecast {forecast:.0f}"
        )
    assert error <= WITHIN, (forecast, four["decode_tps_aggregate"], calibration)


def test_run_tunes_with_n_slots_and_export_keeps_them(
    model: Path, rpc: str, tmp_path: Path
) -> None:
    """`run --parallel 4` launches -np 4 (each slot its own cache), its measured peak within
    the target and near the plan's for -np 4; the tuned profile keeps the slots, and `export
    preset --parallel 4` writes them as the section's `parallel` key."""
    home = tmp_path / "home"
    ran = moetune(
        "run",
        str(model),
        *BUDGET,
        "--rpc",
        rpc,
        "--parallel",
        "4",
        "--json",
        "--",
        *SERVER,
        home=home,
    )
    assert ran.returncode == 0, ran.stderr
    best = json.loads(ran.stdout)["best"]
    assert best["command"][best["command"].index("-np") + 1] == "4"
    budget = 30 * 1024**2
    assert 0 < best["measured_bytes"] <= budget
    assert abs(best["measured_bytes"] - best["predicted_bytes"]) < 0.05 * budget, best
    (saved,) = (home / "profiles").glob("*.json")
    profile = json.loads(saved.read_text())
    assert saved.stem.endswith("-np4") and profile["settings"]["parallel"] == 4
    command = profile["settings"]["command"]  # the moetune run that tunes it again
    assert command[command.index("--parallel") + 1] == "4"
    out = tmp_path / "preset.ini"
    done = moetune(
        "export",
        "preset",
        "--rpc",
        rpc,
        "--parallel",
        "4",
        "--require-tuned",
        "--out",
        str(out),
        home=home,
    )
    assert done.returncode == 0, done.stderr
    assert "\nparallel = 4\n" in out.read_text()


def test_calibrate_measure_imports_llama_batched_bench(
    model: Path, rpc: str, tmp_path: Path
) -> None:
    """`calibrate --measure --parallel 1,4`: llama-batched-bench (of the same build) at the
    first placement, its rows kept beside llama-bench's and made points of N streams at that
    placement; a point whose samples disagree is named as noisy instead (the rig's load)."""
    home = tmp_path / "home"
    done = moetune(
        "calibrate",
        "--measure",
        str(model),
        *("-p", "64", "-n", "32", "--repetitions", "2", "--ubatch", "64", "--threads", "1"),
        *("--parallel", "1,4", *BUDGET, "--rpc", rpc, "--json"),
        home=home,
    )
    assert done.returncode in (0, ExitCode.CHECK_FAILED), done.stderr
    data = json.loads(done.stdout)
    (batched,) = (home / "bench").glob("llama-batched-bench-*.jsonl")
    rows = parse_batched_rows(batched.read_text(), batched.name)
    # each test, --repetitions times; llama.cpp's logger, which writes its rows, can lose the
    # last line of a run at exit (seen on the rig: one run's 4-stream row missing)
    assert {r.n_streams for r in rows} == {1, 4} and 2 < len(rows) <= 4
    (found,) = data["files"]
    points = [p for p in found["points"] if p["source"]["tool"] == "llama-batched-bench"]
    kept = {p["n_streams"] for p in points if p["kind"] == "generation"}
    noisy = " ".join(found.get("noisy", []))
    assert all(n in kept or (f"x{n} streams" if n > 1 else "tg32 at") in noisy for n in (1, 4))
    # at the first placement llama-bench measured
    said = " ".join(done.stderr.split())
    first = re.search(r"llama-bench 1/\d+: --n-cpu-moe (\d+), -ub 64", said)
    assert first is not None, said
    assert f"llama-batched-bench 1/2: --n-cpu-moe {first[1]}, -ub 64" in said
    for point in points:
        assert point["placement"]["n_cpu_moe"] == int(first[1])
        assert (point["n_depth"], point["n_gen"], point["n_threads"]) in ((64, 32, 1), (0, 0, 1))
        assert 1 <= len(point["samples_tps"]) <= 2
