"""Architecture-matrix fixtures of group A: the plain (GQA, optionally SWA or chunked) MoE
architectures of llama.cpp build 11434 (see tests/archfix.py for the interface).

Each writer follows its architecture's ``load_arch_hparams`` / ``load_arch_tensors``
(src/models/<arch>.cpp): the keys it requires and the tensors it creates without
TENSOR_NOT_REQUIRED. Shapes: 4 blocks, n_embd 256, 4 query heads of 64 (2 KV heads), 4
experts (2 used) of width 256, so a q8_0 cache and F16 matrices fit.
"""

from __future__ import annotations

from pathlib import Path

import gguf

from support.archfix import Tiny, fixture


def _moe_block(
    t: Tiny,
    i: int,
    *,
    qk_norm: bool = False,
    bias: bool = False,
    shared: int = 0,
    shexp_gate: bool = False,
    probs_b: bool = False,
) -> None:
    """attn + routed experts (+ ``shared`` shared-expert width, its gate, exp_probs_b)."""
    t.attention(i, qk_norm=qk_norm, bias=bias)
    t.moe(i)
    if probs_b:
        t.f32(f"blk.{i}.exp_probs_b.bias", t.n_experts)
    if shared:
        t.shared_expert(i, shared, gate_inp=shexp_gate)


@fixture("qwen2moe")
def write_qwen2moe(path: Path) -> Path:
    """src/models/qwen2moe.cpp: Q/K/V biases, a gated shared expert on every block."""
    t = Tiny(path, "qwen2moe")
    t.keys()
    t.writer.add_expert_shared_feed_forward_length(t.n_ff_exp)
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i, bias=True, shared=t.n_ff_exp, shexp_gate=True)
    return t.close()


@fixture("olmoe")
def write_olmoe(path: Path) -> Path:
    """src/models/olmoe.cpp: Q/K norms over the whole projection (n_embd wide)."""
    t = Tiny(path, "olmoe", n_ff=256, n_head_kv=4)
    t.keys()
    t.globals()
    for i in range(t.n_layers):
        t.attention(i)
        t.norm(f"blk.{i}.attn_q_norm.weight", t.n_embd)
        t.norm(f"blk.{i}.attn_k_norm.weight", t.n_embd)
        t.moe(i)
    return t.close()


@fixture("granitemoe")
def write_granitemoe(path: Path) -> Path:
    """src/models/granite-moe.cpp: logit/residual/embedding/attention scales; experts are
    n_ff wide; a shared expert when expert_shared_feed_forward_length is set."""
    t = Tiny(path, "granitemoe", n_ff=256)
    t.keys()
    w = t.writer
    w.add_logit_scale(1.0)
    w.add_residual_scale(1.0)
    w.add_embedding_scale(1.0)
    w.add_attention_scale(0.125)
    w.add_expert_shared_feed_forward_length(t.n_ff_exp)
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i, shared=t.n_ff_exp)
    return t.close()


@fixture("ernie4_5-moe")
def write_ernie4_5_moe(path: Path) -> Path:
    """src/models/ernie4-5.cpp: one leading dense block, then MoE blocks (every
    interleave_moe_layer_step-th) with a shared expert and exp_probs_b."""
    t = Tiny(path, "ernie4_5-moe")
    t.keys()
    w = t.writer
    w.add_expert_shared_feed_forward_length(t.n_ff_exp)
    w.add_interleave_moe_layer_step(1)
    w.add_leading_dense_block_count(1)
    t.globals()
    for i in range(t.n_layers):
        if i == 0:
            t.attention(i)
            t.dense_ffn(i)
        else:
            _moe_block(t, i, shared=t.n_ff_exp, probs_b=True)
    return t.close()


@fixture("hunyuan-moe")
def write_hunyuan_moe(path: Path) -> Path:
    """src/models/hunyuan-moe.cpp: Q/K norms, a shared expert on every block, experts n_ff
    wide."""
    t = Tiny(path, "hunyuan-moe", n_ff=256)
    t.keys()
    t.writer.add_expert_shared_feed_forward_length(t.n_ff_exp)
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i, qk_norm=True, shared=t.n_ff_exp)
    return t.close()


