"""DeepSeek-V3-class MLA models at full size, read and planned: the DeepSeek-V3 header of
examples/models (deepseek2, 61 blocks, 3 dense, 256 experts in 8 groups, Q4_K_M) and a
DeepSeek-V3.2 header (deepseek32: the same plus the lightning indexer) written by the same
script (server/test_deepseek_v3.py holds them to llama.cpp's dry run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.archs import arch_of
from moetune.core.dims import _indexer
from moetune.core.kvcache import estimate_cache
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB, MIB

from support.archfix_c import write_glm_dsa
from support.examples import CTX, V3, write_v32_header
from support.factory import ModelFactory

# one cell of one layer in q8_0: the MLA row (kv_lora_rank 512 + rope 64) and the indexer key
MLA_ROW, INDEXER_ROW = 576 // 32 * 34, 128 // 32 * 34


@pytest.fixture(scope="module")
def v32_header(model_factory: ModelFactory) -> Path:
    return model_factory.written("DeepSeek-V3.2-Q4_K_M.header", write_v32_header)


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
