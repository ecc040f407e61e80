"""Tiny loadable fixtures of the MLA and sparse-attention MoE architectures of build 11434.

Each writer is registered (``archfix.fixture``) under an architecture name (as
src/llama-arch.cpp spells it), or kept in ``VARIANTS`` for a second shape of an architecture; it
writes a small model of it at a path and returns the path; the architecture matrix
(tests/test_arch_matrix.py) loads each in the real llama-server and compares moetune's estimate
with the buffers it logs.

The keys and tensors follow each architecture's ``load_arch_hparams`` / ``load_arch_tensors``
(src/models/deepseek2.cpp, deepseek32.cpp, glm-dsa.cpp). MLA files store the absorbed form
(``attn_k_b``/``attn_v_b``): ``key_length`` = kv_lora_rank + rope dims (the cached K row),
``value_length`` = kv_lora_rank, one KV head; head sizes are multiples of 32 so a q8_0 cache
fits. The DSA ones add the lightning indexer (``indexer.*`` tensors, one key head of
``indexer.key_length`` cached per token and layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QType

from support.archfix import fixture
from support.factory import _add_tokenizer, _Builder, _Dims

_GATING_SOFTMAX, _GATING_SIGMOID = 1, 2  # llama_expert_gating_func_type


@dataclass(frozen=True)
class MlaShape:
    """One tiny MLA model: DeepSeek-V2/V3 attention, a leading dense block, routed and shared
    experts, optionally the DSA indexer (``indexer``: heads, key length, top-k)."""

    arch: str = "deepseek2"
    n_layers: int = 4
    n_embd: int = 256
    n_head: int = 4
    q_lora: int = 128  # 0: no Q compression (DeepSeek-V2-Lite: attn_q)
    kv_lora: int = 64
    rope: int = 32
    nope: int = 32
    v_head: int = 64
    n_experts: int = 8
    n_used: int = 2
    n_ff_exp: int = 256
    n_dense_lead: int = 1
    n_shared: int = 1
    gating: int = _GATING_SOFTMAX
    probs_bias: bool = False  # exp_probs_b (DeepSeek-V3 / Kimi-K2 routing bias)
    weights_norm: bool = False
    weights_scale: float = 1.0
    expert_groups: tuple[int, int] = (0, 0)  # DeepSeek-V3: route within the best groups
    indexer: tuple[int, int, int] | None = None
    indexer_types: tuple[int, ...] | None = None  # glm-dsa: 1 = own indexer, 0 = shared
    context_length: int = 4096

    def has_indexer(self, il: int) -> bool:
        if self.indexer is None:
            return False
        return self.indexer_types is None or bool(self.indexer_types[il])


def _keys(w: gguf.GGUFWriter, s: MlaShape) -> None:
    w.add_name(f"moetune tiny {s.arch}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(s.context_length)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layers)
    w.add_feed_forward_length(2 * s.n_embd)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(1)
    w.add_key_length(s.kv_lora + s.rope)
    w.add_value_length(s.kv_lora)
    w.add_key_length_mla(s.nope + s.rope)
    w.add_value_length_mla(s.v_head)
    w.add_rope_dimension_count(s.rope)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if s.q_lora:
        w.add_q_lora_rank(s.q_lora)
    w.add_kv_lora_rank(s.kv_lora)
    w.add_expert_count(s.n_experts)
    w.add_expert_used_count(s.n_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_expert_shared_count(s.n_shared)
    w.add_leading_dense_block_count(s.n_dense_lead)
    w.add_expert_weights_scale(s.weights_scale)
    w.add_expert_weights_norm(s.weights_norm)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType(s.gating))
    if s.expert_groups[0]:
        w.add_expert_group_count(s.expert_groups[0])
        w.add_expert_group_used_count(s.expert_groups[1])
    if s.indexer is not None:
        heads, key_length, top_k = s.indexer
        w.add_uint32(f"{s.arch}.attention.indexer.head_count", heads)
        w.add_uint32(f"{s.arch}.attention.indexer.key_length", key_length)
        w.add_uint32(f"{s.arch}.attention.indexer.top_k", top_k)
    if s.indexer_types is not None:
        w.add_array(f"{s.arch}.attention.indexer.types", list(s.indexer_types))


def _attention(b: _Builder, s: MlaShape, il: int) -> None:
    e, p = s.n_embd, f"blk.{il}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.attn_kv_a_norm.weight", s.kv_lora)
    head_k = s.nope + s.rope
    if s.q_lora:
        b.norm(f"{p}.attn_q_a_norm.weight", s.q_lora)
        b.mat(f"{p}.attn_q_a.weight", s.q_lora, e)
        b.mat(f"{p}.attn_q_b.weight", s.n_head * head_k, s.q_lora)
    else:
        b.mat(f"{p}.attn_q.weight", s.n_head * head_k, e)
    b.mat(f"{p}.attn_kv_a_mqa.weight", s.kv_lora + s.rope, e)
    b.mat(f"{p}.attn_k_b.weight", s.n_head, s.kv_lora, s.nope)
    b.mat(f"{p}.attn_v_b.weight", s.n_head, s.v_head, s.kv_lora)
    b.mat(f"{p}.attn_output.weight", e, s.n_head * s.v_head)


def _indexer(b: _Builder, s: MlaShape, il: int) -> None:
    """The lightning indexer of a DSA block (src/models/deepseek32.cpp)."""
    assert s.indexer is not None
    heads, key_length, _ = s.indexer
    p = f"blk.{il}.indexer"
    b.norm(f"{p}.k_norm.weight", key_length)
    b.norm(f"{p}.k_norm.bias", key_length, 0.0)
    b.mat(f"{p}.proj.weight", heads, s.n_embd)
    b.mat(f"{p}.attn_k.weight", key_length, s.n_embd)
    b.mat(f"{p}.attn_q_b.weight", heads * key_length, s.q_lora)


def _ffn(b: _Builder, s: MlaShape, il: int) -> None:
    e, f, x, p = s.n_embd, s.n_ff_exp, s.n_experts, f"blk.{il}"
    b.norm(f"{p}.ffn_norm.weight", e)
    if il < s.n_dense_lead:
        b.mat(f"{p}.ffn_gate.weight", 2 * e, e)
        b.mat(f"{p}.ffn_up.weight", 2 * e, e)
        b.mat(f"{p}.ffn_down.weight", e, 2 * e)
        return
    b.f32(f"{p}.ffn_gate_inp.weight", x, e)
    if s.probs_bias:
        b.f32(f"{p}.exp_probs_b.bias", x)
    b.experts(f"{p}.ffn_gate_exps.weight", x, f, e)
    b.experts(f"{p}.ffn_up_exps.weight", x, f, e)
    b.experts(f"{p}.ffn_down_exps.weight", x, e, f)
    shared = f * s.n_shared
    b.mat(f"{p}.ffn_gate_shexp.weight", shared, e)
    b.mat(f"{p}.ffn_up_shexp.weight", shared, e)
    b.mat(f"{p}.ffn_down_shexp.weight", e, shared)


def write_mla(path: Path, shape: MlaShape, *, seed: int = 0) -> Path:
    """Write a tiny loadable model of ``shape`` (F16 matrices, F32 norms and router)."""
    writer = gguf.GGUFWriter(path, shape.arch)
    _keys(writer, shape)
    _add_tokenizer(writer)
    dims = _Dims(shape.n_layers, shape.n_experts, shape.n_used, shape.n_embd)
    b = _Builder(writer, dims, QType.F16, np.random.default_rng(seed))
    b.mat("token_embd.weight", dims.n_vocab, shape.n_embd)
    b.norm("output_norm.weight", shape.n_embd)
    b.mat("output.weight", dims.n_vocab, shape.n_embd)
    for il in range(shape.n_layers):
        _attention(b, shape, il)
        if shape.has_indexer(il):
            _indexer(b, shape, il)
        _ffn(b, shape, il)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# DeepSeek-V2-Lite: no Q compression; the loader only skips q_lora_rank at 26/27 blocks.
DEEPSEEK2_LITE = MlaShape(n_layers=26, n_embd=128, q_lora=0, n_experts=4, n_ff_exp=64)
# Kimi-K2 / DeepSeek-V3 routing: 384 experts (8 used), sigmoid gating with a bias, normalised
# and scaled weights, one dense block.
KIMI_K2 = MlaShape(
    n_experts=384,
    n_used=8,
    n_ff_exp=32,
    gating=_GATING_SIGMOID,
    probs_bias=True,
    weights_norm=True,
    weights_scale=2.827,
)
# DeepSeek-V3/R1 routing: experts in groups, the tokens routed within the best groups.
DEEPSEEK_V3 = MlaShape(
    n_experts=32,
    n_used=4,
    n_ff_exp=64,
    gating=_GATING_SIGMOID,
    probs_bias=True,
    weights_norm=True,
    weights_scale=2.5,
    expert_groups=(4, 2),
)
DEEPSEEK32 = MlaShape(
    arch="deepseek32",
    gating=_GATING_SIGMOID,
    probs_bias=True,
    weights_norm=True,
    weights_scale=2.5,
    indexer=(4, 64, 256),
)
GLM_DSA = MlaShape(
    arch="glm-dsa",
    n_layers=6,
    gating=_GATING_SIGMOID,
    probs_bias=True,
    weights_norm=True,
    indexer=(4, 64, 256),
    indexer_types=(1, 1, 0, 0, 1, 0),
)


def _writer(shape: MlaShape) -> Callable[[Path], Path]:
    return lambda path: write_mla(path, shape)


write_deepseek32 = fixture("deepseek32")(_writer(DEEPSEEK32))
write_glm_dsa = fixture("glm-dsa")(_writer(GLM_DSA))
# Second shapes of an architecture the matrix already holds (deepseek2 is factory.py's), run
# by tests/test_mla_variants.py with the matrix's settings and bounds.
VARIANTS: dict[str, Callable[[Path], Path]] = {
    "deepseek2-lite": _writer(DEEPSEEK2_LITE),
    "deepseek2-kimi-k2": _writer(KIMI_K2),
    "deepseek2-v3": _writer(DEEPSEEK_V3),
}