@fixture("dots1")
def write_dots1(path: Path) -> Path:
    """src/models/dots1.cpp: Q/K norms, a leading dense block, shared experts
    (n_ff_exp x expert_shared_count), sigmoid gating with exp_probs_b."""
    t = Tiny(path, "dots1", n_head_kv=4)
    t.keys()
    w = t.writer
    w.add_leading_dense_block_count(1)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    t.globals()
    for i in range(t.n_layers):
        if i == 0:
            t.attention(i, qk_norm=True)
            t.dense_ffn(i)
        else:
            _moe_block(t, i, qk_norm=True, shared=t.n_ff_exp, probs_b=True)
    return t.close()


@fixture("bailingmoe")
def write_bailingmoe(path: Path) -> Path:
    """src/models/bailingmoe.cpp: plain GQA attention, softmax gating renormalised as the file
    says (expert_weights_norm), a shared expert (n_ff_exp x expert_shared_count) on every
    block."""
    t = Tiny(path, "bailingmoe")
    t.keys()
    t.writer.add_expert_shared_count(1)
    t.writer.add_expert_weights_norm(True)
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i, shared=t.n_ff_exp)
    return t.close()


@fixture("bailingmoe2")
def write_bailingmoe2(path: Path) -> Path:
    """src/models/bailingmoe2.cpp: fused attn_qkv, Q/K norms, a leading dense block, shared
    experts, sigmoid gating with exp_probs_b."""
    t = Tiny(path, "bailingmoe2")
    t.keys()
    w = t.writer
    w.add_leading_dense_block_count(1)
    w.add_expert_shared_count(1)
    w.add_expert_shared_feed_forward_length(t.n_ff_exp)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_rope_dimension_count(t.head_dim // 2)
    t.globals()
    e = t.n_embd
    for i in range(t.n_layers):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", e)
        t.mat(f"{p}.attn_qkv.weight", t.q_width + 2 * t.kv_width, e)
        t.mat(f"{p}.attn_output.weight", e, t.q_width)
        t.norm(f"{p}.attn_q_norm.weight", t.head_dim)
        t.norm(f"{p}.attn_k_norm.weight", t.head_dim)
        if i == 0:
            t.dense_ffn(i)
        else:
            t.moe(i)
            t.f32(f"{p}.exp_probs_b.bias", t.n_experts)
            t.shared_expert(i)
    return t.close()


# a context beyond the window / chunk at 4 slots (window x 4 + ubatch), so that it shows
@fixture("smallthinker", "-c", "20480")
def write_smallthinker(path: Path) -> Path:
    """src/models/smallthinker.cpp: with attention.sliding_window > 0, a 4096-token window
    on 3 of every 4 layers (the first of each 4 is dense) and RoPE only on those."""
    t = Tiny(path, "smallthinker")
    t.keys()
    t.writer.add_sliding_window(1024)  # the loader replaces any non-zero window by 4096
    t.writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    t.globals()
    for i in range(t.n_layers):
        t.attention(i)
        t.moe(i)
    return t.close()


@fixture("minimax-m2")
def write_minimax_m2(path: Path) -> Path:
    """src/models/minimax-m2.cpp: Q/K norms over whole projections, exp_probs_b, sigmoid
    gating, experts n_ff wide."""
    t = Tiny(path, "minimax-m2", n_ff=256)
    t.keys()
    t.writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    t.writer.add_rope_dimension_count(t.head_dim // 2)
    t.globals()
    for i in range(t.n_layers):
        t.attention(i)
        t.norm(f"blk.{i}.attn_q_norm.weight", t.q_width)
        t.norm(f"blk.{i}.attn_k_norm.weight", t.kv_width)
        t.moe(i)
        t.f32(f"blk.{i}.exp_probs_b.bias", t.n_experts)
    return t.close()


@fixture("grovemoe")
def write_grovemoe(path: Path) -> Path:
    """src/models/grovemoe.cpp: Q/K norms, routed experts plus "chunk" experts
    (``*_chexps``, n_expert / experts_per_group of them)."""
    t = Tiny(path, "grovemoe")
    t.keys()
    w = t.writer
    w.add_uint32("grovemoe.expert_chunk_feed_forward_length", 128)
    w.add_float32("grovemoe.expert_group_scale", 0.05)
    w.add_uint32("grovemoe.experts_per_group", 2)
    t.globals()
    e, n_chunk = t.n_embd, t.n_experts // 2
    for i in range(t.n_layers):
        p = f"blk.{i}"
        t.attention(i, qk_norm=True)
        t.moe(i)
        t.experts(f"{p}.ffn_gate_chexps.weight", n_chunk, 128, e)
        t.experts(f"{p}.ffn_up_chexps.weight", n_chunk, 128, e)
        t.experts(f"{p}.ffn_down_chexps.weight", n_chunk, e, 128)
    return t.close()


@fixture("qwen3vlmoe")
def write_qwen3vlmoe(path: Path) -> Path:
    """src/models/qwen3vlmoe.cpp: qwen3moe blocks, M-RoPE sections, deepstack layers (the
    input embedding is n_embd x (1 + n_deepstack_layers) wide in the graph)."""
    t = Tiny(path, "qwen3vlmoe")
    t.keys()
    t.writer.add_rope_dimension_sections([12, 10, 10, 0])
    t.writer.add_uint32("qwen3vlmoe.n_deepstack_layers", 2)
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i, qk_norm=True)
    return t.close()


@fixture("phimoe")
def write_phimoe(path: Path) -> Path:
    """src/models/phimoe.cpp: LayerNorm with biases, Q/K/V and output biases, an output
    bias; head size n_embd / n_head; experts n_ff wide."""
    t = Tiny(path, "phimoe", n_ff=256)
    t.keys(head_sizes=False)
    t.globals()
    e = t.n_embd
    t.f32("output_norm.bias", e)
    t.f32("output.bias", t.n_vocab)
    for i in range(t.n_layers):
        p = f"blk.{i}"
        t.attention(i, bias=True, out_bias=True)
        t.f32(f"{p}.attn_norm.bias", e)
        t.moe(i)
        t.f32(f"{p}.ffn_norm.bias", e)
    return t.close()


@fixture("dbrx")
def write_dbrx(path: Path) -> Path:
    """src/models/dbrx.cpp: LayerNorm (eps key), clamp_kqv, fused attn_qkv, attn_output_norm
    as the FFN norm, experts n_ff wide."""
    t = Tiny(path, "dbrx", n_ff=256)
    t.keys(head_sizes=False)
    t.writer.add_layer_norm_eps(1e-5)
    t.writer.add_clamp_kqv(8.0)
    t.globals()
    e = t.n_embd
    for i in range(t.n_layers):
        p = f"blk.{i}"
        t.norm(f"{p}.attn_norm.weight", e)
        t.mat(f"{p}.attn_qkv.weight", t.q_width + 2 * t.kv_width, e)
        t.mat(f"{p}.attn_output.weight", e, t.q_width)
        t.norm(f"{p}.attn_output_norm.weight", e)
        t.moe(i, norm=False)
    return t.close()


@fixture("llama")
def write_llama(path: Path) -> Path:
    """src/models/llama.cpp with experts (Mixtral): plain GQA, experts n_ff wide."""
    t = Tiny(path, "llama", n_ff=256)
    t.keys()
    t.globals()
    for i in range(t.n_layers):
        _moe_block(t, i)
    return t.close()


# a context beyond the window / chunk at 4 slots (window x 4 + ubatch), so that it shows
@fixture("llama4", "-c", "40960")
def write_llama4(path: Path) -> Path:
    """src/models/llama4.cpp: chunked attention (8192-token chunks) on 3 of every 4 layers,
    no RoPE on every 4th; MoE (sigmoid router, shared expert) on every
    interleave_moe_layer_step-th block, dense FFN on the others."""
    t = Tiny(path, "llama4")
    t.keys()
    t.writer.add_interleave_moe_layer_step(2)
    t.writer.add_rope_dimension_count(t.head_dim)
    t.globals()
    for i in range(t.n_layers):
        t.attention(i)
        if (i + 1) % 2 == 0:
            t.moe(i)
            t.shared_expert(i)
        else:
            t.dense_ffn(i)
    return t.close()
