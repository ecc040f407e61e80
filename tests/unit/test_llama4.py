"""Llama 4: chunked attention (src/models/llama4.cpp: 8192-token chunks on 3 of every 4
blocks, a sliding-window-sized cache in llama_kv_cache_iswa) on the Llama-4-Scout header of
examples/models (server/test_llama4.py holds it to llama.cpp's dry run)."""

from __future__ import annotations

from moetune.core.kvcache import estimate_cache
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB, MIB

from support.examples import CTX, SCOUT


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
