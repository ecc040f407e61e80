"""Tiny loadable fixtures of more recurrent / hybrid MoE architectures of llama.cpp build 11434
(after tests/archfix_b.py): Nemotron-H MoE, LFM2-MoE, Kimi-Linear.

Each writer is registered (``archfix.fixture``) under an architecture name (as
src/llama-arch.cpp spells it); it writes a small model of it at a path and returns the path; the
architecture matrix (tests/test_arch_matrix.py) loads each in the real llama-server and compares
moetune's estimate with the buffers it logs. Keys and tensors follow each architecture's
``load_arch_hparams`` / ``load_arch_tensors`` (src/models/<arch>.cpp); head sizes are multiples
of 32 so that a q8_0 cache fits, ``ssm_conv1d`` is F32.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from support.archfix import Tiny, fixture
from support.factory import _add_tokenizer

# --- nemotron_h_moe (Nemotron-3-Nano class: Mamba-2 | NoPE attention | MoE blocks) ------------

# M: Mamba-2, *: attention, E: MoE (conversion/nemotron.py's hybrid_override_pattern)
_NEMOTRON_PATTERN = "EM*EMEM*"
_NM_STATE, _NM_GROUPS, _NM_HEADS, _NM_CONV = 32, 2, 8, 4
_NM_INNER = 512
_NM_LATENT = 128  # moe_latent_size (Nemotron-3-Super's latent MoE projections)
_NM_SHEXP = 384


def _nemotron_keys(t: Tiny) -> None:
    """load_arch_hparams (src/models/nemotron-h.cpp): a block is recurrent iff its
    head_count_kv and feed_forward_length are both 0, attention iff only its
    feed_forward_length is 0, else an FFN (MoE) block."""
    w, kinds = t.writer, _NEMOTRON_PATTERN
    w.add_name("moetune tiny nemotron_h_moe")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(4096)
    w.add_embedding_length(t.n_embd)
    w.add_block_count(t.n_layers)
    w.add_head_count(t.n_head)
    w.add_head_count_kv([t.n_head_kv if k == "*" else 0 for k in kinds])
    w.add_feed_forward_length([t.n_ff_exp if k == "E" else 0 for k in kinds])
    w.add_key_length(t.head_dim)
    w.add_value_length(t.head_dim)
    w.add_layer_norm_eps(1e-5)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(t.n_experts)
    w.add_expert_used_count(t.n_experts_used)
    w.add_expert_feed_forward_length(t.n_ff_exp)
    w.add_expert_shared_feed_forward_length(_NM_SHEXP)
    w.add_expert_shared_count(1)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(2.5)
    w.add_expert_group_count(1)
    w.add_moe_latent_size(_NM_LATENT)
    w.add_ssm_conv_kernel(_NM_CONV)
    w.add_ssm_inner_size(_NM_INNER)
    w.add_ssm_state_size(_NM_STATE)
    w.add_ssm_time_step_rank(_NM_HEADS)
    w.add_ssm_group_count(_NM_GROUPS)


def _nemotron_mamba2(t: Tiny, il: int) -> None:
    """ssm_in (z | xBC | dt), conv (+bias), dt bias, A, D, grouped norm, out."""
    e, p = t.n_embd, f"blk.{il}"
    channels = _NM_INNER + 2 * _NM_GROUPS * _NM_STATE
    t.mat(f"{p}.ssm_in.weight", _NM_INNER + channels + _NM_HEADS, e)
    t.f32(f"{p}.ssm_conv1d.weight", channels, _NM_CONV, scale=0.2)
    t.f32(f"{p}.ssm_conv1d.bias", channels)
    t.norm(f"{p}.ssm_dt.bias", _NM_HEADS, 0.0)
    t.writer.add_tensor(f"{p}.ssm_a", np.full((_NM_HEADS, 1), -1.0, dtype=np.float32))
    t.writer.add_tensor(f"{p}.ssm_d", np.ones((_NM_HEADS, 1), dtype=np.float32))
    t.writer.add_tensor(
        f"{p}.ssm_norm.weight",
        np.ones((_NM_GROUPS, _NM_INNER // _NM_GROUPS), dtype=np.float32),
    )
    t.mat(f"{p}.ssm_out.weight", e, _NM_INNER)


def _nemotron_moe(t: Tiny, il: int) -> None:
    """Router + selection bias, latent down/up, up-only experts in the latent width, and an
    up-only shared expert (squared ReLU everywhere)."""
    e, p, x, f = t.n_embd, f"blk.{il}", t.n_experts, t.n_ff_exp
    t.f32(f"{p}.ffn_gate_inp.weight", x, e)
    t.norm(f"{p}.exp_probs_b.bias", x, 0.0)
    t.mat(f"{p}.ffn_latent_down.weight", _NM_LATENT, e)
    t.mat(f"{p}.ffn_latent_up.weight", e, _NM_LATENT)
    t.experts(f"{p}.ffn_up_exps.weight", x, f, _NM_LATENT)
    t.experts(f"{p}.ffn_down_exps.weight", x, _NM_LATENT, f)
    t.mat(f"{p}.ffn_up_shexp.weight", _NM_SHEXP, e)
    t.mat(f"{p}.ffn_down_shexp.weight", e, _NM_SHEXP)


@fixture("nemotron_h_moe")
def write_nemotron_h_moe(path: Path) -> Path:
    t = Tiny(path, "nemotron_h_moe", n_layers=len(_NEMOTRON_PATTERN), n_experts=8)
    _nemotron_keys(t)
    _add_tokenizer(t.writer)
    t.globals()
    for il, kind in enumerate(_NEMOTRON_PATTERN):
        t.norm(f"blk.{il}.attn_norm.weight", t.n_embd)
        if kind == "M":
            _nemotron_mamba2(t, il)
        elif kind == "*":
            p = f"blk.{il}"
            t.mat(f"{p}.attn_q.weight", t.q_width, t.n_embd)
            t.mat(f"{p}.attn_k.weight", t.kv_width, t.n_embd)
            t.mat(f"{p}.attn_v.weight", t.kv_width, t.n_embd)
            t.mat(f"{p}.attn_output.weight", t.n_embd, t.q_width)
        else:
            _nemotron_moe(t, il)
    return t.close()


# --- lfm2moe (LFM2-8B-A1B class: gated short convolutions + GQA, MoE after dense leads) -------

_LFM2_ATTN = frozenset({2, 5})  # head_count_kv 0 marks the short-conv (recurrent) blocks
_LFM2_L_CACHE = 3  # shortconv.l_cache: the conv state keeps l_cache - 1 columns
_LFM2_DENSE_LEAD = 1


def _lfm2moe_keys(t: Tiny) -> None:
    """src/models/lfm2moe.cpp load_arch_hparams: shortconv.l_cache, RMS eps, leading dense
    blocks, expert widths and the gating function (sigmoid) are read."""
    w = t.writer
    w.add_name("moetune tiny lfm2moe")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(4096)
    w.add_embedding_length(t.n_embd)
    w.add_block_count(t.n_layers)
    w.add_feed_forward_length(t.n_ff)
    w.add_head_count(t.n_head)
    w.add_head_count_kv([t.n_head_kv if il in _LFM2_ATTN else 0 for il in range(t.n_layers)])
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_shortconv_l_cache(_LFM2_L_CACHE)
    w.add_leading_dense_block_count(_LFM2_DENSE_LEAD)
    w.add_expert_count(t.n_experts)
    w.add_expert_used_count(t.n_experts_used)
    w.add_expert_feed_forward_length(t.n_ff_exp)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_norm(True)


def _lfm2moe_layer(t: Tiny, il: int) -> None:
    """operator norm, short conv (in_proj to B|C|x, conv, out_proj) or GQA with Q/K norms;
    ffn_norm and a dense SwiGLU FFN (leading blocks) or the MoE with a selection bias."""
    e, p = t.n_embd, f"blk.{il}"
    if il in _LFM2_ATTN:
        t.attention(il, qk_norm=True)  # attn_norm (the operator norm) included
    else:
        t.norm(f"{p}.attn_norm.weight", e)
        t.f32(f"{p}.shortconv.conv.weight", e, _LFM2_L_CACHE, scale=0.2)
        t.mat(f"{p}.shortconv.in_proj.weight", 3 * e, e)
        t.mat(f"{p}.shortconv.out_proj.weight", e, e)
    if il < _LFM2_DENSE_LEAD:
        t.dense_ffn(il)
    else:
        t.moe(il)
        t.norm(f"{p}.exp_probs_b.bias", t.n_experts, 0.0)


@fixture("lfm2moe")
def write_lfm2moe(path: Path) -> Path:
    t = Tiny(path, "lfm2moe", n_layers=6, n_experts=8, n_head_kv=2)
    _lfm2moe_keys(t)
    _add_tokenizer(t.writer)
    t.mat("token_embd.weight", t.n_vocab, t.n_embd)
    t.norm("token_embd_norm.weight", t.n_embd)  # LLM_TENSOR_OUTPUT_NORM_LFM2: the output norm
    t.mat("output.weight", t.n_vocab, t.n_embd)
    for il in range(t.n_layers):
        _lfm2moe_layer(t, il)
    return t.close()
