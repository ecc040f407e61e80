"""Write the header-only example models in this folder.

Each file holds a real model's metadata and tensor infos (names, shapes, ggml types) but no
tensor data and no vocabulary, so it is a few hundred KB instead of tens of GB, and moetune
can inspect and plan it on any machine. Shapes come from each model's public Hugging Face
``config.json``; tensor types follow llama-quantize's rules (src/llama-quant.cpp,
``llama_tensor_get_type_impl``) for the named file type.

    python examples/models/make_header_only.py            # rewrites the files beside it
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

HERE = Path(__file__).resolve().parent
Tensor = tuple[str, tuple[int, ...], T]  # name, shape in numpy order (outermost first), type


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp: the layers Q4_K_M bumps to Q6_K (attn_v and ffn_down)."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


class _GqaMoe(Protocol):
    """The shape fields a GQA MoE example shares (Qwen3MoE, GptOss, Llama4Scout)."""

    @property
    def n_layers(self) -> int: ...

    @property
    def n_embd(self) -> int: ...

    @property
    def n_head(self) -> int: ...

    @property
    def n_head_kv(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def n_ff_exp(self) -> int: ...

    @property
    def n_experts(self) -> int: ...

    @property
    def n_experts_used(self) -> int: ...

    @property
    def n_ctx_train(self) -> int: ...


def moe_keys(w: gguf.GGUFWriter, m: _GqaMoe, n_ff: int) -> None:
    """Context, widths, block count and the experts, in the order every example writes them."""
    w.add_context_length(m.n_ctx_train)
    w.add_embedding_length(m.n_embd)
    w.add_block_count(m.n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_expert_feed_forward_length(m.n_ff_exp)
    w.add_expert_count(m.n_experts)
    w.add_expert_used_count(m.n_experts_used)


def gqa_keys(w: gguf.GGUFWriter, m: _GqaMoe) -> None:
    """The attention heads and their K/V sizes."""
    w.add_head_count(m.n_head)
    w.add_head_count_kv(m.n_head_kv)
    w.add_key_length(m.head_dim)
    w.add_value_length(m.head_dim)


def q4_k_m_block(b: str, m: _GqaMoe, more: T) -> Iterator[Tensor]:
    """A Q4_K_M block's attention (``more``: attn_v's type, Q6_K on use_more_bits layers)."""
    e, q, kv = m.n_embd, m.n_head * m.head_dim, m.n_head_kv * m.head_dim
    yield f"{b}.attn_norm.weight", (e,), T.F32
    yield f"{b}.attn_q.weight", (q, e), T.Q4_K
    yield f"{b}.attn_k.weight", (kv, e), T.Q4_K
    yield f"{b}.attn_v.weight", (kv, e), more
    yield f"{b}.attn_output.weight", (e, q), T.Q4_K


def q4_k_m_experts(b: str, m: _GqaMoe, more: T) -> Iterator[Tensor]:
    """A Q4_K_M block's FFN norm, router and routed experts."""
    e, ff, x = m.n_embd, m.n_ff_exp, m.n_experts
    yield f"{b}.ffn_norm.weight", (e,), T.F32
    yield f"{b}.ffn_gate_inp.weight", (x, e), T.F32
    yield f"{b}.ffn_gate_exps.weight", (x, ff, e), T.Q4_K
    yield f"{b}.ffn_up_exps.weight", (x, ff, e), T.Q4_K
    yield f"{b}.ffn_down_exps.weight", (x, e, ff), more


