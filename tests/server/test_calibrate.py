"""`moetune calibrate` on what the test rig's real llama-bench writes (``-o json`` and
``-o jsonl``), on a tiny MoE model with ggml-rpc-server on 127.0.0.1 as the device."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from moetune.core.noise import LOO_ERROR_BOUND
from moetune.errors import ExitCode

from support.factory import ModelFactory
from support.helpers import assert_one_line_error, cli, moetune, start_moetune
from support.llama import bin_path, rpc_server, wait_for_servers

UBATCHES = (32, 64)
N_CPU_MOE = 2


@pytest.fixture(scope="module")
def model(model_factory: ModelFactory) -> Path:
    return model_factory("qwen3moe", n_layers=8)


def llama_bench(model: Path, rpc: str, output: str, out: Path) -> Path:
    args = [str(bin_path("llama-bench")), "-m", str(model), "--rpc", rpc]
    args += ["-p", "32", "-n", "8", "-r", "1", "-t", "2", "--n-cpu-moe", str(N_CPU_MOE)]
    args += ["-ub", ",".join(map(str, UBATCHES)), "-o", output]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out.write_text(done.stdout)
    return out


@pytest.fixture(scope="module")
def written(model: Path, rpc: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llama-bench")
    return {
        kind: llama_bench(model, rpc, kind, root / f"bench.{kind}") for kind in ("json", "jsonl")
    }


def imported(*paths: Path) -> dict[str, Any]:
    code, out, err = cli("calibrate", *map(str, paths), "--json")
    assert code == 0, out + err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.parametrize("kind", ["json", "jsonl"])
def test_the_rigs_llama_bench(written: dict[str, Path], model: Path, kind: str) -> None:
    """Each test is a point: pp32 and tg8 at each ubatch, --n-cpu-moe 2, 2 threads, on RPC;
    the model known by moetune's identity (the file is here)."""
    data = imported(written[kind])
    (found,) = data["files"]
    points = found["points"]
    tests = sorted((p["n_ubatch"], p["kind"], p["n_prompt"], p["n_gen"]) for p in points)
    assert tests == sorted(
        (ub, kind, n_p, n_g)
        for ub in UBATCHES
        for kind, n_p, n_g in (("prompt", 32, 0), ("generation", 0, 8))
    )
    rows = (
        json.loads(written[kind].read_text())
        if kind == "json"
        else [json.loads(line) for line in written[kind].read_text().splitlines() if line]
    )
    for point, row in zip(points, rows, strict=True):
        assert point["tps"] == row["avg_ts"] and point["samples_tps"] == row["samples_ts"]
        assert point["placement"]["n_cpu_moe"] == N_CPU_MOE and point["n_threads"] == 2
        assert point["n_depth"] == 0 and point["tps"] > 0
        assert "RPC" in point["machine"]["backends"]
        assert point["model"]["file_name"] == model.name
        assert point["model"]["header_sha256"] is not None
        assert point["model"]["model_bytes"] == row["model_size"]
    assert found["already_saved"] is False


def test_the_same_run_imported_twice(written: dict[str, Path]) -> None:
    first = imported(written["json"], written["jsonl"])
    assert first["total_points"] == 8
    again = imported(written["json"])
    assert again["files"][0]["already_saved"] and again["total_points"] == 8


# --- calibrate --measure: moetune runs llama-bench itself ------------------------------------

MEASURE = ("-p", "64", "-n", "4", "--repetitions", "1", "--threads", "2", "--ubatch", "32,64")


