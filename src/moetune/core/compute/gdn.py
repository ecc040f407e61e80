"""The gated delta net mixer of Qwen3-Next / Qwen3.5 linear-attention blocks."""

from __future__ import annotations

from typing import NamedTuple

from moetune.core.compute.inputs import Inputs
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import F32
from moetune.core.dims import SsmDims


class _Ssm(NamedTuple):
    """Gated delta net shapes (Qwen3-Next / Qwen3.5 linear-attention layers)."""

    d_conv: int
    head_k: int
    n_k_heads: int
    n_v_heads: int
    head_v: int

    @property
    def conv_dim(self) -> int:
        return 2 * self.head_k * self.n_k_heads + self.head_v * self.n_v_heads

    @classmethod
    def of(cls, ssm: SsmDims) -> _Ssm:
        """The delta net's heads from the ``ssm.*`` keys (absent ones at the loader's
        defaults: a 4-wide convolution, one group, one value head)."""
        n_v = max(ssm.time_step_rank, 1)
        return cls(
            d_conv=ssm.conv_kernel or 4,
            head_k=ssm.state_size,
            n_k_heads=max(ssm.group_count, 1),
            n_v_heads=n_v,
            head_v=ssm.inner_size // n_v,
        )


def gated_delta_net(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """build_layer_attn_linear (src/models/qwen35moe.cpp) with the fused GATED_DELTA_NET op:
    conv state + projection -> ssm_conv -> q/k l2-norm -> delta net -> gated norm -> out."""
    p, s, run = f"blk.{il}.", _Ssm.of(g.d.ssm), g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    conv_input = _gdn_conv_input(g, inp, il, x, s)
    state = _gdn_state(g, inp, il, s)
    conv = g.op(
        "ssm_conv",
        "conv_output_raw",
        (s.conv_dim, seq_t, n_seqs),
        conv_input,
        g.w(p + "ssm_conv1d.weight"),
    )
    conv = g.op("unary", "conv_output_silu", conv.ne, conv)
    qk = []
    for name in ("q_conv", "k_conv"):
        view = g.view(conv, (s.head_k, s.n_k_heads, seq_t, n_seqs))
        cur = g.op("scale", name, view.ne, g.op("rms_norm", name, view.ne, view))
        qk.append(_gdn_repeat(g, cur, s) if g.d.record.repeat_qk else cur)
    v = g.view(conv, (s.head_v, s.n_v_heads, seq_t, n_seqs))
    gate, beta = _gdn_gates(g, il, x, s)
    out = g.op(
        "gdn",
        "gated_delta_net",
        (s.head_v * s.n_v_heads, run.n_tokens + s.head_v * n_seqs),
        qk[0],
        qk[1],
        v,
        gate,
        beta,
        state,
    )
    cache_s = g.cache(f"cache_s_l{il}", il, (s.head_v * s.head_v * s.n_v_heads, n_seqs), F32)
    g.into("cpy", "new_state", cache_s, g.view(out), g.view(cache_s))
    heads = (s.head_v, s.n_v_heads, seq_t, n_seqs)
    norm = g.norm(g.view(out, heads), g.w(p + "ssm_norm.weight"), "attn_out_norm")
    z = g.mm(g.w(p + "attn_gate.weight"), x, s.head_v * s.n_v_heads, "z")
    z = g.op("unary", "z_silu", heads, g.view(z, heads, "reshape"))
    gated = g.op("mul", "gated", heads, norm, z)
    final = g.view(gated, (s.head_v * s.n_v_heads, seq_t, n_seqs), "reshape")
    out = g.mm(g.w(p + "ssm_out.weight"), final, g.d.n_embd, "linear_attn_out")
    return g.view(out, (g.d.n_embd, run.n_tokens), "reshape")


def _gdn_conv_input(g: Graph, inp: Inputs, il: int, x: Tensor, s: _Ssm) -> Tensor:
    """build_conv_state: gather the conv states, write them back, concat the projection."""
    run = g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    rows = (s.d_conv - 1) * s.conv_dim
    cache_r = g.cache(f"cache_r_l{il}", il, (rows, n_seqs), F32)
    states = g.op("get_rows", "conv_states", (rows, n_seqs), g.view(cache_r), inp.rs_copy)
    g.into("cpy", "conv_states_cpy", cache_r, g.view(states), g.view(cache_r))
    qkv = g.mm(g.w(f"blk.{il}.attn_qkv.weight"), x, s.conv_dim, "qkv_mixed")
    qkv_t = g.view(g.view(qkv, (s.conv_dim, seq_t, n_seqs), "reshape"), None, "transpose")
    conv_states = g.view(states, (s.d_conv - 1, s.conv_dim, n_seqs), "reshape")
    conv_input = g.op(
        "concat", "conv_input", (s.d_conv - 1 + seq_t, s.conv_dim, n_seqs), conv_states, qkv_t
    )
    g.into("cpy", "conv_state_update", cache_r, g.view(conv_input), g.view(cache_r))
    return conv_input


def _gdn_state(g: Graph, inp: Inputs, il: int, s: _Ssm) -> Tensor:
    """build_rs: gather the recurrent states of the ubatch's sequences, write them back."""
    n_seqs = g.run.n_seqs
    rows = s.head_v * s.head_v * s.n_v_heads
    cache_s = g.cache(f"cache_s_l{il}", il, (rows, n_seqs), F32)
    state = g.op("get_rows", "ssm_states", (rows, n_seqs), g.view(cache_s), inp.rs_copy)
    g.into("cpy", "ssm_states_cpy", cache_s, g.view(state), g.view(cache_s))
    return g.view(state, (s.head_v, s.head_v, s.n_v_heads, n_seqs), "reshape")


def _gdn_repeat(g: Graph, cur: Tensor, s: _Ssm) -> Tensor:
    """src/models/qwen3next.cpp: q/k repeated to the value heads when they differ (always,
    fused op or not): reshape_4d -> repeat_4d -> reshape_4d."""
    if s.n_k_heads == s.n_v_heads:
        return cur
    rows = cur.ne[2] * cur.ne[3]
    rep = s.n_v_heads // s.n_k_heads
    flat = g.view(cur, (s.head_k, 1, s.n_k_heads, rows), "reshape")
    out = g.op("repeat", cur.name + "_repeated", (s.head_k, rep, s.n_k_heads, rows), flat)
    return g.view(out, (s.head_k, s.n_v_heads, *cur.ne[2:]), "reshape")


def _gdn_gates_ba(g: Graph, il: int, x: Tensor, s: _Ssm) -> tuple[Tensor, Tensor]:
    """src/models/qwen3next.cpp: one ``ssm_ba`` projection split per key head into beta and
    alpha (views), beta made contiguous and sigmoided, alpha contiguous, biased, softplus."""
    p, run = f"blk.{il}.", g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    per_k = s.n_v_heads // s.n_k_heads
    ba = g.mm(g.w(p + "ssm_ba.weight"), x, 2 * s.n_v_heads, "linear_attn_mixed_ba")
    ba = g.view(ba, (2 * per_k, s.n_k_heads, seq_t, n_seqs), "reshape")
    heads, split = (s.n_v_heads, seq_t, n_seqs), (per_k, s.n_k_heads, seq_t, n_seqs)
    alpha = g.op("cont", "alpha", heads, g.view(ba, split))
    alpha = g.op("add", "alpha_biased", heads, alpha, g.w(p + "ssm_dt.bias"))
    alpha = g.op("unary", "a_softplus", heads, alpha)
    gate = g.view(g.op("mul", "gate", heads, alpha, g.w(p + "ssm_a")), (1, *heads), "reshape")
    b = g.op("cont", "b", split, g.view(ba, split))
    beta = g.op("unary", "beta", b.ne, b)
    return gate, g.view(beta, (1, *heads), "reshape")


def _gdn_gates(g: Graph, il: int, x: Tensor, s: _Ssm) -> tuple[Tensor, Tensor]:
    """gate = softplus(alpha + dt_bias) * ssm_a, beta = sigmoid(beta projection)."""
    if g.has(f"blk.{il}.ssm_ba.weight"):
        return _gdn_gates_ba(g, il, x, s)
    p, run = f"blk.{il}.", g.run
    heads = (s.n_v_heads, run.n_tokens // run.n_seqs, run.n_seqs)
    alpha = g.mm(g.w(p + "ssm_alpha.weight"), x, s.n_v_heads, "alpha")
    alpha = g.op(
        "add", "alpha_biased", heads, g.view(alpha, heads, "reshape"), g.w(p + "ssm_dt.bias")
    )
    alpha = g.op("unary", "a_softplus", heads, alpha)
    gate = g.op("mul", "gate", heads, alpha, g.w(p + "ssm_a"))
    beta = g.mm(g.w(p + "ssm_beta.weight"), x, s.n_v_heads, "beta")
    beta = g.op("unary", "beta_sigmoid", (1, *heads), g.view(beta, (1, *heads), "reshape"))
    return g.view(gate, (1, *heads), "reshape"), beta
