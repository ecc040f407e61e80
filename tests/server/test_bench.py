"""moetune bench end to end: the real llama-server on a tiny model with ggml-rpc-server on
127.0.0.1 as the device."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from moetune.errors import ExitCode
from moetune.records import results as res

from support.factory import ModelFactory
from support.helpers import moetune, start_moetune
from support.llama import running_server, wait_for_servers

# --- the real llama-server ------------------------------------------------------------------

CTX = 1024
N_PREDICT = 8
REPEATS = 2
MAX_REPEATS = 4  # keeps the shared bench short: a depth that does not settle stops at 4
TARGET_MIB = 30  # on this model: --n-cpu-moe 2 fits, everything on the device does not


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


class Bench:
    """One `moetune bench` of every configuration, shared by the tests below."""

    def __init__(self, done: subprocess.CompletedProcess[str], out: Path, home: Path) -> None:
        self.done = done
        self.out = out
        self.home = home
        self.data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}

    def config(self, name: str) -> dict[str, Any]:
        return next(c for c in self.data["configs"] if c["name"] == name)


@pytest.fixture(scope="module")
def bench(model: Path, rpc: str, tmp_path_factory: pytest.TempPathFactory) -> Bench:
    root = tmp_path_factory.mktemp("bench-run")
    out = root / "result.json"
    done = moetune(
        "bench",
        str(model),
        "--ctx",
        str(CTX),
        "--depths",
        "0,64,256",
        "--repeats",
        str(REPEATS),
        "--max-repeats",
        str(MAX_REPEATS),
        "--n-predict",
        str(N_PREDICT),
        "--target-vram",
        f"{TARGET_MIB}M",
        "--overhead",
        "0",
        "--out",
        str(out),
        "--",
        "--rpc",
        rpc,
        home=root / "home",
    )
    return Bench(done, out, root / "home")


def test_bench_prints_table_and_verdict(bench: Bench) -> None:
    assert bench.done.returncode == 0, bench.done.stderr
    text = bench.done.stdout
    assert "configurations" in text and "measurements: median (min-max)" in text
    assert "verdict" in text and ("is fastest" in text or "noisy, no winner" in text)
    assert f"{REPEATS}-{MAX_REPEATS} repeats until within 10.0 %" in text
    for name in ("plan", "fit", "cpu-moe", "layers", "gpu-only"):
        assert name in text
    assert "does not fit" in text  # gpu-only, skipped
    assert "Traceback" not in bench.done.stderr


def test_json_holds_every_sample(bench: Bench) -> None:
    data = bench.data
    assert data["kind"] == "moetune.bench" and data["schema_version"] >= 1
    status = {c["name"]: c["status"] for c in data["configs"]}
    assert status == {
        "plan": "ok",
        "fit": "ok",
        "cpu-moe": "ok",
        "layers": "ok",
        "gpu-only": "skipped",
    }
    shortest = data["shortest_prompt"]
    assert 0 < shortest < 64  # depth 0 is the chat template alone
    assert data["depths"] == [shortest, 64, 256]
    assert len(data["results"]) == 4 * 3
    for row in data["results"]:
        assert REPEATS <= len(row["samples"]) <= MAX_REPEATS
        for sample in row["samples"]:
            assert sample["prompt_n"] == row["depth"]  # exactly the depth asked, template included
            assert sample["predicted_n"] == N_PREDICT
            assert sample["prefill_tps"] > 0 and sample["decode_tps"] > 0
            assert sample["stop_type"] == "length"
        for key in ("ttft_s", "prefill_tps", "decode_tps"):
            stat = row[key]
            assert 0 < stat["min"] <= stat["median"] <= stat["max"]
    assert {(v["depth"], v["metric"]) for v in data["verdicts"]} == {
        (d, m) for d in data["depths"] for m in ("decode_tps", "prefill_tps")
    }


def test_each_depth_repeated_until_they_agree(bench: Bench) -> None:
    """Settled: the samples' spread is within the bound (--repeats of them or more); not
    settled: --max-repeats of them (a 60 s limit is far)."""
    data = bench.data
    assert (data["repeats"], data["max_repeats"], data["max_spread"]) == (REPEATS, MAX_REPEATS, 0.1)
    for row in data["results"]:
        samples = row["samples"]
        assert len(samples) == MAX_REPEATS or row["settled"]
        for key in ("decode_tps", "prefill_tps"):
            values = [s[key] for s in samples]
            stat = row[key]
            assert (stat["min"], stat["max"]) == (min(values), max(values))
            assert stat["spread"] == pytest.approx((stat["max"] - stat["min"]) / stat["median"])
            if row["settled"]:
                assert stat["spread"] <= data["max_spread"]
        if row["settled"] and len(samples) > REPEATS:  # it stopped at the first that agreed
            fewer = samples[:-1]
            assert any(
                (max(v) - min(v)) / statistics.median(v) > data["max_spread"]
                for v in ([s[k] for s in fewer] for k in ("decode_tps", "prefill_tps"))
            )


def test_each_configuration_is_warmed_before_it_is_timed(bench: Bench) -> None:
    """One untimed request of the first depth's shape, its prompt past one ubatch as far as
    the context holds it, kept beside the configuration."""
    longest = CTX - N_PREDICT - 1
    for name in ("plan", "fit", "cpu-moe", "layers"):
        warmup = bench.config(name)["warmup"]
        assert warmup["prompt_n"] == max(bench.data["depths"][0], min(512 + 1, longest))
        assert warmup["predicted_n"] == N_PREDICT
    assert bench.config("gpu-only")["warmup"] is None  # skipped: never launched


def test_verdict_names_a_winner_only_without_overlap(bench: Bench) -> None:
    for verdict in bench.data["verdicts"]:
        rows = [
            r
            for r in bench.data["results"]
            if r["depth"] == verdict["depth"] and r["config"] != verdict["winner"]
        ]
        best = verdict["winner_stat"]
        reaching = [r["config"] for r in rows if r[verdict["metric"]]["max"] >= best["min"]]
        assert sorted(verdict["overlapping"]) == sorted(reaching)
        assert verdict["within_noise"] == bool(reaching)


def test_client_ttft_agrees_with_server_prompt_time(bench: Bench) -> None:
    for row in bench.data["results"]:
        for sample in row["samples"]:
            prompt_s = sample["prompt_ms"] / 1000
            one_token_s = sample["predicted_ms"] / sample["predicted_n"] / 1000
            # the first token follows the prompt: one token's decode plus the HTTP round trip
            assert prompt_s <= sample["ttft_s"] <= prompt_s + 2 * one_token_s + 0.5, sample


def test_memory_and_what_fit_chose(bench: Bench) -> None:
    budget = bench.data["budget_bytes"]
    assert budget == TARGET_MIB * 1024**2
    assert bench.data["probe"] == "llama.cpp log (RPC0 buffers)"
    for name in ("plan", "cpu-moe", "layers"):
        config = bench.config(name)
        assert 0 < config["peak_device_bytes"] <= budget, config
        assert abs(config["peak_device_bytes"] - config["predicted_bytes"]) < 0.05 * budget
    assert bench.config("cpu-moe")["peak_device_bytes"] < bench.config("plan")["peak_device_bytes"]
    # --fit's memory is measured as the others' (a device without a figure would say why)
    assert 0 < bench.config("fit")["peak_device_bytes"] <= budget
    assert all(bench.config(n)["memory_note"] is None for n in ("plan", "fit", "cpu-moe"))
    fit = bench.config("fit")["fit"]
    assert fit["status"] == "fitted" and fit["offloaded"] == "9/9"
    assert fit["devices"][0]["device"].startswith("RPC0") and fit["devices"][0]["overflowing"] > 0
    assert fit["target_mib"] is not None


def test_result_is_kept_and_reported(bench: Bench) -> None:
    kept = list((bench.home / "bench").glob("*-qwen3moe.json"))
    assert len(kept) == 1 and kept[0].read_text() == bench.out.read_text()
    shown = moetune("report", str(bench.out))
    assert shown.returncode == 0, shown.stderr
    assert "decode tok/s (median) against depth" in shown.stdout
    # a series per configuration measured, each named in the legend beside its mark
    chart = shown.stdout.split("decode tok/s (median) against depth", 1)[1]
    chart = chart.split(FORECAST_CHART, 1)[0]
    measured = {r["config"] for r in bench.data["results"]}
    assert all(re.search(rf"(\S)\1 {re.escape(name)}(\s|$)", chart) for name in measured), chart


FORECAST_CHART = "decode tok/s: measured against forecast"


def test_forecast_beside_each_measurement(bench: Bench) -> None:
    """Each placed configuration's rows forecast out of sample: calibrated on the other
    configurations' points (or uncalibrated where they disagree beyond the noise bound);
    llama.cpp's --fit has no placement to forecast."""
    rows = bench.data["forecast"]["rows"]
    assert {(r["config"], r["depth"]) for r in rows} == {
        (r["config"], r["depth"]) for r in bench.data["results"]
    }
    for row in rows:
        if row["config"] == "fit":
            assert row["decode_tps"] is None and "--fit" in row["note"]
            continue
        # calibrated on the other configurations' points, or those points refused as too
        # noisy (core/noise.py: a busy rig; the forecast then stays uncalibrated, and says so)
        calibration = row["calibration"]
        assert calibration["points"] >= 2 or calibration.get("refused_points", 0) >= 2, row
        assert row["decode_tps"] > 0 and row["decode_error"] >= 0, row
        assert row["prefill_tps"] > 0 and row["prefill_error"] >= 0, row
    shown = moetune("report", str(bench.out))
    assert "forecast beside measured" in shown.stdout
    chart = shown.stdout.split(FORECAST_CHART, 1)[1]
    assert "median error" in chart and "forecast tok/s" in chart and "measured = forecast" in chart