def measure(model: Path, rpc: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    """`calibrate --measure` on the rig: its exit code, its document and its stderr."""
    code, out, err = cli(
        "calibrate",
        "--measure",
        str(model),
        *MEASURE,
        "--target-vram",
        "40M",
        "--ctx",
        "8192",
        "--overhead",
        "0",
        "--rpc",
        rpc,
        *extra,
        "--json",
    )
    data: dict[str, Any] = json.loads(out)
    return code, data, err


def kept(code: int, err: str) -> bool:
    """Whether `calibrate --measure` kept its points: exit 0; else it refused them for noise
    (this shared rig busy: CHECK_FAILED, nothing kept; the load test below checks it)."""
    if code == 0:
        return True
    assert code == ExitCode.CHECK_FAILED and "the machine was too noisy" in err, err
    return False


def test_measure_runs_llama_bench_at_placements_that_fit(model: Path, rpc: str) -> None:
    """Two placements (the plan's smallest N and every expert on the CPU) at each ubatch, each
    a pp64 and a tg4 test, and both placements at the smallest ubatch at half the threads
    (1): twelve points kept, with the rig's RPC device; measuring again replaces them.
    Where the rig was too noisy the points are measured, shown and not kept."""
    code, first, err = measure(model, rpc)
    (found,) = first["files"]
    points = [p for p in found["points"] if p["n_threads"] != 1]
    one = [p for p in found["points"] if p["n_threads"] == 1]
    smallest_n = min(p["placement"]["n_cpu_moe"] for p in points)
    assert sorted((p["placement"]["n_cpu_moe"], p["n_ubatch"], p["kind"]) for p in one) == [
        (smallest_n, 32, "generation"),
        (smallest_n, 32, "prompt"),
        (8, 32, "generation"),
        (8, 32, "prompt"),
    ]
    assert found["tool"] == "llama-bench" and Path(found["file"]).is_file()
    by_ub: dict[int, set[int]] = {}
    for p in points:
        by_ub.setdefault(p["n_ubatch"], set()).add(p["placement"]["n_cpu_moe"])
    assert sorted(by_ub) == [32, 64]
    for ns in by_ub.values():  # the smallest N that fits 40M (0 needs more), and all 8
        smallest = min(ns)
        assert 0 < smallest < 8 and sorted(ns) == [smallest, 8]
    assert sorted((p["kind"], p["n_prompt"], p["n_gen"]) for p in points) == sorted(
        [("prompt", 64, 0), ("generation", 0, 4)] * 4
    )
    for point in points:
        assert point["n_threads"] == 2 and point["tps"] > 0 and point["n_depth"] == 0
        assert point["type_k"] == "q8_0" and point["flash_attn"] == "on"
        assert "RPC" in point["machine"]["backends"]
        assert point["model"]["header_sha256"] is not None
    if not kept(code, err):
        assert first["total_points"] == 0 and found["saved_path"] is None
        return
    assert first["total_points"] == 12
    code, again, err = measure(model, rpc)
    assert again["total_points"] == 12  # the same measure replaced, not added (or refused)
    if kept(code, err):
        assert again["files"][0]["saved_path"] != found["saved_path"]
        assert not Path(found["saved_path"]).exists()


def test_measure_without_llama_bench_is_one_line(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server found, no llama-bench beside it nor on PATH: one line, nothing run."""
    (tmp_path / "bin").mkdir()
    server = tmp_path / "bin" / "llama-server"
    server.symlink_to(bin_path("llama-server"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = moetune("calibrate", "--measure", str(model), "--server", str(server))
    line = assert_one_line_error(result, ExitCode.SERVER_NOT_FOUND)
    assert f"llama-bench not found beside {server} or on PATH" in line


@pytest.fixture
def own_rpc() -> Iterator[str]:
    """An RPC server of the test's own: a llama-bench killed mid-run may leave the server it
    talked to busy with the dead connection, so the module's shared one is not used."""
    with rpc_server() as endpoint:
        yield endpoint


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_llama_bench(model: Path, own_rpc: str, sig: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) while llama-bench runs: it is stopped, moetune exits 130."""
    rpc = own_rpc
    proc = start_moetune(
        "calibrate",
        "--measure",
        str(model),
        "-p",
        "512",
        "-n",
        "512",
        "-r",
        "100",
        "--ubatch",
        "64",
        "--target-vram",
        "40M",
        "--overhead",
        "0",
        "--rpc",
        rpc,
    )
    try:
        benches = wait_for_servers(proc.pid, name="llama-bench")
        time.sleep(0.5)
        assert all(b.is_running() for b in benches)
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED
    _gone, alive = psutil.wait_procs(benches, timeout=15)
    assert not alive, alive
    stderr = proc.stderr.read() if proc.stderr else ""
    assert "moetune: interrupted, stopping llama-bench..." in stderr


@pytest.fixture
def cpu_load() -> Iterator[None]:
    """Two busy loops beside the test, one per core of this 2-core rig (a second process loading
    the CPU, as in issue 39)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait(timeout=30)


def test_measure_on_a_loaded_machine_keeps_no_fit_beyond_the_bound(
    model: Path, rpc: str, cpu_load: None
) -> None:
    """With the CPU loaded, `calibrate --measure` either keeps its points with a fit whose
    leave-one-out error is within the bound (exit 0, the error shown), or refuses them for
    noise (CHECK_FAILED, one line, a hint) and keeps nothing: $MOETUNE_HOME/speed unchanged.
    Repetitions 3: each test's samples are checked (a noisy run is measured again once)."""
    speed = Path(os.environ["MOETUNE_HOME"]) / "speed"
    before = sorted(speed.glob("*.json")) if speed.is_dir() else []
    code, data, err = measure(model, rpc, "--repetitions", "3")
    fit = data["fit"]
    if code == 0:
        assert fit is not None and fit["within"] and fit["bound"] == LOO_ERROR_BOUND
        assert fit["median_error"] is None or fit["median_error"] <= LOO_ERROR_BOUND
        assert data["refused"] is None and data["files"][0]["saved_path"] is not None
        assert sorted(speed.glob("*.json")) != before
        return
    assert code == ExitCode.CHECK_FAILED, err
    assert "Traceback" not in err
    (line,) = [text for text in err.splitlines() if text.startswith("moetune: error:")]
    assert line.startswith("moetune: error: not calibrated: the machine was too noisy (")
    assert data["error"]["message"] == data["refused"]
    assert data["error"]["hint"].startswith("close other programs")
    assert data["files"][0]["saved_path"] is None
    assert fit is None or not fit["within"]
    assert (sorted(speed.glob("*.json")) if speed.is_dir() else []) == before
