"""Tiny loadable fixtures of the recurrent / hybrid MoE architectures of llama.cpp build 11434.

Each writer is registered (``archfix.fixture``) under an architecture name (as
src/llama-arch.cpp spells it); it writes a small model of it at a path and returns the path; the
architecture matrix (tests/test_arch_matrix.py) loads each in the real llama-server and compares
moetune's estimate with the buffers it logs. The keys and tensors follow each architecture's
``load_arch_hparams`` / ``load_arch_tensors`` (src/models/<arch>.cpp); shapes are chosen so that
a q8_0 cache and the F16 matrices fit (head sizes multiples of 32).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QType

from support.archfix import fixture
from support.factory import (
    HEAD_DIM,
    N_HEAD,
    N_HEAD_KV,
    _add_common_keys,
    _add_tokenizer,
    _attention,
    _Builder,
    _Dims,
    _globals,
    _routed_experts,
    _shared_expert,
)

N_LAYERS = 8
N_EMBD = 256
N_EXPERTS, N_EXPERTS_USED = 8, 2

_LayerFn = Callable[[_Builder, int], None]
_KeysFn = Callable[[gguf.GGUFWriter, _Dims], None]


def _write(
    path: Path, arch: str, keys: _KeysFn, layer: _LayerFn, *, common: bool = True, seed: int = 0
) -> Path:
    """The common frame: header keys (factory's, unless ``common`` is off and ``keys`` writes
    them all), tokenizer, embeddings/output, every block."""
    dims = _Dims(N_LAYERS, N_EXPERTS, N_EXPERTS_USED, N_EMBD)
    writer = gguf.GGUFWriter(path, arch)
    if common:
        _add_common_keys(writer, dims, 4096)
    keys(writer, dims)
    _add_tokenizer(writer)
    builder = _Builder(writer, dims, QType.F16, np.random.default_rng(seed))
    _globals(builder)
    for il in range(N_LAYERS):
        layer(builder, il)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --- qwen3next: gated delta net with the fused beta/alpha projection ---------------------------

_GDN_STATE, _GDN_GROUPS, _GDN_V_HEADS, _GDN_CONV = 32, 2, 4, 4
_GDN_INTERVAL = 4


def _qwen3next_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_ssm_conv_kernel(_GDN_CONV)
    w.add_ssm_inner_size(_GDN_STATE * _GDN_V_HEADS)
    w.add_ssm_state_size(_GDN_STATE)
    w.add_ssm_time_step_rank(_GDN_V_HEADS)
    w.add_ssm_group_count(_GDN_GROUPS)
    w.add_full_attention_interval(_GDN_INTERVAL)
    w.add_expert_shared_feed_forward_length(d.n_ff_exp)


def _qwen3next_layer(b: _Builder, il: int) -> None:
    """src/models/qwen3next.cpp load_block_trunk: full attention every 4th block (gated Q,
    Q/K norms), otherwise the delta net with ``ssm_ba``; MoE FFN with a gated shared expert."""
    e, p = b.dims.n_embd, f"blk.{il}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.post_attention_norm.weight", e)
    if (il + 1) % _GDN_INTERVAL == 0:
        _attention(b, il, q_factor=2)
    else:
        key_dim, value_dim = _GDN_STATE * _GDN_GROUPS, _GDN_STATE * _GDN_V_HEADS
        b.mat(f"{p}.attn_qkv.weight", 2 * key_dim + value_dim, e)
        b.mat(f"{p}.attn_gate.weight", value_dim, e)
        b.f32(f"{p}.ssm_conv1d.weight", 2 * key_dim + value_dim, _GDN_CONV, scale=0.2)
        b.norm(f"{p}.ssm_dt.bias", _GDN_V_HEADS, 0.0)
        b.norm(f"{p}.ssm_a", _GDN_V_HEADS, -1.0)
        b.mat(f"{p}.ssm_ba.weight", 2 * _GDN_V_HEADS, e)
        b.norm(f"{p}.ssm_norm.weight", _GDN_STATE)
        b.mat(f"{p}.ssm_out.weight", e, value_dim)
    _routed_experts(b, il)
    b.f32(f"{p}.ffn_gate_inp_shexp.weight", e)
    _shared_expert(b, il)


@fixture("qwen3next")
def write_qwen3next(path: Path) -> Path:
    return _write(path, "qwen3next", _qwen3next_keys, _qwen3next_layer)


def _base_keys(w: gguf.GGUFWriter, d: _Dims, head_count_kv: list[int] | int) -> None:
    """factory's common keys, with a per-layer KV head count (0 marks a recurrent layer in
    the Mamba hybrids) and no expert widths (each recipe writes its own)."""
    w.add_name("moetune tiny test model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(4096)
    w.add_embedding_length(d.n_embd)
    w.add_block_count(d.n_layers)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(head_count_kv)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(d.n_experts)
    w.add_expert_used_count(d.n_experts_used)


# --- Mamba-2 mixers (src/models/mamba-base.cpp build_mamba2_layer) -----------------------------

_M2_STATE, _M2_GROUPS, _M2_HEADS, _M2_CONV = 32, 1, 8, 4
_M2_INNER = 2 * N_EMBD  # granite-hybrid asserts an expansion factor of 2


def _mamba2(b: _Builder, il: int, *, inner: int = _M2_INNER, groups: int = _M2_GROUPS) -> None:
    """ssm_in (z, xBC, dt), the depthwise conv (+bias), dt bias, A, D, grouped norm, out."""
    e, p = b.dims.n_embd, f"blk.{il}"
    channels = inner + 2 * groups * _M2_STATE
    b.mat(f"{p}.ssm_in.weight", inner + channels + _M2_HEADS, e)
    b.f32(f"{p}.ssm_conv1d.weight", channels, _M2_CONV, scale=0.2)
    b.f32(f"{p}.ssm_conv1d.bias", channels)
    b.norm(f"{p}.ssm_dt.bias", _M2_HEADS, 0.0)
    b.writer.add_tensor(f"{p}.ssm_a", np.full((_M2_HEADS, 1), -1.0, dtype=np.float32))
    b.writer.add_tensor(f"{p}.ssm_d", np.ones((_M2_HEADS, 1), dtype=np.float32))
    b.writer.add_tensor(
        f"{p}.ssm_norm.weight", np.ones((groups, inner // groups), dtype=np.float32)
    )
    b.mat(f"{p}.ssm_out.weight", e, inner)


def _mamba2_keys(w: gguf.GGUFWriter, inner: int, groups: int) -> None:
    w.add_ssm_conv_kernel(_M2_CONV)
    w.add_ssm_inner_size(inner)
    w.add_ssm_state_size(_M2_STATE)
    w.add_ssm_time_step_rank(_M2_HEADS)
    w.add_ssm_group_count(groups)


# --- granitehybrid (Granite 4.0 H: Mamba-2 + GQA, MoE with a shared expert) --------------------

_GRANITE_ATTN = frozenset({3, 7})  # n_head_kv = 0 marks the other (recurrent) layers


def _granite_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    kv = [N_HEAD_KV if il in _GRANITE_ATTN else 0 for il in range(d.n_layers)]
    _base_keys(w, d, kv)
    w.add_feed_forward_length(d.n_ff_exp)  # granite's routed experts are n_ff wide
    w.add_expert_shared_feed_forward_length(d.n_ff_exp)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_residual_scale(0.22)
    w.add_embedding_scale(12.0)
    w.add_logit_scale(8.0)
    w.add_attention_scale(0.0078125)
    _mamba2_keys(w, _M2_INNER, _M2_GROUPS)


def _granite_layer(b: _Builder, il: int) -> None:
    """src/models/granite-hybrid.cpp load_arch_tensors."""
    e, p = b.dims.n_embd, f"blk.{il}"
    b.norm(f"{p}.attn_norm.weight", e)
    if il in _GRANITE_ATTN:
        _attention(b, il, qk_norm=False)
    else:
        _mamba2(b, il)
    b.norm(f"{p}.ffn_norm.weight", e)
    _routed_experts(b, il)
    _shared_expert(b, il)


@fixture("granitehybrid")
def write_granitehybrid(path: Path) -> Path:
    return _write(path, "granitehybrid", _granite_keys, _granite_layer, common=False)


# --- jamba (Mamba-1 + GQA without RoPE, MoE every other block) --------------------------------

_M1_STATE, _M1_DT_RANK, _M1_CONV = 16, 16, 4
_M1_INNER = 2 * N_EMBD  # jamba asserts an expansion factor of 2
_JAMBA_ATTN = frozenset({4})


def _jamba_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    kv = [N_HEAD_KV if il in _JAMBA_ATTN else 0 for il in range(d.n_layers)]
    _base_keys(w, d, kv)
    w.add_feed_forward_length(d.n_ff_exp)  # dense blocks and experts alike
    w.add_ssm_conv_kernel(_M1_CONV)
    w.add_ssm_inner_size(_M1_INNER)
    w.add_ssm_state_size(_M1_STATE)
    w.add_ssm_time_step_rank(_M1_DT_RANK)


def _mamba1(b: _Builder, il: int) -> None:
    """src/models/jamba.cpp: ssm_in (x | z), conv (+bias), ssm_x (dt | B | C) with RMS norms
    on each, ssm_dt (+bias), A [d_state, d_inner], D, out."""
    e, p, inner = b.dims.n_embd, f"blk.{il}", _M1_INNER
    b.mat(f"{p}.ssm_in.weight", 2 * inner, e)
    b.f32(f"{p}.ssm_conv1d.weight", inner, _M1_CONV, scale=0.2)
    b.f32(f"{p}.ssm_conv1d.bias", inner)
    b.mat(f"{p}.ssm_x.weight", _M1_DT_RANK + 2 * _M1_STATE, inner)
    b.norm(f"{p}.ssm_dt_norm.weight", _M1_DT_RANK)
    b.mat(f"{p}.ssm_dt.weight", inner, _M1_DT_RANK)
    b.norm(f"{p}.ssm_dt.bias", inner, 0.0)
    b.norm(f"{p}.ssm_b_norm.weight", _M1_STATE)
    b.norm(f"{p}.ssm_c_norm.weight", _M1_STATE)
    b.writer.add_tensor(f"{p}.ssm_a", np.full((inner, _M1_STATE), -1.0, dtype=np.float32))
    b.norm(f"{p}.ssm_d", inner)
    b.mat(f"{p}.ssm_out.weight", e, inner)


def _jamba_layer(b: _Builder, il: int) -> None:
    e, f, p = b.dims.n_embd, b.dims.n_ff_exp, f"blk.{il}"
    b.norm(f"{p}.attn_norm.weight", e)
    if il in _JAMBA_ATTN:
        _attention(b, il, qk_norm=False)
    else:
        _mamba1(b, il)
    b.norm(f"{p}.ffn_norm.weight", e)
    if il % 2:
        _routed_experts(b, il)
    else:
        b.mat(f"{p}.ffn_gate.weight", f, e)
        b.mat(f"{p}.ffn_up.weight", f, e)
        b.mat(f"{p}.ffn_down.weight", e, f)


@fixture("jamba")
def write_jamba(path: Path) -> Path:
    return _write(path, "jamba", _jamba_keys, _jamba_layer, common=False)


__all__ = ["N_HEAD", "N_HEAD_KV"]
