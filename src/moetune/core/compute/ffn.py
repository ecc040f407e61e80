"""Feed-forward blocks: dense SwiGLU FFN and the MoE FFN (build_ffn, build_moe_ffn)."""

from __future__ import annotations

from moetune.core.compute.ir import Graph, Tensor, weight_rows
from moetune.core.compute.params import I32, MOE_REDUCTION_MAX_EXPERTS


def ffn(g: Graph, il: int, x: Tensor, kind: str) -> Tensor:
    """build_ffn with a gate (SwiGLU): dense blocks (kind "") or shared experts ("_shexp")."""
    p = f"blk.{il}.ffn_"
    width = weight_rows(g, f"{p}up{kind}.weight", 0)
    ne = (width, *x.ne[1:])
    gate = g.mm(g.w(f"{p}gate{kind}.weight"), x, width, "ffn_gate")
    up = g.mm(g.w(f"{p}up{kind}.weight"), x, width, "ffn_up")
    act = g.op("glu", "ffn_swiglu", ne, gate, up)
    return g.mm(g.w(f"{p}down{kind}.weight"), act, g.d.n_embd, "ffn_out")


def moe(g: Graph, il: int, x: Tensor) -> Tensor:
    """build_moe_ffn: router -> top-k -> gate/up (mul_mat_id) -> GLU -> down -> weighted sum,
    plus the shared expert(s) when present."""
    p, t = f"blk.{il}.", x.ne[1]
    n_used = g.d.n_expert_used
    topk, weights = _router(g, il, x)
    x3 = g.view(x, (g.d.n_embd, 1, t), "reshape")
    gate, up = _expert_gate_up(g, il, x3, topk)
    act = g.op("glu", "ffn_moe_glu", gate.ne, gate, up)
    down = g.op(
        "mul_mat_id",
        "ffn_moe_down",
        (g.d.n_embd, n_used, t),
        g.w(p + "ffn_down_exps.weight"),
        act,
        topk,
    )
    down = _add_id(g, down, g.w(p + "ffn_down_exps.bias"), topk)
    weighted = g.op("mul", "ffn_moe_weighted", down.ne, down, weights)
    views = [g.view(weighted, (g.d.n_embd, t)) for _ in range(n_used)]
    out = views[0]
    for view in views[1:]:
        out = g.op("add", "ffn_moe_out", (g.d.n_embd, t), out, view)
    if 2 <= n_used <= MOE_REDUCTION_MAX_EXPERTS:
        g.deps.append((out, [down, weights]))  # ggml-cuda graph_optimize: fused reduction
    if g.has(p + "ffn_up_shexp.weight"):
        shared = ffn(g, il, x, "_shexp")
        shared_gate = g.w(p + "ffn_gate_inp_shexp.weight")
        if shared_gate is not None:
            sg = g.op("unary", "shexp_gate", (1, t), g.mm(shared_gate, x, 1, "shexp_gate"))
            shared = g.op("mul", "ffn_shexp_gated", shared.ne, shared, sg)
        out = g.op("add", "ffn_out", out.ne, out, shared)
    return out


def _router(g: Graph, il: int, x: Tensor) -> tuple[Tensor, Tensor]:
    """Expert selection: logits -> probs -> argsort top-k; the routing weights [1, k, T]."""
    p, t, k = f"blk.{il}.", x.ne[1], g.d.n_expert_used
    n_expert = weight_rows(g, p + "ffn_gate_inp.weight", k)
    logits = g.mm(g.w(p + "ffn_gate_inp.weight"), x, n_expert, "ffn_moe_logits")
    bias = g.w(p + "ffn_gate_inp.bias")
    if bias is not None:  # gpt-oss: softmax over the selected logits only
        probs = g.op("add", "ffn_moe_probs", logits.ne, logits, bias)
    else:
        probs = g.op("unary", "ffn_moe_probs", logits.ne, logits)
    selection = probs
    probs_b = g.w(p + "exp_probs_b.bias")
    if probs_b is not None:
        selection = g.op("add", "ffn_moe_probs_biased", probs.ne, probs, probs_b)
    argsort = g.op("argsort", "ffn_moe_argsort", probs.ne, selection, esize=I32)
    topk = g.view(argsort, (k, t), span=((t - 1) * n_expert + k) * I32)
    weights = g.op(
        "get_rows", "ffn_moe_weights", (1, k, t), g.view(probs, (1, n_expert, t), "reshape"), topk
    )
    if bias is not None:
        weights = g.op(
            "soft_max", "ffn_moe_weights_softmax", (k, t), g.view(weights, (k, t), "reshape")
        )
        weights = g.view(weights, (1, k, t), "reshape")
    elif _norm_weights(g):
        flat = g.view(weights, (k, t), "reshape")
        total = g.op("sum_rows", "ffn_moe_weights_sum", (1, t), flat)
        total = g.op("clamp", "ffn_moe_weights_sum_clamped", total.ne, total)
        weights = g.op("div", "ffn_moe_weights_norm", (k, t), flat, total)
        weights = g.view(weights, (1, k, t), "reshape")
    return topk, weights


def _norm_weights(g: Graph) -> bool:
    """Whether the routing weights are renormalised: always where build_moe_ffn is called
    with norm_w = true (the record's norm_w: qwen3moe, qwen3.5, ...), else as the file says."""
    if g.d.record.norm_w:
        return True
    return bool(g.hparams.get("expert_weights_norm", False))


def _expert_gate_up(g: Graph, il: int, x3: Tensor, topk: Tensor) -> tuple[Tensor, Tensor]:
    """Gate and up projections of the selected experts (fused gate_up or separate; +bias)."""
    p, t, k = f"blk.{il}.", x3.ne[2], g.d.n_expert_used
    fused = g.w(p + "ffn_gate_up_exps.weight")
    if fused is not None:
        width = weight_rows(g, p + "ffn_gate_up_exps.weight", 0) // 2
        both = g.op("mul_mat_id", "ffn_moe_gate_up", (2 * width, k, t), fused, x3, topk)
        both = _add_id(g, both, g.w(p + "ffn_gate_up_exps.bias"), topk)
        return g.view(both, (width, k, t)), g.view(both, (width, k, t))
    width = weight_rows(g, p + "ffn_up_exps.weight", 0)
    parts = []
    for part in ("gate", "up"):
        w = g.w(f"{p}ffn_{part}_exps.weight")
        cur = g.op("mul_mat_id", f"ffn_moe_{part}", (width, k, t), w, x3, topk)
        parts.append(_add_id(g, cur, g.w(f"{p}ffn_{part}_exps.bias"), topk))
    return parts[0], parts[1]


def _add_id(g: Graph, cur: Tensor, bias: Tensor | None, ids: Tensor) -> Tensor:
    """Per-expert bias (gpt-oss), in place."""
    return cur if bias is None else g.op("add_id", cur.name + "_biased", cur.ne, cur, bias, ids)
