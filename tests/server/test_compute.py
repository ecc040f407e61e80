"""Compute-buffer estimates against the real llama-server over a grid of ubatch x context on
several architectures (its ``compute buffer size`` lines), and llama-fit-params' dry run of a
real-size model."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest

from moetune.core.compute.estimate import estimate_compute
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import PRINTED_MIB_TOLERANCE_BYTES, parse_buffers
from moetune.units import MIB

from support.compute import mib
from support.factory import ModelFactory, write_header_only
from support.llama import bin_path, running_server

UBATCHES = (128, 512, 2048)
CONTEXTS = (512, 4096, 16384)
SERVER_ARCHS = ("qwen3moe", "gpt-oss", "deepseek2", "qwen35moe")


def within(predicted: int, printed_mib: float) -> bool:
    """The fidelity bar for tiny models: 10 % of the printed figure, or 1 MiB."""
    return abs(predicted - printed_mib * MIB) <= max(0.10 * printed_mib * MIB, MIB)


@pytest.fixture(scope="module")
def big_moe(model_factory: ModelFactory) -> Path:
    """A qwen3moe fixture whose expert FFN (8 of 16 experts, width 1024) dominates."""
    return model_factory(
        "qwen3moe", "qwen3moe-big.gguf", n_embd=1024, n_experts=16, n_experts_used=8
    )


# --- the real llama-server ------------------------------------------------------------------


def printed_compute(model: Path, endpoint: str, args: list[str]) -> tuple[float, float]:
    """(RPC0, CPU) compute buffer sizes, MiB, as llama-server prints them."""
    with running_server(model, "--rpc", endpoint, "--fit", "off", *args) as server:
        lines = [b for b in parse_buffers(server.log_text()) if b.kind == "compute"]
    device = sum(b.mib for b in lines if b.device.startswith("RPC"))
    host = sum(b.mib for b in lines if b.device == "CPU")
    return device, host


def grid_args(ub: int, ctx: int, fa: bool) -> list[str]:
    return ["-c", str(ctx), "-ub", str(ub), "-b", str(max(ub, 2048)), "-fa", "on" if fa else "off"]


def check_grid(model: Path, endpoint: str, placement: list[str], **kw: Any) -> list[str]:
    """Start llama-server over ubatch x context (flash attention on and off); the misses."""
    facts = load_model_facts(model)
    misses = []
    for ub, ctx, fa in itertools.product(UBATCHES, CONTEXTS, (True, False)):
        device, host = printed_compute(model, endpoint, [*placement, *grid_args(ub, ctx, fa)])
        estimate = estimate_compute(
            facts, n_ctx=ctx, n_ubatch=ub, flash_attn=fa, device_kind="rpc", **kw
        )
        if not (within(estimate.device_bytes, device) and within(estimate.host_bytes, host)):
            misses.append(
                f"ub={ub} ctx={ctx} fa={fa}: printed {device}/{host} MiB, predicted {mib(estimate)}"
            )
    return misses


@pytest.mark.parametrize("arch", SERVER_ARCHS)
def test_server_grid_all_on_device(tiny_models: dict[str, Path], rpc: str, arch: str) -> None:
    assert check_grid(tiny_models[arch], rpc, ["-ngl", "99"]) == []


def test_server_grid_cpu_experts(big_moe: Path, rpc: str) -> None:
    """--n-cpu-moe on the RPC device (no op offload): the expert FFN moves to the CPU."""
    misses = check_grid(big_moe, rpc, ["-ngl", "99", "--n-cpu-moe", "2"], cpu_expert_layers=2)
    assert misses == []


def test_server_partial_layers_and_quantized_cache(
    tiny_models: dict[str, Path], big_moe: Path, rpc: str
) -> None:
    """-ngl 2 of 4 blocks (block 0-2 on the CPU) and q8_0 caches, which llama.cpp rotates."""
    facts = load_model_facts(big_moe)
    device, host = printed_compute(big_moe, rpc, ["-ngl", "2", *grid_args(512, 4096, True)])
    estimate = estimate_compute(facts, n_ctx=4096, layers_on_device=1, device_kind="rpc")
    assert within(estimate.device_bytes, device) and within(estimate.host_bytes, host)
    q8 = ["-ngl", "99", "-ctk", "q8_0", "-ctv", "q8_0", *grid_args(512, 16384, True)]
    device, host = printed_compute(tiny_models["gpt-oss"], rpc, q8)
    facts = load_model_facts(tiny_models["gpt-oss"])
    estimate = estimate_compute(facts, n_ctx=16384, type_k="q8_0", type_v="q8_0", device_kind="rpc")
    assert abs(estimate.device_bytes - device * MIB) <= PRINTED_MIB_TOLERANCE_BYTES
    assert abs(estimate.host_bytes - host * MIB) <= PRINTED_MIB_TOLERANCE_BYTES


def test_fit_params_dry_run_of_a_real_size_model(tmp_path: Path, rpc: str) -> None:
    """llama-fit-params on the sparse Qwen3-30B-A3B (one sequence, every token an output)."""
    path = write_header_only(tmp_path / "Qwen3-30B-A3B-Q4_K_M.gguf", sparse=True)
    facts = load_model_facts(path)
    argv = [str(bin_path("llama-fit-params")), "-m", str(path), "--rpc", rpc]
    for ub, ctx, fa in itertools.product((512, 2048), (4096, 16384), (True, False)):
        args = ["-c", str(ctx), "-ub", str(ub), "-fa", "on" if fa else "off", "-fitp", "on"]
        out = subprocess.run([*argv, *args], capture_output=True, text=True, check=True).stdout
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
        device = next(int(v[3]) for k, v in rows.items() if k.startswith("RPC"))
        estimate = estimate_compute(
            facts, n_ctx=ctx, n_ubatch=ub, flash_attn=fa, device_kind="rpc", n_seq=1, n_outputs=None
        )
        assert estimate.device_bytes // MIB == device
        assert estimate.host_bytes // MIB == int(rows["Host"][3])
