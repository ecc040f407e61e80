"""DeepSeek-V3-class MLA models at full size: the DeepSeek-V3 header of examples/models
(deepseek2, 61 blocks, 3 dense, 256 experts in 8 groups, Q4_K_M) and a DeepSeek-V3.2 header
(deepseek32: the same plus the lightning indexer) written by the same script, against
llama.cpp's own dry run of a sparse loadable copy."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from moetune.core.archs import arch_of
from moetune.core.dims import _indexer
from moetune.core.kvcache import estimate_cache
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_projection
from moetune.units import GIB, MIB

from archfix_c import write_glm_dsa
from factory import loadable_copy
from helpers import EXAMPLES
from llama import bin_path

V3 = EXAMPLES / "DeepSeek-V3-0324-Q4_K_M.header.gguf"
CTX = 32768
# one cell of one layer in q8_0: the MLA row (kv_lora_rank 512 + rope 64) and the indexer key
MLA_ROW, INDEXER_ROW = 576 // 32 * 34, 128 // 32 * 34


def _script() -> ModuleType:
    script = EXAMPLES / "make_header_only.py"
    spec = importlib.util.spec_from_file_location("make_header_only", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def v32_header(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = _script()
    spec = script.DeepSeekV3(indexer=(64, 128, 2048))
    path = tmp_path_factory.mktemp("v32") / "DeepSeek-V3.2-Q4_K_M.header.gguf"
    script.write(path, spec.arch, spec)
    return path


def test_v3_header_reads() -> None:
    facts = load_model_facts(V3)
    assert facts.header_only and facts.file_bytes < 1 << 20
    assert (facts.architecture, facts.n_layers, facts.n_experts, facts.n_experts_used) == (
        "deepseek2",
        61,
        256,
        8,
    )
    assert round(facts.total_bytes / GIB, 1) == 376.7  # the public Q4_K_M files: 404 GB
    assert [layer.index for layer in facts.layers if not layer.has_experts] == [0, 1, 2]
    assert facts.dims.mla and facts.dims.indexer_k == 0


def test_v3_kv() -> None:
    """One K row of 576 per cell and layer, no V: 1166.625 MiB at 32k in q8_0."""
    cache = estimate_cache(load_model_facts(V3), n_ctx=CTX, type_k="q8_0", type_v="q8_0", n_seq=1)
    assert cache.kv_bytes == 61 * CTX * MLA_ROW
    assert cache.kv_bytes / MIB == 1166.625


def test_v32_kv(v32_header: Path) -> None:
    """The indexer cache adds one key head of 128 per cell and layer: 1425.875 MiB."""
    facts = load_model_facts(v32_header)
    assert (facts.architecture, facts.dims.indexer_k) == ("deepseek32", 128)
    cache = estimate_cache(facts, n_ctx=CTX, type_k="q8_0", type_v="q8_0", n_seq=1)
    assert cache.kv_bytes == 61 * CTX * (MLA_ROW + INDEXER_ROW)
    assert cache.kv_bytes / MIB == 1425.875


@pytest.mark.server
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
    settings = Settings(
        n_ctx=CTX,
        type_k="q8_0",
        type_v="q8_0",
        n_seq=1,
        all_outputs=True,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
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


def test_glm_dsa_indexer_layers(tmp_path: Path) -> None:
    """glm-dsa: attention.indexer.types picks the layers with an indexer cache; without the key,
    GLM-5/5.1 (context under 1M) index every layer, GLM-5.2 layers 0, 1, 2, 6, 10, ..., 74."""
    facts = load_model_facts(write_glm_dsa(tmp_path / "glm-dsa.gguf"))
    assert facts.dims.indexer_full == (True, True, False, False, True, False)
    cache = estimate_cache(facts, n_ctx=4096, type_k="q8_0", type_v="q8_0", n_seq=1)
    assert cache.kv_bytes == 4096 * (6 * 96 + 3 * 64) // 32 * 34
    assert _indexer({"context_length": 202752}, arch_of("glm-dsa"), 79, 78)[1] == (True,) * 78 + (
        False,
    )
    flags = _indexer({"context_length": 1048576}, arch_of("glm-dsa"), 78, 78)[1]
    assert [il for il in range(78) if flags[il]] == [0, 1, *range(2, 78, 4)]
