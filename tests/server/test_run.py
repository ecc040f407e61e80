"""`moetune run` end to end: real llama-server, ggml-rpc-server on 127.0.0.1 as the device."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from moetune.errors import ExitCode
from moetune.gguf.reader import read_header
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.factory import ModelFactory, write_model
from support.helpers import moetune, start_moetune
from support.llama import running_server, wait_for_servers

CTX = "1024"
COMMON = ["--ctx", CTX, "--overhead", "0", "--cache-type", "q8_0"]


def device_mib(model: Path, rpc: str, *args: str) -> float:
    with running_server(model, *args, "--rpc", rpc) as server:
        lines = parse_buffers(server.log_text())
    return sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))


def sweep(model: Path, rpc: str) -> list[float]:
    """Measured RPC0 peak (MiB) for every N, as moetune's trial launches it."""
    base = ["-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-c", CTX, "--fit", "off"]
    return [device_mib(model, rpc, *base, "--n-cpu-moe", str(n)) for n in range(9)]


@pytest.mark.parametrize("arch", ["qwen3moe", "glm4moe"])
def test_converges_to_the_sweep(model_factory: ModelFactory, rpc: str, arch: str) -> None:
    measured = sweep(model_factory(arch, n_layers=8), rpc)
    assert measured == sorted(measured, reverse=True)
    for n_target in (2, 6):  # targets just above the peak at N=2 and at N=6
        target_mib = (measured[n_target] + measured[n_target - 1]) / 2
        truth = min(n for n, mib in enumerate(measured) if mib <= target_mib)
        result = moetune(
            "run",
            str(model_factory(arch, n_layers=8)),
            "--target-vram",
            f"{target_mib:.3f}M",
            *COMMON,
            "--json",
            "--",
            "--rpc",
            rpc,
        )
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["best"]["n_cpu_moe"] == truth == n_target
        _at_most_three_and_the_ot_form(data)
        assert "llama.cpp log (RPC0 buffers)" in data["probe"]
        command = data["best"]["command"]
        assert command[:3] == ["llama-server", "-m", str(model_factory(arch, n_layers=8))]
        assert (
            device_mib(model_factory(arch, n_layers=8), rpc, *command[3:]) * MIB
            <= data["target_bytes"]
        )


def _at_most_three_and_the_ot_form(data: dict[str, object]) -> None:
    """N converged in at most 3 launches, then at most one launch of the -ot form (where it
    keeps more on the device), which is the best where it fitted."""
    attempts = data["attempts"]
    assert isinstance(attempts, list)
    tried = [a for a in attempts if a["override_tensor"]]
    assert len(attempts) - len(tried) <= 3 and len(tried) <= 1
    best = data["best"]
    assert isinstance(best, dict)
    if tried and tried[0]["status"] == "ok":
        assert best["override_tensor"] == tried[0]["override_tensor"]
        assert "-ot" in best["command"] and "--n-cpu-moe" not in best["command"]


def test_cannot_fit(model_factory: ModelFactory, rpc: str) -> None:
    result = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "5M",
        *COMMON,
        "--",
        "--rpc",
        rpc,
    )
    assert result.returncode == ExitCode.DOES_NOT_FIT, result.stderr
    assert "does not fit" in result.stderr and "Traceback" not in result.stderr


def test_table_names_the_probe(model_factory: ModelFactory, rpc: str) -> None:
    result = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--",
        "--rpc",
        rpc,
    )
    assert result.returncode == 0, result.stderr
    assert "memory: llama.cpp log (RPC0 buffers)" in result.stdout
    assert "best: --n-cpu-moe" in result.stdout


