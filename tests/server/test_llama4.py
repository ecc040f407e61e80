"""Llama 4: chunked attention (src/models/llama4.cpp: 8192-token chunks on 3 of every 4
blocks, a sliding-window-sized cache in llama_kv_cache_iswa) on the Llama-4-Scout header of
examples/models, against llama.cpp's own dry run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from moetune.core.memory import estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_projection
from moetune.units import MIB

from support.examples import CTX, SCOUT
from support.factory import loadable_copy
from support.fitrig import dry_run_settings
from support.llama import bin_path


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
    settings = dry_run_settings(CTX)
    predicted = estimate(load_model_facts(model), Placement(n_gpu_layers=99), settings)
    kv_mib = predicted.gpu_kv_bytes / MIB
    print(f"\nScout at 32k q8_0: moetune KV {kv_mib} MiB, llama-fit-params {projected}")
    assert abs(kv_mib - projected.context_mib) <= 0.01 * projected.context_mib
    assert int(predicted.gpu_weights_bytes / MIB) == projected.model_mib
    compute_mib = predicted.gpu_compute_bytes / MIB  # 485.30 against 475 (floored)
    assert abs(compute_mib - projected.compute_mib) <= 0.10 * projected.compute_mib
