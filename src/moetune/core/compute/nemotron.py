"""Nemotron-H blocks (src/models/nemotron-h.cpp, build 11434): each block is exactly one of a
Mamba-2 mixer, attention without RoPE, or an FFN/MoE, on a plain residual (no second norm);
the MoE routes by sigmoid with a selection bias on the block input, runs up-only experts with
squared ReLU, optionally inside a latent space (ffn_latent_down / ffn_latent_up), and adds an
up-only squared-ReLU shared expert."""

from __future__ import annotations

from moetune.core.compute.attention import attention
from moetune.core.compute.ffn import _router
from moetune.core.compute.inputs import Inputs
from moetune.core.compute.ir import Graph, Tensor, weight_rows
from moetune.core.compute.mamba import mamba2
from moetune.core.compute.params import MOE_REDUCTION_MAX_EXPERTS


def nemotron_block(g: Graph, inp: Inputs, il: int, res: Tensor) -> Tensor:
    """attn_norm, then the block's one part, then ``cur + inpSA``."""
    x = g.norm(res, g.w(f"blk.{il}.attn_norm.weight"), "attn_norm")
    if g.d.recurrent[il]:
        cur = mamba2(g, inp, il, x)
    elif g.d.is_ffn_only(il):
        cur = _ffn_block(g, il, x)
    else:
        cur = attention(g, inp, il, x)
    return g.op("add", "nemotron_h_block_out", cur.ne, cur, res)


def _ffn_block(g: Graph, il: int, x: Tensor) -> Tensor:
    """build_ffn_layer: a dense up/down squared-ReLU FFN, or the MoE plus the shared expert."""
    p = f"blk.{il}.ffn_"
    if not g.has(p + "gate_inp.weight"):
        return _relu_sqr_ffn(g, il, x, "")
    latent = x
    if g.has(p + "latent_down.weight"):
        rows = weight_rows(g, p + "latent_down.weight", g.d.n_embd)
        latent = g.mm(g.w(p + "latent_down.weight"), x, rows, "ffn_latent_down")
    out = _experts(g, il, x, latent)
    if g.has(p + "latent_up.weight"):
        out = g.mm(g.w(p + "latent_up.weight"), out, g.d.n_embd, "ffn_latent_up")
    shared = _relu_sqr_ffn(g, il, x, "_shexp")
    return g.op("add", "ffn_out", out.ne, out, shared)


def _relu_sqr_ffn(g: Graph, il: int, x: Tensor, kind: str) -> Tensor:
    """build_ffn(up, no gate, down, LLM_FFN_RELU_SQR): up -> relu -> sqr -> down."""
    p = f"blk.{il}.ffn_"
    width = weight_rows(g, f"{p}up{kind}.weight", 0)
    up = g.mm(g.w(f"{p}up{kind}.weight"), x, width, "ffn_up")
    act = g.op("unary", "ffn_sqr", up.ne, g.op("unary", "ffn_relu", up.ne, up))
    return g.mm(g.w(f"{p}down{kind}.weight"), act, g.d.n_embd, "ffn_out")


def _experts(g: Graph, il: int, x: Tensor, latent: Tensor) -> Tensor:
    """build_moe_ffn with router logits from ``x`` and experts over ``latent``: sigmoid
    probs (+exp_probs_b for the choice), top-k, weights (normed, scaled), up (mul_mat_id),
    relu, sqr, down, weighted, summed over the used experts."""
    p, t, k = f"blk.{il}.", x.ne[1], g.d.n_expert_used
    n_lat = latent.ne[0]
    topk, weights = _router(g, il, x)
    scale = g.hparams.get("expert_weights_scale", 0.0)
    if isinstance(scale, (int, float)) and scale not in {0.0, 1.0}:
        weights = g.op("scale", "ffn_moe_weights_scaled", weights.ne, weights)
    x3 = g.view(latent, (n_lat, 1, t), "reshape")
    width = weight_rows(g, p + "ffn_up_exps.weight", 0)
    up = g.op("mul_mat_id", "ffn_moe_up", (width, k, t), g.w(p + "ffn_up_exps.weight"), x3, topk)
    act = g.op("unary", "ffn_moe_relu_sqr", up.ne, g.op("unary", "ffn_moe_relu", up.ne, up))
    down = g.op(
        "mul_mat_id", "ffn_moe_down", (n_lat, k, t), g.w(p + "ffn_down_exps.weight"), act, topk
    )
    weighted = g.op("mul", "ffn_moe_weighted", down.ne, down, weights)
    views = [g.view(weighted, (n_lat, t)) for _ in range(k)]
    out = views[0]
    for view in views[1:]:
        out = g.op("add", "ffn_moe_out", (n_lat, t), out, view)
    if 2 <= k <= MOE_REDUCTION_MAX_EXPERTS:
        g.deps.append((out, [down, weights]))  # ggml-cuda graph_optimize: fused reduction
    return out