@dataclass(frozen=True)
class Qwen3MoE:
    """Qwen/Qwen3-30B-A3B config.json."""

    n_layers: int = 48
    n_embd: int = 2048
    n_head: int = 32
    n_head_kv: int = 4
    head_dim: int = 128
    n_ff_exp: int = 768
    n_experts: int = 128
    n_experts_used: int = 8
    n_vocab: int = 151936
    n_ctx_train: int = 40960

    def keys(self, w: gguf.GGUFWriter) -> None:
        w.add_name("Qwen3-30B-A3B (header only)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
        moe_keys(w, self, 6144)
        gqa_keys(w, self)
        w.add_rope_freq_base(1e6)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_vocab_size(self.n_vocab)

    def tensors(self) -> Iterator[Tensor]:
        """Q4_K_M: Q4_K by default, output Q6_K, attn_v/ffn_down Q6_K on use_more_bits layers."""
        e = self.n_embd
        yield "token_embd.weight", (self.n_vocab, e), T.Q4_K
        yield "output_norm.weight", (e,), T.F32
        yield "output.weight", (self.n_vocab, e), T.Q6_K
        for i in range(self.n_layers):
            more = T.Q6_K if use_more_bits(i, self.n_layers) else T.Q4_K
            b = f"blk.{i}"
            yield from q4_k_m_block(b, self, more)
            yield f"{b}.attn_q_norm.weight", (self.head_dim,), T.F32
            yield f"{b}.attn_k_norm.weight", (self.head_dim,), T.F32
            yield from q4_k_m_experts(b, self, more)


@dataclass(frozen=True)
class GptOss:
    """openai/gpt-oss-120b config.json; ``GPT_OSS_20B`` is openai/gpt-oss-20b's
    (https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json: num_hidden_layers 24,
    num_local_experts 32, the other shapes as 120b's)."""

    name: str = "gpt-oss-120b"
    n_layers: int = 36
    n_embd: int = 2880
    n_head: int = 64
    n_head_kv: int = 8
    head_dim: int = 64
    n_ff_exp: int = 2880
    n_experts: int = 128
    n_experts_used: int = 4
    n_vocab: int = 201088
    n_ctx_train: int = 131072
    sliding_window: int = 128

    def keys(self, w: gguf.GGUFWriter) -> None:
        w.add_name(f"{self.name} (header only)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
        moe_keys(w, self, self.n_ff_exp)
        gqa_keys(w, self)
        w.add_sliding_window(self.sliding_window)
        w.add_rope_freq_base(150000.0)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(self.n_vocab)

    def tensors(self) -> Iterator[Tensor]:
        """MXFP4_MOE: 3-D expert weights MXFP4, other matrices Q8_0 (output and token
        embedding too), biases, norms, sinks and the router F32 (never quantized)."""
        e, q, kv, ff, x = (
            self.n_embd,
            self.n_head * self.head_dim,
            self.n_head_kv * self.head_dim,
            self.n_ff_exp,
            self.n_experts,
        )
        yield "token_embd.weight", (self.n_vocab, e), T.Q8_0
        yield "output_norm.weight", (e,), T.F32
        yield "output.weight", (self.n_vocab, e), T.Q8_0
        for i in range(self.n_layers):
            b = f"blk.{i}"
            yield f"{b}.attn_norm.weight", (e,), T.F32
            for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
                yield f"{b}.{name}.weight", (rows, e), T.Q8_0
                yield f"{b}.{name}.bias", (rows,), T.F32
            yield f"{b}.attn_output.weight", (e, q), T.Q8_0
            yield f"{b}.attn_output.bias", (e,), T.F32
            yield f"{b}.attn_sinks.weight", (self.n_head,), T.F32
            yield f"{b}.post_attention_norm.weight", (e,), T.F32
            yield f"{b}.ffn_gate_inp.weight", (x, e), T.F32
            yield f"{b}.ffn_gate_inp.bias", (x,), T.F32
            for name, (rows, cols) in (
                ("ffn_gate_exps", (ff, e)),
                ("ffn_up_exps", (ff, e)),
                ("ffn_down_exps", (e, ff)),
            ):
                yield f"{b}.{name}.weight", (x, rows, cols), T.MXFP4
                yield f"{b}.{name}.bias", (x, rows), T.F32


GPT_OSS_20B = GptOss(name="gpt-oss-20b", n_layers=24, n_experts=32)


@dataclass(frozen=True)
class Llama4Scout:
    """meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (text_config): every block MoE
    (interleave_moe_layer_step 1) with a shared expert; chunked attention (8192-token chunks)
    on 3 of every 4 blocks, which llama.cpp's loader sets itself (src/models/llama4.cpp)."""

    n_layers: int = 48
    n_embd: int = 5120
    n_head: int = 40
    n_head_kv: int = 8
    head_dim: int = 128
    n_ff_exp: int = 8192
    n_ff: int = 16384
    n_experts: int = 16
    n_experts_used: int = 1
    n_vocab: int = 202048
    n_ctx_train: int = 10485760

    def keys(self, w: gguf.GGUFWriter) -> None:
        w.add_name("Llama-4-Scout-17B-16E-Instruct (header only)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
        moe_keys(w, self, self.n_ff)
        w.add_interleave_moe_layer_step(1)
        gqa_keys(w, self)
        w.add_rope_dimension_count(self.head_dim)
        w.add_rope_freq_base(500000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(self.n_vocab)

    def tensors(self) -> Iterator[Tensor]:
        """Q4_K_M as for Qwen3: Q4_K, output Q6_K, attn_v/ffn_down Q6_K on use_more_bits
        layers; norms and the router F32; the shared expert like the routed ones."""
        e, ff = self.n_embd, self.n_ff_exp
        yield "token_embd.weight", (self.n_vocab, e), T.Q4_K
        yield "output_norm.weight", (e,), T.F32
        yield "output.weight", (self.n_vocab, e), T.Q6_K
        for i in range(self.n_layers):
            more = T.Q6_K if use_more_bits(i, self.n_layers) else T.Q4_K
            b = f"blk.{i}"
            yield from q4_k_m_block(b, self, more)
            yield from q4_k_m_experts(b, self, more)
            yield f"{b}.ffn_gate_shexp.weight", (ff, e), T.Q4_K
            yield f"{b}.ffn_up_shexp.weight", (ff, e), T.Q4_K
            yield f"{b}.ffn_down_shexp.weight", (e, ff), more


@dataclass(frozen=True)
class DeepSeekV3:
    """deepseek-ai/DeepSeek-V3-0324 config.json (DeepSeek-R1 has the same shapes; Kimi-K2 is
    this with 384 experts, 64 heads, 1 dense block). MLA as llama.cpp's converter writes it:
    ``attn_kv_b`` split into ``attn_k_b``/``attn_v_b``, one KV head of kv_lora_rank + rope
    dims (key_length 576) and value_length kv_lora_rank. ``indexer``: DeepSeek-V3.2's
    lightning indexer (heads, key length, top-k; architecture deepseek32)."""

    n_layers: int = 61
    n_dense: int = 3
    n_embd: int = 7168
    n_head: int = 128
    q_lora: int = 1536
    kv_lora: int = 512
    nope: int = 128
    rope: int = 64
    v_head: int = 128
    n_ff: int = 18432
    n_ff_exp: int = 2048
    n_experts: int = 256
    n_experts_used: int = 8
    expert_groups: tuple[int, int] = (8, 4)
    n_vocab: int = 129280
    n_ctx_train: int = 163840
    indexer: tuple[int, int, int] | None = None

    @property
    def arch(self) -> str:
        return "deepseek2" if self.indexer is None else "deepseek32"

    def keys(self, w: gguf.GGUFWriter) -> None:
        w.add_name(f"DeepSeek-V3{'' if self.indexer is None else '.2'} (header only)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
        w.add_context_length(self.n_ctx_train)
        w.add_embedding_length(self.n_embd)
        w.add_block_count(self.n_layers)
        w.add_feed_forward_length(self.n_ff)
        w.add_leading_dense_block_count(self.n_dense)
        w.add_head_count(self.n_head)
        w.add_head_count_kv(1)
        w.add_key_length(self.kv_lora + self.rope)
        w.add_value_length(self.kv_lora)
        w.add_key_length_mla(self.nope + self.rope)
        w.add_value_length_mla(self.v_head)
        w.add_q_lora_rank(self.q_lora)
        w.add_kv_lora_rank(self.kv_lora)
        w.add_rope_dimension_count(self.rope)
        w.add_rope_freq_base(10000.0)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(40.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_yarn_log_mul(0.1)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_expert_count(self.n_experts)
        w.add_expert_used_count(self.n_experts_used)
        w.add_expert_feed_forward_length(self.n_ff_exp)
        w.add_expert_shared_count(1)
        w.add_expert_weights_scale(2.5)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_group_count(self.expert_groups[0])
        w.add_expert_group_used_count(self.expert_groups[1])
        w.add_vocab_size(self.n_vocab)
        if self.indexer is not None:
            heads, key_length, top_k = self.indexer
            w.add_uint32(f"{self.arch}.attention.indexer.head_count", heads)
            w.add_uint32(f"{self.arch}.attention.indexer.key_length", key_length)
            w.add_uint32(f"{self.arch}.attention.indexer.top_k", top_k)

    def tensors(self) -> Iterator[Tensor]:
        """Q4_K_M: Q4_K by default, output Q6_K, ffn_down(_exps/_shexp) Q6_K on use_more_bits
        layers, attn_k_b (rows of 128, not a multiple of 256) falls back to Q5_0; norms, the
        router and its bias F32."""
        e, h, x, ff = self.n_embd, self.n_head, self.n_experts, self.n_ff_exp
        yield "token_embd.weight", (self.n_vocab, e), T.Q4_K
        yield "output_norm.weight", (e,), T.F32
        yield "output.weight", (self.n_vocab, e), T.Q6_K
        for i in range(self.n_layers):
            more = T.Q6_K if use_more_bits(i, self.n_layers) else T.Q4_K
            b = f"blk.{i}"
            yield f"{b}.attn_norm.weight", (e,), T.F32
            yield f"{b}.attn_q_a_norm.weight", (self.q_lora,), T.F32
            yield f"{b}.attn_kv_a_norm.weight", (self.kv_lora,), T.F32
            yield f"{b}.attn_q_a.weight", (self.q_lora, e), T.Q4_K
            yield f"{b}.attn_q_b.weight", (h * (self.nope + self.rope), self.q_lora), T.Q4_K
            yield f"{b}.attn_kv_a_mqa.weight", (self.kv_lora + self.rope, e), T.Q4_K
            yield f"{b}.attn_k_b.weight", (h, self.kv_lora, self.nope), T.Q5_0
            yield f"{b}.attn_v_b.weight", (h, self.v_head, self.kv_lora), T.Q4_K
            yield f"{b}.attn_output.weight", (e, h * self.v_head), T.Q4_K
            if self.indexer is not None:
                heads, key_length, _ = self.indexer
                yield f"{b}.indexer.k_norm.weight", (key_length,), T.F32
                yield f"{b}.indexer.k_norm.bias", (key_length,), T.F32
                yield f"{b}.indexer.proj.weight", (heads, e), T.F32
                yield f"{b}.indexer.attn_k.weight", (key_length, e), T.Q4_K
                yield f"{b}.indexer.attn_q_b.weight", (heads * key_length, self.q_lora), T.Q4_K
            yield f"{b}.ffn_norm.weight", (e,), T.F32
            if i < self.n_dense:
                yield f"{b}.ffn_gate.weight", (self.n_ff, e), T.Q4_K
                yield f"{b}.ffn_up.weight", (self.n_ff, e), T.Q4_K
                yield f"{b}.ffn_down.weight", (e, self.n_ff), more
                continue
            yield f"{b}.ffn_gate_inp.weight", (x, e), T.F32
            yield f"{b}.exp_probs_b.bias", (x,), T.F32
            yield f"{b}.ffn_gate_exps.weight", (x, ff, e), T.Q4_K
            yield f"{b}.ffn_up_exps.weight", (x, ff, e), T.Q4_K
            yield f"{b}.ffn_down_exps.weight", (x, e, ff), more
            yield f"{b}.ffn_gate_shexp.weight", (ff, e), T.Q4_K
            yield f"{b}.ffn_up_shexp.weight", (ff, e), T.Q4_K
            yield f"{b}.ffn_down_shexp.weight", (e, ff), more


def nbytes(shape: tuple[int, ...], qtype: T) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape[:-1])) * (shape[-1] // block) * size


def write(path: Path, arch: str, spec: Qwen3MoE | GptOss | Llama4Scout | DeepSeekV3) -> None:
    writer = gguf.GGUFWriter(path, arch)
    spec.keys(writer)
    for name, shape, qtype in spec.tensors():
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(shape, qtype), qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    print(f"wrote {path.name}: {path.stat().st_size:,} bytes")


def main() -> None:
    write(HERE / "Qwen3-30B-A3B-Q4_K_M.header.gguf", "qwen3moe", Qwen3MoE())
    write(HERE / "gpt-oss-120b-MXFP4.header.gguf", "gpt-oss", GptOss())
    write(HERE / "gpt-oss-20b-MXFP4.header.gguf", "gpt-oss", GPT_OSS_20B)
    write(HERE / "Llama-4-Scout-17B-16E-Q4_K_M.header.gguf", "llama4", Llama4Scout())
    write(HERE / "DeepSeek-V3-0324-Q4_K_M.header.gguf", "deepseek2", DeepSeekV3())


if __name__ == "__main__":
    main()
