"""KV / RS cache prediction (moetune.core.kvcache) on its own: cache types, padding, SWA,
hybrid state, bad settings refused (server/test_kvcache.py holds it to llama-server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from moetune.core.facts import ModelFacts
from moetune.core.hparams import HParam
from moetune.core.kvcache import CACHE_TYPES, estimate_cache, parse_cache_type
from moetune.errors import BadValueError, GGUFFormatError
from moetune.jobs.loader import load_model_facts

# --- pure edge cases ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def facts(tiny_models: dict[str, Path]) -> dict[str, ModelFacts]:
    return {a: load_model_facts(p) for a, p in tiny_models.items()}


def _with(facts: ModelFacts, arch: str | None = None, **hparams: HParam) -> ModelFacts:
    """A copy of ``facts`` with hparams (dotted keys written with ``__``) and arch replaced."""
    merged = {**facts.hparams, **{k.replace("__", "."): v for k, v in hparams.items()}}
    return replace(facts, hparams=merged, architecture=arch or facts.architecture)


def test_parse_cache_type_is_case_insensitive() -> None:
    assert parse_cache_type("Q8_0") == "q8_0"
    assert parse_cache_type(" IQ4_NL ") == "iq4_nl"
    assert all(parse_cache_type(name.upper()) == name for name in CACHE_TYPES)


@pytest.mark.parametrize("name", ["q4_k", "fp16", "", "q8"])
def test_bad_cache_type_lists_valid_names(name: str) -> None:
    with pytest.raises(BadValueError) as info:
        parse_cache_type(name)
    assert info.value.hint is not None
    assert all(valid in info.value.hint for valid in CACHE_TYPES)


def test_bad_cache_type_in_estimate(facts: dict[str, ModelFacts]) -> None:
    with pytest.raises(BadValueError):
        estimate_cache(facts["qwen3moe"], n_ctx=4096, type_k="q4_k")


@pytest.mark.parametrize("n_ctx", [0, -1, -4096])
def test_non_positive_context_is_refused(facts: dict[str, ModelFacts], n_ctx: int) -> None:
    with pytest.raises(BadValueError):
        estimate_cache(facts["qwen3moe"], n_ctx=n_ctx)


@pytest.mark.parametrize("n_seq", [0, 257])
def test_bad_sequence_count_is_refused(facts: dict[str, ModelFacts], n_seq: int) -> None:
    with pytest.raises(BadValueError):
        estimate_cache(facts["qwen3moe"], n_ctx=4096, n_seq=n_seq)


def test_quantized_v_needs_flash_attention(facts: dict[str, ModelFacts]) -> None:
    with pytest.raises(BadValueError, match="flash attention"):
        estimate_cache(facts["qwen3moe"], n_ctx=4096, type_v="q8_0", flash_attn=False)
    est = estimate_cache(facts["qwen3moe"], n_ctx=4096, type_k="q8_0", flash_attn=False)
    assert est.kv_bytes > 0  # a quantized K alone is fine without FA


def test_mla_needs_equal_types_and_caches_k_only(facts: dict[str, ModelFacts]) -> None:
    with pytest.raises(BadValueError, match="MLA"):
        estimate_cache(facts["deepseek2"], n_ctx=4096, type_k="q8_0", type_v="f16")
    est = estimate_cache(facts["deepseek2"], n_ctx=4096)
    # K row = key_length (kv_lora_rank 64 + rope 32) x 1 head, f16; no V at all
    assert all(c.kv_bytes == c.k_bytes == 96 * 2 * 4096 for c in est.layers)


def test_block_size_must_divide_head_size(facts: dict[str, ModelFacts]) -> None:
    odd = _with(facts["qwen3moe"], attention__key_length=48)
    with pytest.raises(BadValueError, match="head size 48"):
        estimate_cache(odd, n_ctx=4096, type_k="q8_0")
    assert estimate_cache(odd, n_ctx=4096).kv_bytes > 0


def test_per_layer_head_count_kv(facts: dict[str, ModelFacts]) -> None:
    model = _with(facts["qwen3moe"], attention__head_count_kv=[2, 1, 0, 4])
    est = estimate_cache(model, n_ctx=4096)
    row = 64 * 2 * 4096  # head dim x f16 x cells, for K and for V
    assert [c.kv_bytes for c in est.layers] == [2 * 2 * row, 2 * row, 0, 2 * 4 * row]
    assert [c.n_cells for c in est.layers] == [4096] * 4  # a 0-head layer still has cells
    no_fa = estimate_cache(model, n_ctx=4096, flash_attn=False)
    # V transposed (no FA) with varying widths: every V row is n_embd_v_gqa_max() wide
    assert [c.v_bytes for c in no_fa.layers] == [4 * row] * 4
    assert [c.k_bytes for c in no_fa.layers] == [2 * row, row, 0, 4 * row]


def test_head_count_kv_array_of_wrong_length(facts: dict[str, ModelFacts]) -> None:
    with pytest.raises(GGUFFormatError):
        estimate_cache(_with(facts["qwen3moe"], attention__head_count_kv=[2, 2]), n_ctx=4096)


@pytest.mark.parametrize(
    ("n_ctx", "n_seq", "unified", "want"),
    [
        (10000, 4, True, (10240, 10240, 1)),
        (512, 4, False, (1024, 256, 4)),  # rounds UP: 512/4 = 128 -> 256 per sequence
        (10000, 4, False, (10240, 2560, 4)),
        (4096, 3, False, (4608, 1536, 3)),
        (1, 1, False, (256, 256, 1)),
    ],
)
def test_context_padding(
    facts: dict[str, ModelFacts],
    n_ctx: int,
    n_seq: int,
    unified: bool,
    want: tuple[int, int, int],
) -> None:
    est = estimate_cache(facts["qwen3"], n_ctx=n_ctx, n_seq=n_seq, kv_unified=unified)
    assert (est.n_ctx, est.n_ctx_seq, est.n_stream) == want
    assert {c.n_cells for c in est.layers} == {want[1]}
    assert est.kv_bytes == 4 * 2 * (2 * 64 * 2) * want[1] * want[2]


@pytest.mark.parametrize(
    ("kwargs", "swa_cells"),
    [
        ({}, 1024),  # 128 x 4 + 512
        ({"n_ubatch": 1024}, 1536),
        ({"swa_full": True}, 10240),
        ({"kv_unified": False}, 768),  # per stream: 128 + 512 -> 640 -> 768
        ({"n_seq": 1, "n_ubatch": 100}, 256),
    ],
)
def test_swa_cache_size(
    facts: dict[str, ModelFacts], kwargs: dict[str, int | bool], swa_cells: int
) -> None:
    est = estimate_cache(facts["gpt-oss"], n_ctx=10000, **kwargs)  # type: ignore[arg-type]
    assert [c.is_swa for c in est.layers] == [True, False, True, False]
    assert [c.n_cells for c in est.layers if c.is_swa] == [swa_cells] * 2
    assert [c.n_cells for c in est.layers if not c.is_swa] == [est.n_ctx_seq] * 2


def test_swa_pattern_key(facts: dict[str, ModelFacts]) -> None:
    gpt_oss = facts["gpt-oss"]
    flags = estimate_cache(
        _with(gpt_oss, attention__sliding_window_pattern=[False, True, True, False]), n_ctx=4096
    )
    assert [c.is_swa for c in flags.layers] == [False, True, True, False]
    every_4th = estimate_cache(_with(gpt_oss, attention__sliding_window_pattern=4), n_ctx=4096)
    assert [c.is_swa for c in every_4th.layers] == [True, True, True, False]


def test_hybrid_recurrent_state(facts: dict[str, ModelFacts]) -> None:
    est = estimate_cache(facts["qwen35moe"], n_ctx=4096, n_seq=3)
    # R = (conv 4 - 1) x (inner 128 + 2 x groups 2 x state 32); S = state 32 x inner 128
    rs = (3 * (128 + 2 * 2 * 32) + 32 * 128) * 4 * 3
    assert [c.rs_bytes for c in est.layers] == [rs, rs, rs, 0]
    assert [c.n_cells for c in est.layers] == [0, 0, 0, 4096]
    assert est.rs_cells == 3
    assert est.rs_bytes_for([0, 3]) == rs
    assert est.kv_bytes_for([0, 1, 2]) == 0
    assert est.kv_bytes_for([3]) == est.kv_bytes == 2 * 2 * 64 * 2 * 4096
    flagged = _with(facts["qwen35moe"], attention__recurrent_layers=[True, False, True, False])
    assert [c.n_cells > 0 for c in estimate_cache(flagged, n_ctx=4096).layers] == [
        False,
        True,
        False,
        True,
    ]


def test_nextn_layers_have_no_cache(facts: dict[str, ModelFacts]) -> None:
    est = estimate_cache(_with(facts["glm4moe"], nextn_predict_layers=1), n_ctx=4096)
    assert [c.n_cells for c in est.layers] == [4096, 4096, 4096, 0]
    assert est.kv_bytes_for([3]) == 0


def test_unknown_architecture_is_a_gqa_guess(facts: dict[str, ModelFacts]) -> None:
    known = estimate_cache(facts["qwen3moe"], n_ctx=4096)
    guess = estimate_cache(_with(facts["qwen3moe"], arch="futuremoe"), n_ctx=4096)
    assert known.exact and not guess.exact
    assert guess.kv_bytes == known.kv_bytes
    # SWA keys of an unknown loader are ignored: every layer gets the full context
    swa_guess = estimate_cache(_with(facts["gpt-oss"], arch="futuremoe"), n_ctx=4096)
    assert {c.n_cells for c in swa_guess.layers} == {4096}
    assert not swa_guess.exact


def test_totals_and_layer_sums(facts: dict[str, ModelFacts]) -> None:
    est = estimate_cache(facts["gpt-oss"], n_ctx=4096, type_k="q8_0", type_v="q4_0")
    assert est.kv_bytes == est.kv_bytes_for(range(4)) == sum(c.kv_bytes for c in est.layers)
    assert est.kv_bytes_for([]) == 0 and est.kv_bytes_for([99]) == 0
    full = est.layers[1]
    assert full.k_bytes == 128 // 32 * 34 * 4096  # q8_0: 34 bytes per 32 values
    assert full.v_bytes == 128 // 32 * 18 * 4096  # q4_0: 18 bytes per 32 values