def test_measurements_are_kept_as_speed_points(bench: Bench) -> None:
    """Each configuration and depth: a prompt point and a generation point, with the
    placement launched, the devices and the saved result they came from."""
    (kept,) = (bench.home / "speed").glob("*.json")
    points = json.loads(kept.read_text())["points"]
    assert len(points) == 2 * len(bench.data["results"])
    plan = [p for p in points if p["source"]["config"] == "plan"]
    assert f"--n-cpu-moe {plan[0]['placement']['n_cpu_moe']}" == bench.config("plan")["description"]
    assert {p["kind"] for p in plan} == {"prompt", "generation"}
    for point in points:
        assert point["machine"]["backends"] == ["RPC"] and point["machine"]["devices"] == ["RPC0"]
        assert point["machine"]["gpu_info"].startswith("127.0.0.1:")
        assert point["tps"] > 0 and point["source"]["tool"] == "moetune bench"
        assert Path(point["source"]["file"]).parent == bench.home / "bench"


def test_ctx_max_is_the_largest_context_that_fits(model: Path, rpc: str) -> None:
    """`--ctx max` (once a pydantic error): the planner's largest context, capped at the
    model's training context (4096 here), parsed by the one --ctx parser."""
    done = moetune(
        "bench",
        str(model),
        "--ctx",
        "max",
        "--configs",
        "plan",
        "--depths",
        "0",
        "--repeats",
        "1",
        "--n-predict",
        "4",
        "--target-vram",
        "60M",
        "--overhead",
        "0",
        "--no-save",
        "--json",
        "--",
        "--rpc",
        rpc,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_ctx"] == 4096
    # it says that the training context stopped it, not the budget, and how to go past it
    said = " ".join(done.stderr.split())
    assert "--ctx max stopped at the training context, 4096 tokens" in said, done.stderr
    assert "give --ctx N above it" in said


def test_server_url_measures_without_launching(model: Path) -> None:
    with running_server(model, "-c", "512") as server:
        done = moetune(
            "bench",
            "--server-url",
            server.url,
            "--endpoint",
            "completion",
            "--depths",
            "0,32,4096",
            "--repeats",
            "1",
            "--n-predict",
            "4",
            "--json",
            "--no-save",
            "--name",
            "mine",
        )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["server_url"] == server.url and data["model"] == str(model)
    assert [c["name"] for c in data["configs"]] == ["mine"] and data["configs"][0]["args"] == []
    assert data["depths"] == [1, 32, 512 - 4 - 1]  # 0 -> one token; 4096 capped by the context
    for row in data["results"]:
        (sample,) = row["samples"]
        assert (sample["prompt_n"], sample["predicted_n"]) == (row["depth"], 4)
    assert "saved" not in done.stderr


def test_server_url_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = moetune("bench", "--server-url", f"http://127.0.0.1:{port}", "--no-save")
    assert done.returncode == ExitCode.SERVER_FAILED, done.stderr
    assert "nothing answers at" in done.stderr


def test_sigterm_mid_bench_leaves_no_server(model: Path, rpc: str, tmp_path: Path) -> None:
    proc = start_moetune(
        "bench",
        str(model),
        "--ctx",
        str(CTX),
        "--depths",
        "0,700",
        "--repeats",
        "50",
        "--n-predict",
        "16",
        "--no-save",
        "--",
        "--rpc",
        rpc,
    )
    servers = wait_for_servers(proc.pid)
    time.sleep(1.5)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    _gone, alive = psutil.wait_procs(servers, timeout=15)
    assert not alive, alive


def test_an_image_with_every_request(model: Path, rpc: str, tmp_path: Path) -> None:
    """bench --mmproj --image: each request carries the image, so its prompt holds the
    image's tokens too (and TTFT includes encoding it); the result names the image."""
    from support.projector_factory import png_bytes, write_projector

    mmproj = write_projector(tmp_path / "mmproj.gguf")
    image = tmp_path / "cat.png"
    image.write_bytes(png_bytes(64, 48))
    common = (
        "--configs",
        "plan",
        "--depths",
        "64",
        "--repeats",
        "1",
        "--n-predict",
        "4",
        "--ctx",
        "2048",
        "--target-vram",
        "80M",
        "--overhead",
        "0",
        "--no-save",
        "--json",
        "--mmproj",
        str(mmproj),
    )
    runs = [
        moetune("bench", str(model), *common, *with_image, "--", "--rpc", rpc)
        for with_image in ((), ("--image", str(image)))
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr
    plain, pictured = (json.loads(done.stdout) for done in runs)
    assert plain["image"] is None and pictured["image"] == "cat.png"
    text_only = plain["results"][0]["samples"][0]["prompt_n"]
    assert pictured["results"][0]["samples"][0]["prompt_n"] > text_only + 16


def test_each_configuration_at_each_ubatch(model: Path, rpc: str, tmp_path: Path) -> None:
    """--ubatch 512,1024: the plan launched at each, planned again there (a larger compute
    buffer), with -ub on its command; its speed points carry the ubatch."""
    home = tmp_path / "home"
    done = moetune(
        "bench",
        str(model),
        "--configs",
        "plan",
        "--ubatch",
        "512,1024",
        "--ctx",
        "2048",
        "--depths",
        "1500",
        "--repeats",
        "1",
        "--n-predict",
        "4",
        "--target-vram",
        "40M",
        "--overhead",
        "0",
        "--json",
        "--",
        "--rpc",
        rpc,
        home=home,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    configs = {c["name"]: c for c in data["configs"]}
    assert sorted(configs) == ["plan-ub1024", "plan-ub512"]
    for ub in (512, 1024):
        config = configs[f"plan-ub{ub}"]
        assert config["status"] == "ok"
        assert config["args"][config["args"].index("-ub") + 1] == str(ub)
    assert {r["config"] for r in data["results"]} == set(configs)
    (kept,) = (home / "speed").glob("*.json")
    points = json.loads(kept.read_text())["points"]
    assert {(p["source"]["config"], p["n_ubatch"]) for p in points} == {
        ("plan-ub512", 512),
        ("plan-ub1024", 1024),
    }


# --- numbers that hold still: one configuration measured again -------------------------------

# both at least 6 requests: 3 in a row agree within 10 % on a quiet moment of the shared
# cores, and then miss how far a second launch a few seconds later lands
SAME = ("--ctx", str(CTX), "--target-vram", f"{TARGET_MIB}M", "--overhead", "0", "--repeats", "6")
# what run times at each launch that fits (jobs/run.Fill): a 64-token prompt, 64 generated
RUN_SHAPE = ("--endpoint", "completion", "--depths", "64", "--n-predict", "64")
# one thread: on the rig's 2 shared cores, llama-server's default (a thread per core) loses
# its threads to any other process between two barriers, and decode falls by 2-8x at random
SERVER = ("-t", "1")


@pytest.fixture(scope="module")
def again(model: Path, rpc: str, tmp_path_factory: pytest.TempPathFactory) -> Again:
    """`run` once, then `bench --configs plan` twice at run's shape, in one MOETUNE_HOME.

    The shared cores' load can change between one launch and the next (a build starting on
    the other core halves every speed for a minute), which no number of requests within a
    launch sees: where the three disagree, all three are measured again, in a new
    MOETUNE_HOME, up to three times in all, and the tests judge the last measurement (as a
    user would bench again). Three disagreeing measurements in a row still fail them: CI once
    saw two in a row (run 453-600 tok/s, bench 183-347, on 2 cores shared with other jobs)."""
    found = _measure_again(model, rpc, tmp_path_factory)
    for _ in range(2):
        if found.agrees():
            break
        found = _measure_again(model, rpc, tmp_path_factory)
    return found


def _measure_again(model: Path, rpc: str, tmp_path_factory: pytest.TempPathFactory) -> Again:
    home = tmp_path_factory.mktemp("again")
    ran = moetune("run", str(model), *SAME, "--json", "--", "--rpc", rpc, *SERVER, home=home)
    assert ran.returncode == 0, ran.stderr
    benches = []
    for _ in range(2):
        done = moetune(
            "bench",
            str(model),
            "--configs",
            "plan",
            *RUN_SHAPE,
            *SAME,
            "--json",
            "--no-save",
            "--",
            "--rpc",
            rpc,
            *SERVER,
            home=home,
        )
        assert done.returncode == 0, done.stderr
        benches.append(json.loads(done.stdout))
    return Again(json.loads(ran.stdout), benches, home)


class Again:
    def __init__(self, run: dict[str, Any], benches: list[dict[str, Any]], home: Path) -> None:
        self.run = run
        self.benches = benches
        self.home = home

    def saved(self) -> dict[str, Any]:
        """The decode range run saved in the tuned profile."""
        (saved,) = (self.home / "profiles").glob("*.json")
        measured: dict[str, Any] = json.loads(saved.read_text())["measured"]
        return measured

    def agrees(self) -> bool:
        """Both benches' ranges overlap, and run's saved range overlaps each."""
        first, second = self.rows()
        saved = self.saved()
        ran = {"min": saved["decode_tps_min"], "max": saved["decode_tps_max"]}
        return all(
            _overlap(first[key], second[key]) for key in ("decode_tps", "prefill_tps")
        ) and all(_overlap(ran, row["decode_tps"]) for row in (first, second))

    def rows(self) -> list[dict[str, Any]]:
        """Each bench's one row: plan at depth 64."""
        found = []
        for bench in self.benches:
            (row,) = bench["results"]
            assert (row["config"], row["depth"]) == ("plan", 64)
            found.append(row)
        return found


def _overlap(one: dict[str, Any], two: dict[str, Any]) -> bool:
    """Two min-max ranges overlap: bench's own verdict would name no winner between them."""
    return bool(one["min"] <= two["max"] and two["min"] <= one["max"])


def test_bench_twice_names_no_winner_between_the_two(again: Again) -> None:
    """The same configuration measured twice agrees within the spreads: their ranges overlap,
    so bench's own verdict, given both, is noisy in decode and in prefill.

    On the rig's 2 cores shared with other sessions' builds (load average 3-7), two launches
    of this configuration seconds apart measured 640 (620-650) and 395 (177-631) tok/s: the
    cores are that unsteady from one launch to the next, hence at least 6 repeats a side."""
    first, second = again.rows()
    both = [first, {**second, "config": "plan-again"}]
    rows = [res.DepthResult.model_validate(row) for row in both]
    for verdict in res.verdicts(rows):
        assert verdict.within_noise, verdict
    for key in ("decode_tps", "prefill_tps"):
        assert _overlap(first[key], second[key]), (key, first[key], second[key])


def test_run_saved_speed_agrees_with_bench_within_the_spreads(again: Again) -> None:
    """run's saved decode speed (the profile's: the server's timings, as bench's) and bench's
    for the same --n-cpu-moe agree within their spreads: run's saved range and bench's
    overlap, each time (the stricter "run's median inside bench's range" failed 3 tries of 7
    on the rig under other sessions' load)."""
    best = again.run["best"]
    measured = again.saved()
    assert measured["decode_tps"] == best["decode_tps"]
    assert measured["repeats"] >= 6
    ran = {"min": measured["decode_tps_min"], "max": measured["decode_tps_max"]}
    assert ran["min"] <= measured["decode_tps"] <= ran["max"]
    for bench, row in zip(again.benches, again.rows(), strict=True):
        (plan,) = bench["configs"]
        assert plan["description"] == f"--n-cpu-moe {best['n_cpu_moe']}"
        assert _overlap(ran, row["decode_tps"]), (measured, row["decode_tps"])