def test_port_in_use(model_factory: ModelFactory, rpc: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = moetune(
            "run",
            str(model_factory("qwen3moe", n_layers=8)),
            "--target-vram",
            "40M",
            *COMMON,
            "--port",
            str(port),
            "--",
            "--rpc",
            rpc,
        )
    assert result.returncode == ExitCode.PORT_IN_USE, result.stderr
    assert str(port) in result.stderr


def one_error_line(result: subprocess.CompletedProcess[str], code: ExitCode) -> str:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("moetune: error: ")
    assert lines[0].endswith(f"[{code.name}, exit {int(code)}]")
    return lines[0]


@pytest.mark.parametrize("command", ["run", "bench"])
def test_header_only_is_refused_before_launch(
    tmp_path: Path, rpc: str, command: str, model_factory: ModelFactory, _moetune_home: Path
) -> None:
    """moetune reads the header and knows the weights are missing: llama-server never starts
    (it would leave a log behind)."""
    model = model_factory("qwen3moe", n_layers=8)
    broken = tmp_path / "header-only.gguf"
    broken.write_bytes(model.read_bytes()[: read_header(model).data_offset])
    result = moetune(command, str(broken), "--target-vram", "40M", *COMMON, "--", "--rpc", rpc)
    line = one_error_line(result, ExitCode.BAD_MODEL)
    assert "no tensor data" in line or "header only" in line, line
    assert not (_moetune_home / "logs").exists()


def test_unreachable_rpc_server_is_one_line(model_factory: ModelFactory) -> None:
    """ggml aborts with a backtrace when --rpc points at nothing: one line, the cause."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--",
        "--rpc",
        f"127.0.0.1:{port}",
    )
    line = one_error_line(result, ExitCode.SERVER_FAILED)
    assert f"(connection refused): Failed to connect to 127.0.0.1:{port}" in line, line
    log = Path(line.split("full log: ", 1)[1].split(")", 1)[0])
    assert "ggml_abort" in log.read_text() or "Failed to connect" in log.read_text()


def test_server_exiting_at_load_is_one_line(
    model_factory: ModelFactory, rpc: str, _moetune_home: Path
) -> None:
    """llama-server refuses a flag given after --: the cause from its log, the log's path."""
    result = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--",
        "--rpc",
        rpc,
        "--no-such-llama-flag",
    )
    line = one_error_line(result, ExitCode.SERVER_FAILED)
    assert "llama-server exited with 1 (invalid argument)" in line, line
    assert "--no-such-llama-flag" in line
    log = Path(line.split("full log: ", 1)[1].split(")", 1)[0])
    assert log.parent == _moetune_home / "logs" and log.is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--target-vrm", "40M"],
        ["run", "--vram", "16G"],
        ["run", "--bogus"],
        ["bench", "--bogus"],
        ["bench", "--target-vrm", "40M"],
    ],
)
def test_unknown_flags_before_the_separator(
    tmp_path: Path, model_factory: ModelFactory, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 with a did-you-mean, and no llama-server starts (this one would leave a mark)."""
    mark = tmp_path / "started"
    server = tmp_path / "llama-server"
    server.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    server.chmod(0o755)
    monkeypatch.setenv("MOETUNE_LLAMA_SERVER", str(server))
    command, *flags = args
    result = moetune(
        command, str(model_factory("qwen3moe", n_layers=8)), *flags, "--", "--rpc", "127.0.0.1:1"
    )
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert f"No such option: {flags[0]}" in result.stderr
    if flags[0] == "--target-vrm":
        assert "--target-vram" in result.stderr  # the did-you-mean
    assert not mark.exists()


def test_speeds_carry_their_range(model_factory: ModelFactory, rpc: str) -> None:
    """The winner's decode speed is the median of the timed requests, with min and max: at
    least 3, more until they agree within 10 % (at most 10)."""
    result = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--no-save",
        "--json",
        "--",
        "--rpc",
        rpc,
    )
    assert result.returncode == 0, result.stderr
    best = json.loads(result.stdout)["best"]
    assert 3 <= best["repeats"] <= 10
    assert best["decode_tps_min"] <= best["decode_tps"] <= best["decode_tps_max"]
    if best["repeats"] < 10:  # stopped early: they agreed
        spread = (best["decode_tps_max"] - best["decode_tps_min"]) / best["decode_tps"]
        assert spread <= 0.10
    assert isinstance(best["noisy"], bool)
    # every launch's speeds are kept as points: the fill's prompt, the timed generation
    launches = json.loads(result.stdout)["attempts"]
    kept = [
        json.loads(path.read_text())["points"]
        for path in (Path(os.environ["MOETUNE_HOME"]) / "speed").glob("*.json")
    ]
    assert len(kept) == len([a for a in launches if a["status"] != "oom"])  # those that filled
    fitted = {a["n_cpu_moe"] for a in launches if a["status"] == "ok"}
    timed = [p for points in kept for p in points if p["kind"] == "generation"]
    assert {p["placement"]["n_cpu_moe"] for p in timed} == fitted
    assert all(p["n_gen"] == 64 and p["source"]["tool"] == "moetune run" for p in timed)
    assert all(3 <= len(p["samples_tps"]) <= 10 for p in timed)
    fills = [p for points in kept for p in points if p["kind"] == "prompt"]
    assert len(fills) == len(kept) and all(p["n_prompt"] > 64 for p in fills)
    text = moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--no-save",
        "--",
        "--rpc",
        rpc,
    )
    assert re.search(
        r"best: --n-cpu-moe \d+, decode [\d.]+ tok/s \([\d.]+-[\d.]+ over \d+", text.stdout
    ), text.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_no_server(
    model_factory: ModelFactory, rpc: str, sig: signal.Signals
) -> None:
    proc = start_moetune(
        "run",
        str(model_factory("glm4moe", n_layers=8)),
        "--target-vram",
        "40M",
        "--ctx",
        "8192",
        "--overhead",
        "0",
        "--",
        "--rpc",
        rpc,
    )
    servers = wait_for_servers(proc.pid)
    time.sleep(1.0)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    _gone, alive = psutil.wait_procs(servers, timeout=15)
    assert not alive, alive
    # the signal is acknowledged by its handler, before the servers are stopped
    stderr = proc.stderr.read() if proc.stderr else ""
    ack = stderr.find("moetune: interrupted, stopping llama-server...")
    assert 0 <= ack < stderr.find("moetune: error: interrupted [INTERRUPTED, exit 130]"), stderr


def test_keep_serves_the_best_until_ctrl_c(model_factory: ModelFactory, rpc: str) -> None:
    proc = start_moetune(
        "run",
        str(model_factory("qwen3moe", n_layers=8)),
        "--target-vram",
        "40M",
        *COMMON,
        "--keep",
        "--",
        "--rpc",
        rpc,
    )
    try:
        _serves_then_stops(proc)
    finally:
        if proc.poll() is None:  # a failed assertion must not leave the server behind
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)


def _serves_then_stops(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("serving at "):
            url = line.split()[2]
            break
    else:
        pytest.fail("moetune run --keep never served")
    servers = wait_for_servers(proc.pid)
    assert len(servers) == 1
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    _gone, alive = psutil.wait_procs(servers, timeout=15)
    assert not alive


def test_converges_with_a_projector_and_a_draft(
    model_factory: ModelFactory, rpc: str, tmp_path: Path
) -> None:
    """run measures with the projector and the draft loaded: the truth is the sweep of the
    same launches (clip's weights and compute and the draft's buffers on the device)."""
    from support.projector_factory import write_projector

    mmproj = write_projector(tmp_path / "mmproj.gguf", image_size=448)
    draft = write_model(tmp_path / "draft.gguf", "qwen3moe", n_layers=2, n_embd=128, seed=1)
    model = model_factory("qwen3moe", n_layers=8)
    extra = ["--mmproj", str(mmproj), "-md", str(draft), "--spec-type", "draft-simple"]
    base = ["-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-c", CTX, "--fit", "off"]
    measured = [device_mib(model, rpc, *base, "--n-cpu-moe", str(n), *extra) for n in (2, 3)]
    plain = device_mib(model, rpc, *base, "--n-cpu-moe", "3")
    assert measured[1] > plain + 1  # the companions are on the device
    target_mib = (measured[0] + measured[1]) / 2
    result = moetune(
        "run",
        str(model),
        "--target-vram",
        f"{target_mib:.3f}M",
        *COMMON,
        "--mmproj",
        str(mmproj),
        "--draft",
        str(draft),
        "--json",
        "--",
        "--rpc",
        rpc,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["best"]["n_cpu_moe"] == 3
    _at_most_three_and_the_ot_form(data)
    # predicted with them: each launch's prediction within 1 MiB of what it measured
    for attempt in data["attempts"]:
        assert abs(attempt["predicted_bytes"] - attempt["measured_bytes"]) < MIB, attempt
    command = data["best"]["command"]
    assert "--mmproj" in command and "-md" in command
    assert device_mib(model, rpc, *command[3:]) * MIB <= data["target_bytes"]


def test_the_environment_does_not_move_the_placement(
    model_factory: ModelFactory, rpc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp applies LLAMA_ARG_* before the command line and -ncmoe/-ot add their rules to
    those the variables set: moetune leaves them out of llama-server's environment (named in
    one warning), and run measures and picks what it does without them."""
    model = str(model_factory("qwen3moe", n_layers=8))
    # N=4 fits 25 MiB here, N=3 does not; each run searches (no profile saved)
    args = (
        "run",
        model,
        "--target-vram",
        "25M",
        *COMMON,
        "--no-save",
        "--json",
        "--",
        "--rpc",
        rpc,
    )
    plain = moetune(*args)
    assert plain.returncode == 0, plain.stderr
    assert "environment" not in plain.stderr
    monkeypatch.setenv("LLAMA_ARG_N_CPU_MOE", "8")  # every expert on the CPU
    monkeypatch.setenv("LLAMA_ARG_OVERRIDE_TENSOR", "blk\\.0\\.=CPU")
    monkeypatch.setenv("LLAMA_ARG_ALIAS", "passes")  # changes nothing: left in
    moved = moetune(*args)
    assert moved.returncode == 0, moved.stderr
    warned = [line for line in moved.stderr.splitlines() if "environment" in line]
    assert len(warned) == 1 and warned[0].startswith(
        "warning: ignoring LLAMA_ARG_N_CPU_MOE, LLAMA_ARG_OVERRIDE_TENSOR from the environment"
    ), moved.stderr
    first, second = json.loads(plain.stdout), json.loads(moved.stdout)
    assert 0 < first["best"]["n_cpu_moe"] < 8  # the variable would have moved it
    assert second["best"]["n_cpu_moe"] == first["best"]["n_cpu_moe"]
    assert second["best"]["command"] == first["best"]["command"]
    measured = [[a["measured_bytes"] for a in d["attempts"]] for d in (first, second)]
    assert measured[0] == measured[1]
