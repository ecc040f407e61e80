"""DeepSeek-V3-class MLA models at full size: the DeepSeek-V3 header of examples/models
(deepseek2, 61 blocks, 3 dense, 256 experts in 8 groups, Q4_K_M) and a DeepSeek-V3.2 header
(deepseek32: the same plus the lightning indexer) written by the same script, against
llama.cpp's own dry run of a sparse loadable copy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from moetune.core.memory import estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_projection
from moetune.units import MIB

from support.examples import CTX, V3, write_v32_header
from support.factory import ModelFactory, loadable_copy
from support.fitrig import dry_run_settings
from support.llama import bin_path


@pytest.fixture(scope="module")
def v32_header(model_factory: ModelFactory) -> Path:
    return model_factory.written("DeepSeek-V3.2-Q4_K_M.header", write_v32_header)


@pytest.mark.parametrize(("which", "n_cpu_moe"), [("v3", 61), ("v3", 20), ("v32", 61), ("v32", 10)])
def test_matches_llama_fit_params(
    which: str, n_cpu_moe: int, v32_header: Path, tmp_path: Path, rpc: str
) -> None:
    header = V3 if which == "v3" else v32_header
    model = loadable_copy(header, tmp_path / f"{which}.gguf")
    argv = [
        str(bin_path("llama-fit-params")),
        "-m",
        str(model),
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "--n-cpu-moe",
        str(n_cpu_moe),
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
    predicted = estimate(load_model_facts(model), Placement.with_n_cpu_moe(n_cpu_moe), settings)
    shown = (
        predicted.gpu_weights_bytes / MIB,
        predicted.gpu_kv_bytes / MIB,
        predicted.gpu_compute_bytes / MIB,
        projected,
    )
    assert int(predicted.gpu_weights_bytes / MIB) == projected.model_mib, shown
    assert abs(predicted.gpu_kv_bytes / MIB - projected.context_mib) <= 0.01 * projected.context_mib
    # measured here: the replay gives llama.cpp's figures to the MiB (V3 424, V3.2 812 at N=61)
    assert int(predicted.gpu_compute_bytes / MIB) == projected.compute_mib, shown
