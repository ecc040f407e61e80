"""Threads as a knob on the test rig (a tiny MoE model, ggml-rpc-server on 127.0.0.1 as the
device): after `calibrate --measure` (which measures a second thread count), `plan
--objective decode` picks a `-t` whose measured decode, in a llama-bench `-t` sweep over every
count up to the cores, is within the forecast's error of the best."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import ExitCode
from moetune.hardware.host import physical_cores

from support.factory import ModelFactory
from support.helpers import cli
from support.llama import bin_path

BUDGET = ("--target-vram", "40M", "--ctx", "8192", "--overhead", "0")
ROUNDS = 3  # the sweep runs this many times, its counts interleaved (a shared machine's load
# changes over seconds); each count's speed: the median of all its samples
# Tokens a decode sample times: 64 (a fifth of a second here) rather than 16, so that one
# scheduling hiccup of the 2-core rig moves a sample less (at 16, 9 of 12 configurations were
# refused as noisy in one run)
N_GEN = 64
CALIBRATIONS = 3  # tries of calibrate --measure before the rig is called too noisy


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


def _json(*args: str) -> dict[str, Any]:
    code, out, err = cli(*args, "--json")
    assert code == 0, out + err
    data: dict[str, Any] = json.loads(out)
    return data


def _sweep(model: Path, rpc: str, entry: dict[str, Any], cores: int) -> dict[int, list[float]]:
    """Decode tok/s samples of llama-bench at the picked placement, -t 1 .. cores."""
    args = [str(bin_path("llama-bench")), "-m", str(model), "-rpc", rpc, "-o", "jsonl"]
    args += ["-p", "0", "-n", str(N_GEN), "-r", "3", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    args += ["--n-cpu-moe", str(entry["n_cpu_moe"]), "-ub", str(entry["n_ubatch"])]
    args += ["-t", ",".join(str(t) for t in range(1, cores + 1))]
    samples: dict[int, list[float]] = {}
    for _ in range(ROUNDS):
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        for line in done.stdout.splitlines():
            row = json.loads(line)
            samples.setdefault(row["n_threads"], []).extend(row["samples_ts"])
    return samples


def test_plan_picks_a_thread_count_within_the_forecasts_error(model: Path, rpc: str) -> None:
    cores = physical_cores()
    if not cores or cores < 2:
        pytest.skip("one physical core: no other thread count to pick")
    for _ in range(CALIBRATIONS):  # as the refusal's hint says: run it again
        code, out, err = cli(
            "calibrate",
            "--measure",
            str(model),
            *("-p", "128", "-n", str(N_GEN), "--repetitions", "3", "--ubatch", "32,64"),
            *("--threads", str(cores), *BUDGET, "--rpc", rpc),
            "--json",
        )
        if code != ExitCode.CHECK_FAILED or "the machine was too noisy" not in err:
            break
    else:
        # nothing kept: the plan would be uncalibrated (test_calibrate.py's load test)
        pytest.skip(f"the rig was too noisy to calibrate: {json.loads(out)['error']['message']}")
    assert code == 0, out + err
    measured = json.loads(out)
    threads = {p["n_threads"] for p in measured["files"][0]["points"]}
    assert threads <= {cores, cores // 2}  # the second thread count
    if len(threads) < 2:  # the other count's samples all disagreed: nothing to fit threads on
        pytest.skip(f"the rig was too noisy: points of -t {threads} alone kept to calibrate")
    data = _json("plan", str(model), *BUDGET, "--rpc", rpc, "--objective", "decode")
    found = data["frontier"]
    entries = found["entries"]
    counts = {e["threads"] for e in entries}
    assert set(range(1, cores + 1)) & counts >= {1, cores}  # -t candidates, ranked
    picked = entries[found["picked"]]
    calibration = picked["forecast"]["calibration"]
    if calibration["points"] < 4:  # the tests whose samples disagreed were refused
        pytest.skip(f"the rig was too noisy: {calibration['points']} points kept to calibrate")
    error = calibration["median_error"]
    assert error is not None
    pick = picked["threads"]
    assert picked["command"][picked["command"].index("-t") + 1] == str(pick)
    samples = _sweep(model, rpc, picked, cores)
    speed = {t: statistics.median(s) for t, s in samples.items()}
    # the sweep's own noise: the spread of a count's samples around their median
    noise = max(statistics.median(abs(x / speed[t] - 1) for x in s) for t, s in samples.items())
    best = max(speed.values())
    # within the error and the noise, and never below half the best whatever they are (on a
    # loaded 2-core machine one thread measured 4-8x two threads' decode: a wrong pick fails)
    floor = max(1 - error - noise, 0.5)
    assert speed[pick] >= best * floor, (pick, speed, error, noise, found["why"])
