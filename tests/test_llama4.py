"""Llama 4: chunked attention (src/models/llama4.cpp: 8192-token chunks on 3 of every 4
blocks, a sliding-window-sized cache in llama_kv_cache_iswa) on the Llama-4-Scout header of
examples/models, against llama.cpp's own dry run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from moetune.core.kvcache import estimate_cache
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_projection
from moetune.units import GIB, MIB

from factory import loadable_copy
from helpers import EXAMPLES
from llama import bin_path

SCOUT = EXAMPLES / "Llama-4-Scout-17B-16E-Q4_K_M.header.gguf"
CTX = 32768


def test_scout_header_reads() -> None:
    facts = load_model_facts(SCOUT)
    assert facts.header_only and facts.file_bytes < 1 << 20
    assert (facts.architecture, facts.n_layers, facts.n_experts, facts.n_experts_used) == (
        "llama4",
        48,
        16,
        1,
    )
    assert facts.n_experts_shared == 1
    assert round(facts.total_bytes / GIB, 1) == 60.9  # the public Q4_K_M file: 65.4 GB
    assert all(layer.has_experts for layer in facts.layers)


def test_chunked_layers() -> None:
    """Blocks 3, 7, ... use the full context; the others an 8192-token chunk."""
    dims = load_model_facts(SCOUT).dims
    assert dims.n_swa == 8192
    assert [il for il in range(48) if not dims.swa[il]] == list(range(3, 48, 4))


def test_scout_kv_at_32k() -> None:
    """12 full layers x 32768 cells + 36 chunked layers x pad256(8192 + 512) cells, q8_0
    K and V of 8 heads x 128: 1466.25 MiB at one slot (llama-fit-params: 1466); with
    llama-server's 4 unified slots the chunked cache is 4 x 8192 + 512 > 32768 cells."""
    facts = load_model_facts(SCOUT)
    one = estimate_cache(facts, n_ctx=CTX, type_k="q8_0", type_v="q8_0", n_seq=1)
    assert one.kv_bytes / MIB == 1466.25
    four = estimate_cache(facts, n_ctx=CTX, type_k="q8_0", type_v="q8_0", n_seq=4)
    assert four.kv_bytes / MIB == 3264.0


@pytest.mark.server
def test_scout_kv_matches_llama_fit_params(tmp_path: Path, rpc: str) -> None:
    model = loadable_copy(SCOUT, tmp_path / "scout.gguf")
    argv = [
        str(bin_path("llama-fit-params")),
        "-m",
        str(model),
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "-c",
        str(CTX),
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-fa",
        "on",
        "-np",
        "1",
        "-fitp",
        "on",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    projected = parse_projection(done.stdout)["RPC0"]
    settings = Settings(
        n_ctx=CTX,
        type_k="q8_0",
        type_v="q8_0",
        n_seq=1,
        all_outputs=True,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
    predicted = estimate(load_model_facts(model), Placement(n_gpu_layers=99), settings)
    kv_mib = predicted.gpu_kv_bytes / MIB
    print(f"\nScout at 32k q8_0: moetune KV {kv_mib} MiB, llama-fit-params {projected}")
    assert abs(kv_mib - projected.context_mib) <= 0.01 * projected.context_mib
    assert int(predicted.gpu_weights_bytes / MIB) == projected.model_mib
    compute_mib = predicted.gpu_compute_bytes / MIB  # 485.30 against 475 (floored)
    assert abs(compute_mib - projected.compute_mib) <= 0.10 * projected.compute_mib
