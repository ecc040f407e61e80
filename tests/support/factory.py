"""Tiny but real GGUF models for tests, written with ``gguf.GGUFWriter``.

``write_model`` writes a small, loadable model of one of ``ARCHS`` (4 query heads of 64, a
320-token byte-level ``gpt2`` vocabulary, F16 matrices, F32 norms/biases/routers, seeded
random weights) that the real llama-server serves ``/completion`` with.  The tensor and key
lists follow llama.cpp build 11434 (its src/models/ARCH.cpp loaders and src/llama-arch.cpp).

``write_header_only`` writes a Qwen3-MoE header (Qwen3-30B-A3B or Qwen3-235B-A22B shaped, Q4_K_M
or F16) with a full-size vocabulary and no tensor data (or a sparse hole where the data would
be), for parser speed, planning and compute tests.  ``make_split`` shards a model with the real
``llama-gguf-split``.
"""

from __future__ import annotations

import inspect
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QType

from support.llama import bin_path

ARCHS: tuple[str, ...] = ("qwen3moe", "gpt-oss", "deepseek2", "glm4moe", "qwen35moe", "qwen3")
MOE_ARCHS: tuple[str, ...] = tuple(a for a in ARCHS if a != "qwen3")
EXPERT_TYPES: tuple[str, ...] = ("F16", "Q8_0", "Q4_K")
# (architecture, expert type): every MoE architecture in every expert type, and dense qwen3
VARIANTS: list[tuple[str, str]] = [("qwen3", "F16")] + [
    (a, t) for a in MOE_ARCHS for t in EXPERT_TYPES
]

N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 64
SWA_WINDOW = 128
_VOCAB_SIZE = 320
_BIGRAMS = (
    "thheineranreonatenndtiesorteofedisitalarsttontngse"
    "haasouiolevecomedehiriroicneearacelichllbemasiomur"
)  # 50 letter pairs
_SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>")
_Q4K_BLOCK_BYTES = 144


@dataclass
class _Dims:
    """The shapes of one tiny model."""

    n_layers: int
    n_experts: int
    n_experts_used: int
    n_embd: int
    n_vocab: int = _VOCAB_SIZE
    n_nextn: int = 0  # NextN/MTP blocks after the n_layers trunk blocks

    @property
    def n_ff(self) -> int:
        """Width of a dense FFN block."""
        return 2 * self.n_embd

    @property
    def n_ff_exp(self) -> int:
        """Width of one routed (or shared) expert; = n_embd so Q4_K rows fit."""
        return self.n_embd


@dataclass
class _Builder:
    """Adds seeded random tensors to a writer; routed experts in the chosen type."""

    writer: gguf.GGUFWriter
    dims: _Dims
    expert_type: QType
    rng: np.random.Generator = field(default_factory=np.random.default_rng)

    def norm(self, name: str, n: int, value: float = 1.0) -> None:
        self.writer.add_tensor(name, np.full(n, value, dtype=np.float32))

    def f32(self, name: str, *shape: int, scale: float = 0.02) -> None:
        data = self.rng.standard_normal(shape, dtype=np.float32) * scale
        self.writer.add_tensor(name, data)

    def mat(self, name: str, *shape: int) -> None:
        """An F16 matrix; ``shape`` in numpy order (outer first, row length last)."""
        data = self.rng.standard_normal(shape, dtype=np.float32) * 0.02
        self.writer.add_tensor(name, data.astype(np.float16))

    def experts(self, name: str, *shape: int) -> None:
        data = self.rng.standard_normal(shape, dtype=np.float32) * 0.02
        if self.expert_type == QType.F16:
            self.writer.add_tensor(name, data.astype(np.float16))
        elif self.expert_type == QType.Q8_0:
            q8 = gguf.quants.quantize(data, QType.Q8_0)
            self.writer.add_tensor(name, q8, raw_dtype=QType.Q8_0)
        else:
            self.writer.add_tensor(name, _q4_k_blocks(self.rng, shape), raw_dtype=QType.Q4_K)


