"""`moetune run` end to end: real llama-server, ggml-rpc-server on 127.0.0.1 as the device."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from moetune.errors import ExitCode
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from factory import write_model
from helpers import moetune, start_moetune
from llama import running_server, wait_for_servers

pytestmark = pytest.mark.server

CTX = "1024"
COMMON = ["--ctx", CTX, "--overhead", "0", "--cache-type", "q8_0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("run")
    return {a: write_model(root / f"{a}.gguf", a, n_layers=8) for a in ("qwen3moe", "glm4moe")}


def device_mib(model: Path, rpc: str, *args: str) -> float:
    with running_server(model, *args, "--rpc", rpc) as server:
        lines = parse_buffers(server.log_text())
    return sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))


def sweep(model: Path, rpc: str) -> list[float]:
    """Measured RPC0 peak (MiB) for every N, as moetune's trial launches it."""
    base = ["-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-c", CTX, "--fit", "off"]
    return [device_mib(model, rpc, *base, "--n-cpu-moe", str(n)) for n in range(9)]


@pytest.mark.parametrize("arch", ["qwen3moe", "glm4moe"])
def test_converges_to_the_sweep(models: dict[str, Path], rpc: str, arch: str) -> None:
    measured = sweep(models[arch], rpc)
    assert measured == sorted(measured, reverse=True)
    for n_target in (2, 6):  # targets just above the peak at N=2 and at N=6
        target_mib = (measured[n_target] + measured[n_target - 1]) / 2
        truth = min(n for n, mib in enumerate(measured) if mib <= target_mib)
        result = moetune("run", str(models[arch]), "--target-vram", f"{target_mib:.3f}M",
                         *COMMON, "--json", "--", "--rpc", rpc)  # fmt: skip
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["best"]["n_cpu_moe"] == truth == n_target
        assert data["launches"] <= 3
        assert "llama.cpp log (RPC0 buffers)" in data["probe"]
        command = data["best"]["command"]
        assert command[:3] == ["llama-server", "-m", str(models[arch])]
        assert device_mib(models[arch], rpc, *command[3:]) * MIB <= data["target_bytes"]


def test_cannot_fit(models: dict[str, Path], rpc: str) -> None:
    result = moetune("run", str(models["qwen3moe"]), "--target-vram", "5M", *COMMON, "--",
                     "--rpc", rpc)  # fmt: skip
    assert result.returncode == ExitCode.DOES_NOT_FIT, result.stderr
    assert "does not fit" in result.stderr and "Traceback" not in result.stderr


def test_table_names_the_probe(models: dict[str, Path], rpc: str) -> None:
    result = moetune("run", str(models["qwen3moe"]), "--target-vram", "40M", *COMMON, "--",
                     "--rpc", rpc)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "memory: llama.cpp log (RPC0 buffers)" in result.stdout
    assert "best: --n-cpu-moe" in result.stdout


def test_port_in_use(models: dict[str, Path], rpc: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = moetune("run", str(models["qwen3moe"]), "--target-vram", "40M", *COMMON,
                         "--port", str(port), "--", "--rpc", rpc)  # fmt: skip
    assert result.returncode == ExitCode.PORT_IN_USE, result.stderr
    assert str(port) in result.stderr


def test_server_dying_at_load_is_reported(tmp_path: Path, rpc: str,
                                          models: dict[str, Path]) -> None:  # fmt: skip
    """A header-only copy: moetune reads it, llama-server cannot load its missing data."""
    data = models["qwen3moe"].read_bytes()
    broken = tmp_path / "header-only.gguf"
    broken.write_bytes(data[: len(data) // 3])
    result = moetune("run", str(broken), "--target-vram", "40M", *COMMON, "--", "--rpc", rpc)
    assert result.returncode == ExitCode.SERVER_FAILED, result.stderr
    assert "Traceback" not in result.stderr
    assert "llama-server exited" in result.stderr and "\n" in result.stderr.strip()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_no_server(models: dict[str, Path], rpc: str,
                                         sig: signal.Signals) -> None:  # fmt: skip
    proc = start_moetune("run", str(models["glm4moe"]), "--target-vram", "40M", "--ctx", "8192",
                         "--overhead", "0", "--", "--rpc", rpc)  # fmt: skip
    servers = wait_for_servers(proc.pid)
    time.sleep(1.0)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    _gone, alive = psutil.wait_procs(servers, timeout=15)
    assert not alive, alive


def test_keep_serves_the_best_until_ctrl_c(models: dict[str, Path], rpc: str) -> None:
    proc = start_moetune("run", str(models["qwen3moe"]), "--target-vram", "40M", *COMMON,
                         "--keep", "--", "--rpc", rpc)  # fmt: skip
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
