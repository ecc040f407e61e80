"""The architecture matrix: one tiny real model per MoE architecture (tests/archfix.py),
loaded by llama-server with its offloaded blocks on a ggml-rpc-server device, and projected by
llama-fit-params; moetune's estimate must match both term by term.

Bounds (moetune issue 15): weights to 0.01 MiB, KV and recurrent state within 1 %, compute
within 10 % or 64 MiB. Every architecture runs at ``-ngl 99 --n-cpu-moe 1 -c 4096`` with a
q8_0 cache and flash attention on, so each case takes a second or two.
"""

from __future__ import annotations

import subprocess

import pytest

from moetune.llamacpp.log import parse_buffers, parse_projection, total_mib
from moetune.units import MIB

from support.archfix import flags, matrix, predict
from support.factory import ModelFactory
from support.llama import bin_path, running_server

MATRIX = matrix()
WEIGHTS_MIB = 0.01
KV_SHARE = 0.01
COMPUTE_SHARE, COMPUTE_MIB = 0.10, 64.0


def compute_ok(predicted_bytes: int, logged_mib: float) -> bool:
    return abs(predicted_bytes / MIB - logged_mib) <= max(COMPUTE_SHARE * logged_mib, COMPUTE_MIB)


def kv_ok(predicted_bytes: int, logged_mib: float) -> bool:
    return abs(predicted_bytes / MIB - logged_mib) <= max(KV_SHARE * logged_mib, 0.005)


@pytest.mark.parametrize("arch", list(MATRIX))
def test_matches_llama_server(model_factory: ModelFactory, rpc: str, arch: str) -> None:
    model = model_factory.written(arch, MATRIX[arch].write)
    predicted = predict(model, MATRIX[arch])
    with running_server(model, *flags(MATRIX[arch], rpc), "--fit", "off") as server:
        lines = parse_buffers(server.log_text())
    figures = {
        "model": (predicted.gpu_weights_bytes, total_mib(lines, "model", "RPC0")),
        "kv": (
            predicted.gpu_kv_bytes,
            total_mib(lines, "KV", "RPC0") + total_mib(lines, "RS", "RPC0"),
        ),
        "compute": (predicted.gpu_compute_bytes, total_mib(lines, "compute", "RPC0")),
        "host compute": (predicted.host_compute_bytes, total_mib(lines, "compute", "CPU")),
    }
    shown = {k: (round(p / MIB, 3), m) for k, (p, m) in figures.items()}
    print(f"\n{arch} server (predicted MiB, logged MiB): {shown}")
    assert abs(figures["model"][0] / MIB - figures["model"][1]) <= WEIGHTS_MIB, shown
    assert kv_ok(*figures["kv"]), shown
    assert compute_ok(*figures["compute"]), shown
    assert compute_ok(*figures["host compute"]), shown


@pytest.mark.parametrize("arch", list(MATRIX))
def test_matches_llama_fit_params(model_factory: ModelFactory, rpc: str, arch: str) -> None:
    model = model_factory.written(arch, MATRIX[arch].write)
    predicted = predict(model, MATRIX[arch], fit_params=True)
    argv = [
        str(bin_path("llama-fit-params")),
        "-m",
        str(model),
        *flags(MATRIX[arch], rpc),
        "-np",
        "1",
        "-fitp",
        "on",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    device = parse_projection(done.stdout)["RPC0"]
    shown = (
        predicted.gpu_weights_bytes / MIB,
        predicted.gpu_kv_bytes / MIB,
        predicted.gpu_compute_bytes / MIB,
        device,
    )
    print(f"\n{arch} fit-params (predicted model, KV, compute MiB; projection): {shown}")
    # printed as whole MiB, rounded down
    assert int(predicted.gpu_weights_bytes / MIB) == device.model_mib, shown
    kv_bound = 1 + KV_SHARE * device.context_mib
    assert abs(predicted.gpu_kv_bytes / MIB - device.context_mib) < kv_bound, shown
    assert compute_ok(predicted.gpu_compute_bytes, device.compute_mib + 0.5), shown