def _q4_k_blocks(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Valid Q4_K bytes for ``shape``: random nibbles, all 8 sub-scales and mins = 16.

    Each value is ``16*d*q - 16*dmin`` with ``dmin = 7.5*d``: centred, |x| <= 0.03.
    """
    if shape[-1] % 256:
        raise ValueError(f"Q4_K rows must be a multiple of 256, got {shape[-1]}")
    d = np.float16(0.00025)
    head = np.frombuffer(np.array([d, d * np.float16(7.5)], dtype=np.float16).tobytes(), np.uint8)
    scales = np.array([80] * 8 + [0] * 4, dtype=np.uint8)
    n_blocks = int(np.prod(shape)) // 256
    qs = rng.integers(0, 256, size=(n_blocks, 128), dtype=np.uint8)
    fixed = np.broadcast_to(np.concatenate([head, scales]), (n_blocks, 16))
    blocks = np.concatenate([fixed, qs], axis=1)
    return blocks.reshape(*shape[:-1], shape[-1] // 256 * _Q4K_BLOCK_BYTES)


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet, in byte order."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _add_tokenizer(writer: gguf.GGUFWriter) -> None:
    """A byte-level gpt2 vocabulary of 320 tokens with 60 merges; bos/eos set."""
    space = _byte_tokens()[ord(" ")]
    letters = [(_BIGRAMS[i], _BIGRAMS[i + 1]) for i in range(0, len(_BIGRAMS), 2)]
    pairs = letters + [(space, c) for c in "taswicbfpo"]
    tokens = _byte_tokens() + [a + b for a, b in pairs] + list(_SPECIALS)
    assert len(tokens) == _VOCAB_SIZE, len(tokens)
    n_normal = len(tokens) - len(_SPECIALS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * n_normal + [3] * len(_SPECIALS))
    writer.add_token_merges([f"{a} {b}" for a, b in pairs])
    writer.add_bos_token_id(n_normal)
    writer.add_eos_token_id(n_normal + 1)
    writer.add_pad_token_id(n_normal + 2)
    writer.add_add_bos_token(False)


def _add_common_keys(w: gguf.GGUFWriter, d: _Dims, context_length: int) -> None:
    w.add_name("moetune tiny test model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(context_length)
    w.add_embedding_length(d.n_embd)
    w.add_block_count(d.n_layers + d.n_nextn)
    if d.n_nextn:
        w.add_nextn_predict_layers(d.n_nextn)
    w.add_feed_forward_length(d.n_ff)
    w.add_head_count(N_HEAD)
    n_head_kv, key_length, value_length = _KV_SHAPES.get(w.arch, (N_HEAD_KV, HEAD_DIM, HEAD_DIM))
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(key_length)
    w.add_value_length(value_length)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    if w.arch != "qwen3":
        w.add_expert_count(d.n_experts)
        w.add_expert_used_count(d.n_experts_used)
        w.add_expert_feed_forward_length(d.n_ff_exp)


def _globals(b: _Builder) -> None:
    d = b.dims
    b.mat("token_embd.weight", d.n_vocab, d.n_embd)
    b.norm("output_norm.weight", d.n_embd)
    b.mat("output.weight", d.n_vocab, d.n_embd)


def _attention(b: _Builder, i: int, *, q_factor: int = 1, qk_norm: bool = True) -> None:
    """Plain GQA attention: q/k/v/output (+ per-head q/k norms)."""
    e, p = b.dims.n_embd, f"blk.{i}"
    b.mat(f"{p}.attn_q.weight", q_factor * N_HEAD * HEAD_DIM, e)
    b.mat(f"{p}.attn_k.weight", N_HEAD_KV * HEAD_DIM, e)
    b.mat(f"{p}.attn_v.weight", N_HEAD_KV * HEAD_DIM, e)
    b.mat(f"{p}.attn_output.weight", e, N_HEAD * HEAD_DIM)
    if qk_norm:
        b.norm(f"{p}.attn_q_norm.weight", HEAD_DIM)
        b.norm(f"{p}.attn_k_norm.weight", HEAD_DIM)


def _qkv_biases(b: _Builder, i: int) -> None:
    b.f32(f"blk.{i}.attn_q.bias", N_HEAD * HEAD_DIM)
    b.f32(f"blk.{i}.attn_k.bias", N_HEAD_KV * HEAD_DIM)
    b.f32(f"blk.{i}.attn_v.bias", N_HEAD_KV * HEAD_DIM)


def _dense_ffn(b: _Builder, i: int) -> None:
    e, f = b.dims.n_embd, b.dims.n_ff
    b.mat(f"blk.{i}.ffn_gate.weight", f, e)
    b.mat(f"blk.{i}.ffn_up.weight", f, e)
    b.mat(f"blk.{i}.ffn_down.weight", e, f)


def _routed_experts(b: _Builder, i: int) -> None:
    """Router (F32) and the three routed expert tensors (in the expert type)."""
    e, x, f = b.dims.n_embd, b.dims.n_experts, b.dims.n_ff_exp
    b.f32(f"blk.{i}.ffn_gate_inp.weight", x, e)
    b.experts(f"blk.{i}.ffn_gate_exps.weight", x, f, e)
    b.experts(f"blk.{i}.ffn_up_exps.weight", x, f, e)
    b.experts(f"blk.{i}.ffn_down_exps.weight", x, e, f)


def _shared_expert(b: _Builder, i: int) -> None:
    e, f = b.dims.n_embd, b.dims.n_ff_exp
    b.mat(f"blk.{i}.ffn_gate_shexp.weight", f, e)
    b.mat(f"blk.{i}.ffn_up_shexp.weight", f, e)
    b.mat(f"blk.{i}.ffn_down_shexp.weight", e, f)


def _qwen3_layer(b: _Builder, i: int) -> None:
    b.norm(f"blk.{i}.attn_norm.weight", b.dims.n_embd)
    _attention(b, i)
    b.norm(f"blk.{i}.ffn_norm.weight", b.dims.n_embd)
    if b.writer.arch == "qwen3":
        _dense_ffn(b, i)
    else:
        _routed_experts(b, i)


def _gpt_oss_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    w.add_sliding_window(SWA_WINDOW)


def _gpt_oss_layer(b: _Builder, i: int) -> None:
    e, x, f, p = b.dims.n_embd, b.dims.n_experts, b.dims.n_ff_exp, f"blk.{i}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.post_attention_norm.weight", e)
    _attention(b, i, qk_norm=False)
    _qkv_biases(b, i)
    b.f32(f"{p}.attn_output.bias", e)
    b.norm(f"{p}.attn_sinks.weight", N_HEAD, 0.0)
    _routed_experts(b, i)
    b.f32(f"{p}.ffn_gate_inp.bias", x)
    b.f32(f"{p}.ffn_gate_exps.bias", x, f)
    b.f32(f"{p}.ffn_up_exps.bias", x, f)
    b.f32(f"{p}.ffn_down_exps.bias", x, e)


_DS_Q_LORA, _DS_KV_LORA, _DS_ROPE, _DS_NOPE = 128, 64, 32, 32
# MLA caches one compressed "head": K row = kv_lora_rank + rope dims, V = kv_lora_rank.
_KV_SHAPES: dict[str, tuple[int, int, int]] = {
    "deepseek2": (1, _DS_KV_LORA + _DS_ROPE, _DS_KV_LORA),
}


def _deepseek2_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    w.add_key_length_mla(_DS_NOPE + _DS_ROPE)
    w.add_value_length_mla(HEAD_DIM)
    w.add_rope_dimension_count(_DS_ROPE)
    w.add_q_lora_rank(_DS_Q_LORA)
    w.add_kv_lora_rank(_DS_KV_LORA)
    w.add_leading_dense_block_count(1)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.0)


def _deepseek2_layer(b: _Builder, i: int) -> None:
    e, p = b.dims.n_embd, f"blk.{i}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.attn_q_a_norm.weight", _DS_Q_LORA)
    b.norm(f"{p}.attn_kv_a_norm.weight", _DS_KV_LORA)
    b.mat(f"{p}.attn_q_a.weight", _DS_Q_LORA, e)
    b.mat(f"{p}.attn_q_b.weight", N_HEAD * (_DS_NOPE + _DS_ROPE), _DS_Q_LORA)
    b.mat(f"{p}.attn_kv_a_mqa.weight", _DS_KV_LORA + _DS_ROPE, e)
    b.mat(f"{p}.attn_k_b.weight", N_HEAD, _DS_KV_LORA, _DS_NOPE)
    b.mat(f"{p}.attn_v_b.weight", N_HEAD, HEAD_DIM, _DS_KV_LORA)
    b.mat(f"{p}.attn_output.weight", e, N_HEAD * HEAD_DIM)
    b.norm(f"{p}.ffn_norm.weight", e)
    if i == 0:
        _dense_ffn(b, i)
        return
    _routed_experts(b, i)
    _shared_expert(b, i)


def _glm4moe_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    w.add_rope_dimension_count(HEAD_DIM // 2)
    w.add_leading_dense_block_count(1)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)


def _glm4moe_layer(b: _Builder, i: int) -> None:
    e, p = b.dims.n_embd, f"blk.{i}"
    b.norm(f"{p}.attn_norm.weight", e)
    _attention(b, i, qk_norm=False)
    _qkv_biases(b, i)
    b.norm(f"{p}.post_attention_norm.weight", e)
    if i == 0:
        _dense_ffn(b, i)
        return
    _routed_experts(b, i)
    b.f32(f"{p}.exp_probs_b.bias", b.dims.n_experts)
    _shared_expert(b, i)


_SSM_STATE, _SSM_GROUPS, _SSM_DT_RANK, _SSM_CONV = 32, 2, 4, 4
_FULL_ATTN_INTERVAL = 4


def _qwen35moe_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_dimension_sections([11, 11, 10, 0])
    w.add_ssm_conv_kernel(_SSM_CONV)
    w.add_ssm_inner_size(_SSM_STATE * _SSM_DT_RANK)
    w.add_ssm_state_size(_SSM_STATE)
    w.add_ssm_time_step_rank(_SSM_DT_RANK)
    w.add_ssm_group_count(_SSM_GROUPS)
    w.add_full_attention_interval(_FULL_ATTN_INTERVAL)
    w.add_expert_shared_feed_forward_length(d.n_ff_exp)


def _gated_delta_net(b: _Builder, i: int) -> None:
    """The recurrent (linear attention) block of a qwen35moe layer."""
    e, p = b.dims.n_embd, f"blk.{i}"
    key_dim, value_dim = _SSM_STATE * _SSM_GROUPS, _SSM_STATE * _SSM_DT_RANK
    b.mat(f"{p}.attn_qkv.weight", 2 * key_dim + value_dim, e)
    b.mat(f"{p}.attn_gate.weight", value_dim, e)
    b.f32(f"{p}.ssm_conv1d.weight", 2 * key_dim + value_dim, _SSM_CONV, scale=0.2)
    b.norm(f"{p}.ssm_dt.bias", _SSM_DT_RANK, 0.0)
    b.norm(f"{p}.ssm_a", _SSM_DT_RANK, -1.0)
    b.mat(f"{p}.ssm_beta.weight", _SSM_DT_RANK, e)
    b.mat(f"{p}.ssm_alpha.weight", _SSM_DT_RANK, e)
    b.norm(f"{p}.ssm_norm.weight", _SSM_STATE)
    b.mat(f"{p}.ssm_out.weight", e, value_dim)


def _qwen35moe_layer(b: _Builder, i: int) -> None:
    e, p = b.dims.n_embd, f"blk.{i}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.post_attention_norm.weight", e)
    if (i + 1) % _FULL_ATTN_INTERVAL == 0:
        _attention(b, i, q_factor=2)
    else:
        _gated_delta_net(b, i)
    _routed_experts(b, i)
    b.f32(f"{p}.ffn_gate_inp_shexp.weight", e)
    _shared_expert(b, i)


def _nextn_tensors(b: _Builder, i: int, own_head: bool) -> None:
    """What makes block ``i`` a NextN/MTP block: the projection of [embedding; hidden], its
    two input norms and the head norm; a head and embedding of its own only if asked."""
    e, p = b.dims.n_embd, f"blk.{i}.nextn"
    b.mat(f"{p}.eh_proj.weight", e, 2 * e)
    b.norm(f"{p}.enorm.weight", e)
    b.norm(f"{p}.hnorm.weight", e)
    b.norm(f"{p}.shared_head_norm.weight", e)
    if own_head:
        b.mat(f"{p}.embed_tokens.weight", b.dims.n_vocab, e)
        b.mat(f"{p}.shared_head_head.weight", b.dims.n_vocab, e)


def _glm4moe_nextn(b: _Builder, i: int, own_head: bool) -> None:
    """GLM-4.5-Air's last block: a full MoE decoder block plus the NextN tensors."""
    _glm4moe_layer(b, i)
    _nextn_tensors(b, i, own_head)


def _qwen35moe_nextn(b: _Builder, i: int, own_head: bool) -> None:
    """Qwen3.5/3.6-MoE's MTP block: a full-attention block (gated Q, Q/K norms), the MoE
    FFN with the gated shared expert, plus the NextN tensors."""
    e, p = b.dims.n_embd, f"blk.{i}"
    b.norm(f"{p}.attn_norm.weight", e)
    b.norm(f"{p}.post_attention_norm.weight", e)
    _attention(b, i, q_factor=2)
    _routed_experts(b, i)
    b.f32(f"{p}.ffn_gate_inp_shexp.weight", e)
    _shared_expert(b, i)
    _nextn_tensors(b, i, own_head)


_NEXTN_BLOCKS: dict[str, Callable[[_Builder, int, bool], None]] = {
    "glm4moe": _glm4moe_nextn,
    "qwen35moe": _qwen35moe_nextn,
}


def _no_keys(w: gguf.GGUFWriter, d: _Dims) -> None:
    return None


_KeysFn = Callable[[gguf.GGUFWriter, _Dims], None]
_LayerFn = Callable[[_Builder, int], None]
_RECIPES: dict[str, tuple[_KeysFn, _LayerFn]] = {
    "qwen3moe": (_no_keys, _qwen3_layer),
    "qwen3": (_no_keys, _qwen3_layer),
    "gpt-oss": (_gpt_oss_keys, _gpt_oss_layer),
    "deepseek2": (_deepseek2_keys, _deepseek2_layer),
    "glm4moe": (_glm4moe_keys, _glm4moe_layer),
    "qwen35moe": (_qwen35moe_keys, _qwen35moe_layer),
}


def _check_args(arch: str, n_embd: int, expert_type: str) -> QType:
    if arch not in _RECIPES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if expert_type not in EXPERT_TYPES:
        raise ValueError(f"expert_type must be one of {EXPERT_TYPES}, got {expert_type!r}")
    if n_embd % 256 and expert_type == "Q4_K":
        raise ValueError(f"Q4_K experts need n_embd to be a multiple of 256, got {n_embd}")
    if n_embd % 32:
        raise ValueError(f"n_embd must be a multiple of 32, got {n_embd}")
    return QType[expert_type]


def write_model(
    path: Path,
    arch: str,
    *,
    n_layers: int = 4,
    n_experts: int = 8,
    n_experts_used: int = 2,
    n_embd: int = 256,
    expert_type: str = "F16",
    context_length: int = 4096,
    seed: int = 0,
    n_nextn: int = 0,
    nextn_own_head: bool = False,
) -> Path:
    """Write a tiny loadable ``arch`` model to ``path`` and return ``path``.

    Expert FFN width = ``n_embd``, dense FFN width = 2 * ``n_embd``.  ``expert_type`` applies
    to the routed expert tensors only.  deepseek2 and glm4moe get one leading dense block.
    ``n_nextn``: NextN/MTP blocks after the ``n_layers`` trunk blocks (glm4moe, qwen35moe;
    ``block_count`` counts them, ``nextn_predict_layers`` says how many), with their own
    ``embed_tokens``/``shared_head_head`` when ``nextn_own_head``.
    """
    qtype = _check_args(arch, n_embd, expert_type)
    if n_nextn and arch not in _NEXTN_BLOCKS:
        raise ValueError(f"NextN blocks are written for {tuple(_NEXTN_BLOCKS)}, not {arch!r}")
    dims = _Dims(n_layers, n_experts, n_experts_used, n_embd, n_nextn=n_nextn)
    keys_fn, layer_fn = _RECIPES[arch]
    writer = gguf.GGUFWriter(path, arch)
    _add_common_keys(writer, dims, context_length)
    keys_fn(writer, dims)
    _add_tokenizer(writer)
    builder = _Builder(writer, dims, qtype, np.random.default_rng(seed))
    _globals(builder)
    for i in range(n_layers):
        layer_fn(builder, i)
    for i in range(n_layers, n_layers + n_nextn):
        _NEXTN_BLOCKS[arch](builder, i, nextn_own_head)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# --- header-only Qwen3-shaped files ---------------------------------------------------------


@dataclass(frozen=True)
class MoeShape:
    """The shapes of a Qwen3-MoE model, as its config.json gives them."""

    name: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_experts: int
    n_experts_used: int
    n_ff_exp: int
    n_ff: int
    n_vocab: int = 151936
    context_length: int = 40960


QWEN3_30B_A3B = MoeShape("Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 128, 8, 768, 6144)
QWEN3_235B_A22B = MoeShape("Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 128, 8, 1536, 12288)
# A quant's matrices: (most of them, those llama-quant gives more bits, its file type).
# Q4_K_M and F16 are the mixes the tests check; the others are simpler stand-ins of the same
# names (one type, the bumped layers one step up), for repositories of many quants.
SCHEMES: dict[str, tuple[QType, QType, gguf.LlamaFileType]] = {
    "Q4_K_M": (QType.Q4_K, QType.Q6_K, gguf.LlamaFileType.MOSTLY_Q4_K_M),
    "F16": (QType.F16, QType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "IQ1_S": (QType.IQ1_S, QType.IQ2_XXS, gguf.LlamaFileType.MOSTLY_IQ1_S),
    "IQ1_M": (QType.IQ1_M, QType.IQ2_XXS, gguf.LlamaFileType.MOSTLY_IQ1_M),
    "IQ2_XXS": (QType.IQ2_XXS, QType.IQ2_XS, gguf.LlamaFileType.MOSTLY_IQ2_XXS),
    "IQ2_XS": (QType.IQ2_XS, QType.IQ2_S, gguf.LlamaFileType.MOSTLY_IQ2_XS),
    "Q2_K": (QType.Q2_K, QType.Q3_K, gguf.LlamaFileType.MOSTLY_Q2_K),
    "IQ3_XXS": (QType.IQ3_XXS, QType.IQ3_S, gguf.LlamaFileType.MOSTLY_IQ3_XXS),
    "Q3_K_S": (QType.Q3_K, QType.Q3_K, gguf.LlamaFileType.MOSTLY_Q3_K_S),
    "Q3_K_M": (QType.Q3_K, QType.Q4_K, gguf.LlamaFileType.MOSTLY_Q3_K_M),
    "Q3_K_L": (QType.Q3_K, QType.Q5_K, gguf.LlamaFileType.MOSTLY_Q3_K_L),
    "IQ4_XS": (QType.IQ4_XS, QType.Q5_K, gguf.LlamaFileType.MOSTLY_IQ4_XS),
    "IQ4_NL": (QType.IQ4_NL, QType.Q5_K, gguf.LlamaFileType.MOSTLY_IQ4_NL),
    "Q4_0": (QType.Q4_0, QType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "Q4_K_S": (QType.Q4_K, QType.Q5_K, gguf.LlamaFileType.MOSTLY_Q4_K_S),
    "Q5_K_S": (QType.Q5_K, QType.Q5_K, gguf.LlamaFileType.MOSTLY_Q5_K_S),
    "Q5_K_M": (QType.Q5_K, QType.Q6_K, gguf.LlamaFileType.MOSTLY_Q5_K_M),
    "Q6_K": (QType.Q6_K, QType.Q6_K, gguf.LlamaFileType.MOSTLY_Q6_K),
    "Q8_0": (QType.Q8_0, QType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "BF16": (QType.BF16, QType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
}
QUANTS: tuple[str, ...] = tuple(SCHEMES)


def _use_more_bits(i: int, n: int) -> bool:
    """llama-quant's rule for which layers Q4_K_M bumps to Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _qwen3moe_tensors(s: MoeShape, quant: str) -> list[tuple[str, tuple[int, ...], QType]]:
    """(name, numpy-order shape, type) of every tensor; ``quant`` is one of :data:`SCHEMES`
    (norms and the router stay F32)."""
    e, q, kv, hd, ff, x = (
        s.n_embd,
        s.n_head * s.head_dim,
        s.n_head_kv * s.head_dim,
        s.head_dim,
        s.n_ff_exp,
        s.n_experts,
    )
    f32 = QType.F32
    q4, q6, _ = SCHEMES[quant]
    out: list[tuple[str, tuple[int, ...], QType]] = [
        ("token_embd.weight", (s.n_vocab, e), q4),
        ("output_norm.weight", (e,), f32),
        ("output.weight", (s.n_vocab, e), q6),
    ]
    for i in range(s.n_layers):
        hi = q6 if _use_more_bits(i, s.n_layers) else q4
        p = f"blk.{i}"
        out += [
            (f"{p}.attn_norm.weight", (e,), f32),
            (f"{p}.attn_q.weight", (q, e), q4),
            (f"{p}.attn_k.weight", (kv, e), q4),
            (f"{p}.attn_v.weight", (kv, e), hi),
            (f"{p}.attn_output.weight", (e, q), q4),
            (f"{p}.attn_q_norm.weight", (hd,), f32),
            (f"{p}.attn_k_norm.weight", (hd,), f32),
            (f"{p}.ffn_norm.weight", (e,), f32),
            (f"{p}.ffn_gate_inp.weight", (x, e), f32),
            (f"{p}.ffn_gate_exps.weight", (x, ff, e), q4),
            (f"{p}.ffn_up_exps.weight", (x, ff, e), q4),
            (f"{p}.ffn_down_exps.weight", (x, e, ff), hi),
        ]
    return out


def _nbytes(shape: Sequence[int], qtype: QType) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape[:-1])) * (shape[-1] // block) * type_size


def _add_big_tokenizer(w: gguf.GGUFWriter, n_vocab: int, n_merges: int) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"tok{i}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges([f"m{i} n{i}" for i in range(n_merges)])
    w.add_eos_token_id(min(151645, n_vocab - 1))
    w.add_pad_token_id(min(151643, n_vocab - 1))
    w.add_bos_token_id(min(151643, n_vocab - 1))
    w.add_add_bos_token(False)


def _add_big_keys(w: gguf.GGUFWriter, s: MoeShape, quant: str) -> None:
    w.add_name(f"{s.name} header-only")
    w.add_file_type(SCHEMES[quant][2])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(s.context_length)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_block_count(s.n_layers)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(s.n_experts)
    w.add_expert_used_count(s.n_experts_used)
    w.add_expert_feed_forward_length(s.n_ff_exp)


def write_header_only(
    path: Path,
    *,
    shape: MoeShape = QWEN3_30B_A3B,
    quant: str = "Q4_K_M",
    n_vocab: int | None = None,
    n_merges: int = 151387,
    n_layers: int | None = None,
    n_experts: int | None = None,
    n_experts_used: int | None = None,
    sparse: bool = False,
) -> Path:
    """Write a Qwen3-MoE header of ``shape`` (default Qwen3-30B-A3B) in ``quant`` (Q4_K_M,
    F16 matrices as in the public --fit data point, or another of :data:`SCHEMES`), with a
    full vocabulary and 3 + 12 * n_layers tensor infos; the keyword sizes override the
    shape's.

    No tensor data is written: the file ends after the tensor infos, or with ``sparse`` it is
    ``truncate``d to its full size (about 17 GiB by default) so the data region is a hole.
    Returns ``path``.
    """
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {QUANTS}, got {quant!r}")
    shape = replace(
        shape,
        n_vocab=shape.n_vocab if n_vocab is None else n_vocab,
        n_layers=shape.n_layers if n_layers is None else n_layers,
        n_experts=shape.n_experts if n_experts is None else n_experts,
        n_experts_used=shape.n_experts_used if n_experts_used is None else n_experts_used,
    )
    w = gguf.GGUFWriter(path, "qwen3moe")
    _add_big_keys(w, shape, quant)
    _add_big_tokenizer(w, shape.n_vocab, n_merges)
    data_bytes = 0
    for name, dims, qtype in _qwen3moe_tensors(shape, quant):
        nbytes = _nbytes(dims, qtype)
        w.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data_bytes += gguf.GGUFWriter.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    if sparse:
        data_start = gguf.GGUFWriter.ggml_pad(path.stat().st_size, w.data_alignment)
        with path.open("r+b") as f:
            f.truncate(data_start + data_bytes)
    return path


def write_glm45_air_header(path: Path) -> Path:
    """A header-only GLM-4.5-Air-shaped file (glm4moe, Q8_0), the shapes of the config.json of
    INTELLECT-3-Base, a GLM-4.5-Air-Base continuation that keeps its architecture
    (https://huggingface.co/PrimeIntellect/INTELLECT-3-Base/blob/main/config.json): 46 layers,
    hidden 4096, dense FFN 10944 in the first (first_k_dense_replace 1), 96 heads and 8 KV
    heads of 128 with Q/K/V biases (attention_bias), half the head rotated
    (partial_rotary_factor 0.5), 128 routed experts of 1408 with 8 used and 1 shared, one
    NextN block (num_nextn_predict_layers 1: block 46, a whole MoE block plus eh_proj, enorm,
    hnorm and shared_head_norm), vocabulary 151552, context 131072, rope_theta 1000000.
    Every matrix Q8_0 (as llama-quantize writes Q8_0), norms, biases and the router F32; the
    tensor list of src/models/glm4-moe.cpp (build 11434). No tensor data."""
    n_layer, e, n_ff, n_head, n_kv, hd, x, ff, vocab = (
        46,
        4096,
        10944,
        96,
        8,
        128,
        128,
        1408,
        151552,
    )
    w = gguf.GGUFWriter(path, "glm4moe")
    w.add_name("GLM-4.5-Air shapes Q8_0 (header only)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(131072)
    w.add_embedding_length(e)
    w.add_block_count(n_layer + 1)
    w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd // 2)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(x)
    w.add_expert_used_count(8)
    w.add_expert_feed_forward_length(ff)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    q, f32 = QType.Q8_0, QType.F32
    tensors: list[tuple[str, tuple[int, ...], QType]] = [
        ("token_embd.weight", (vocab, e), q),
        ("output_norm.weight", (e,), f32),
        ("output.weight", (vocab, e), q),
    ]
    for i in range(n_layer + 1):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_norm.weight", (e,), f32),
            (f"{b}.attn_q.weight", (n_head * hd, e), q),
            (f"{b}.attn_q.bias", (n_head * hd,), f32),
            (f"{b}.attn_k.weight", (n_kv * hd, e), q),
            (f"{b}.attn_k.bias", (n_kv * hd,), f32),
            (f"{b}.attn_v.weight", (n_kv * hd, e), q),
            (f"{b}.attn_v.bias", (n_kv * hd,), f32),
            (f"{b}.attn_output.weight", (e, n_head * hd), q),
            (f"{b}.post_attention_norm.weight", (e,), f32),
        ]
        if i == 0:
            tensors += [
                (f"{b}.ffn_gate.weight", (n_ff, e), q),
                (f"{b}.ffn_up.weight", (n_ff, e), q),
                (f"{b}.ffn_down.weight", (e, n_ff), q),
            ]
            continue
        tensors += [
            (f"{b}.ffn_gate_inp.weight", (x, e), f32),
            (f"{b}.exp_probs_b.bias", (x,), f32),
            (f"{b}.ffn_gate_exps.weight", (x, ff, e), q),
            (f"{b}.ffn_up_exps.weight", (x, ff, e), q),
            (f"{b}.ffn_down_exps.weight", (x, e, ff), q),
            (f"{b}.ffn_gate_shexp.weight", (ff, e), q),
            (f"{b}.ffn_up_shexp.weight", (ff, e), q),
            (f"{b}.ffn_down_shexp.weight", (e, ff), q),
        ]
        if i == n_layer:
            tensors += [
                (f"{b}.nextn.eh_proj.weight", (e, 2 * e), q),
                (f"{b}.nextn.enorm.weight", (e,), f32),
                (f"{b}.nextn.hnorm.weight", (e,), f32),
                (f"{b}.nextn.shared_head_norm.weight", (e,), f32),
            ]
    for name, shape, qtype in tensors:
        w.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


def make_split(model: Path, out_prefix: Path, max_tensors: int) -> list[Path]:
    """Shard ``model`` with the real ``llama-gguf-split``; return the shards in order."""
    argv = [str(bin_path("llama-gguf-split")), "--split", "--split-max-tensors", str(max_tensors)]
    done = subprocess.run(
        [*argv, str(model), str(out_prefix)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"llama-gguf-split failed ({done.returncode}):\n{done.stderr[-2000:]}")
    shards = sorted(out_prefix.parent.glob(f"{out_prefix.name}-*-of-*.gguf"))
    if not shards:
        raise RuntimeError(f"llama-gguf-split wrote no shards:\n{done.stdout[-2000:]}")
    return shards


_INTERNAL_KEYS = ("GGUF.", "general.architecture", "tokenizer.")


def loadable_copy(header: Path, dst: Path) -> Path:
    """A copy of a header-only file (an example under examples/models) that llama.cpp loads:
    its metadata and tensor infos, a placeholder vocabulary as large as its embedding, and
    the data region as a hole (the file is sparse). For llama-fit-params, which reads no
    weights but needs a vocabulary."""
    from moetune.gguf.reader import read_header

    holed = dst.with_name(dst.name + ".holed")
    holed.write_bytes(header.read_bytes())
    os.truncate(holed, read_header(header).data_end)
    try:
        reader = gguf.GGUFReader(holed)
        arch = str(reader.fields["general.architecture"].contents())
        writer = gguf.GGUFWriter(dst, arch)
        for field in reader.fields.values():
            if field.name.startswith(_INTERNAL_KEYS):
                continue
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub)
        embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
        _add_big_tokenizer(writer, int(embd.shape[1]), 10)
        data_bytes = 0
        for t in reader.tensors:
            dims = tuple(int(d) for d in reversed(t.shape))
            writer.add_tensor_info(
                t.name, dims, np.dtype(np.float32), int(t.n_bytes), raw_dtype=t.tensor_type
            )
            data_bytes += gguf.GGUFWriter.ggml_pad(int(t.n_bytes), writer.data_alignment)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
    finally:
        holed.unlink(missing_ok=True)
    data_start = gguf.GGUFWriter.ggml_pad(dst.stat().st_size, writer.data_alignment)
    os.truncate(dst, data_start + data_bytes)
    return dst


class ModelFactory:
    """Tiny models written on first use and kept for the whole session, one file per
    (writer, options).  ``factory("qwen3moe", n_layers=8)`` is ``write_model`` (the file is
    ``qwen3moe.gguf`` unless ``file_name`` says otherwise); ``factory.header_only(...)`` is
    ``write_header_only``; ``factory.written(name, write)`` is any other writer
    (``write(path) -> path``), by a name unique in the suite.

    The files are shared: a test that changes a model writes its own copy instead.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: dict[tuple[object, ...], Path] = {}

    def _path(self, key: tuple[object, ...], file_name: str, write: Callable[[Path], Path]) -> Path:
        if key not in self._paths:
            folder = self.root / str(len(self._paths))
            folder.mkdir(parents=True, exist_ok=True)
            self._paths[key] = write(folder / file_name)
        return self._paths[key]

    def __call__(self, arch: str, file_name: str | None = None, **options: Any) -> Path:
        given = inspect.signature(write_model).bind(Path(), arch, **options)
        given.apply_defaults()  # the same model asked for with or without a default: one file
        name = file_name or f"{arch}.gguf"
        key = ("model", name, *given.arguments.items())
        return self._path(key, name, lambda p: write_model(p, arch, **options))

    def header_only(self, file_name: str = "header.gguf", **options: Any) -> Path:
        key = ("header", file_name, *sorted(options.items()))
        return self._path(key, file_name, lambda p: write_header_only(p, **options))

    def written(self, name: str, write: Callable[[Path], Path]) -> Path:
        return self._path(("written", name), f"{name}.gguf", write)
