"""Attention blocks: grouped-query attention (build_attn_mha) and DeepSeek MLA."""

from __future__ import annotations

import math
from collections.abc import Callable

from moetune.core.compute.inputs import Inputs, attn_kind, kv_cells
from moetune.core.compute.ir import Graph, Tensor, weight_rows
from moetune.core.compute.params import F16

MaskFn = Callable[[Tensor | None], Tensor]


def _rotate(g: Graph, cur: Tensor, rot: Tensor | None) -> Tensor:
    """llama_mul_mat_hadamard: [n, numel/n] = rot x reshape(cur), viewed back as ``cur``."""
    if rot is None:
        return cur
    n = rot.ne[0]
    flat = g.view(cur, (n, math.prod(cur.ne) // n), "reshape")
    return g.view(g.mm(rot, flat, n, "hadamard"), cur.ne, "reshape")


def attention(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """Grouped-query attention with KV cache: projections (+bias, +Q/K norm, +output gate),
    RoPE, cache store, then flash attention or KQ -> softmax -> KQV (build_attn_mha)."""
    p, d, t = f"blk.{il}.", g.d, g.run.n_tokens
    head_k, heads = d.head_k[0], d.n_head[il] or d.n_head_max
    n_head = weight_rows(g, p + "attn_q.weight", heads * head_k) // head_k
    gated = n_head == 2 * heads
    n_head = heads if gated else n_head
    kv_heads = d.n_head_kv[il] or d.n_head_kv_max
    n_kv_head = weight_rows(g, p + "attn_k.weight", kv_heads * head_k) // head_k
    kind = attn_kind(g, il) or "full"
    ai = inp.attn[kind]
    proj: dict[str, tuple[Tensor, Tensor]] = {}
    for part in d.record.qkv_order:
        cur, full = _attn_proj(g, inp, il, x, part=part, heads=(n_head, n_kv_head, gated))
        proj[part] = _rotate(g, cur, ai.v_rot if part == "v" else ai.k_rot), full
    n_kv = kv_cells(g, kind)
    cache_k = g.cache(f"cache_k_l{il}", il, (d.head_k[0], n_kv_head, n_kv), g.opts.kv_bytes("k"))
    cache_v = g.cache(f"cache_v_l{il}", il, (d.head_v[0], n_kv_head, n_kv), g.opts.kv_bytes("v"))
    g.into("set_rows", f"cache_k_l{il}", cache_k, g.view(proj["k"][0]), ai.k_idxs, cache_k)
    g.into("set_rows", f"cache_v_l{il}", cache_v, g.view(proj["v"][0]), ai.v_idxs, cache_v)
    sinks = g.w(p + "attn_sinks.weight")
    q = g.view(g.view(proj["q"][0]), (d.head_k[0], t, n_head), "permute")
    k = g.view(g.view(cache_k), (d.head_k[0], n_kv, n_kv_head), "permute")
    v = g.view(g.view(cache_v), (d.head_v[0], n_kv, n_kv_head), "permute")
    cur = _rotate(g, _attn_core(g, (q, k, v), ai.mask, sinks, n_head=n_head, n_kv=n_kv), ai.v_rot)
    if gated:
        cur = _attn_gate(g, proj["q"][1], cur, n_head)
    out = g.mm(g.w(p + "attn_output.weight"), cur, d.n_embd, "attn_output")
    bias = g.w(p + "attn_output.bias")
    return g.op("add", "attn_out", out.ne, out, bias) if bias is not None else out


def _attn_proj(
    g: Graph, inp: Inputs, il: int, x: Tensor, *, part: str, heads: tuple[int, int, bool]
) -> tuple[Tensor, Tensor]:
    """One of Q/K/V: matmul (+bias), reshape to heads, optional RMS norm, RoPE for Q and K.
    Returns the result and the projection itself (Q's also holds the output gate)."""
    p, d, t = f"blk.{il}.attn_{part}", g.d, g.run.n_tokens
    n_head, n_kv_head, gated = heads
    width = d.head_v[0] if part == "v" else d.head_k[0]
    n = n_head if part == "q" else n_kv_head
    rows = n * width * (2 if gated and part == "q" else 1)
    cur = g.mm(g.w(p + ".weight"), x, rows, f"{part.upper()}cur")
    bias = g.w(p + ".bias")
    if bias is not None:
        cur = g.op("add", f"{part.upper()}cur_b", cur.ne, cur, bias)
    full = cur
    cur = g.view(cur, (width, n, t), "reshape")
    if part == "v":
        return cur, full
    qk_norm = g.w(f"{p}_norm.weight")
    if qk_norm is not None:
        cur = g.norm(cur, qk_norm, f"{part.upper()}cur_normed")
    if not d.record.rope:
        return cur, full
    return g.op("rope", f"{part.upper()}cur", cur.ne, cur, inp.pos), full


def _attn_core(
    g: Graph,
    qkv: tuple[Tensor, Tensor, Tensor],
    mask: Tensor,
    sinks: Tensor | None,
    *,
    n_head: int,
    n_kv: int,
) -> Tensor:
    """build_attn_mha: [d_v * n_head, n_tokens] from permuted q [d, T, H] and cache views."""
    q, k, v = qkv
    d_v, t = v.ne[0], g.run.n_tokens
    if g.opts.flash_attn:
        out = g.op("flash_attn", "fattn", (d_v, n_head, t), q, k, v, mask, sinks)
        out.cuda_extra = _fa_f16_extra(g, out, k, v, same=False)
        return g.view(out, (d_v * n_head, t), "reshape")
    kq = g.op("mul_mat", "kq", (n_kv, t, n_head), k, q)
    kq = g.op("soft_max", "kq_soft_max", kq.ne, kq, mask, sinks)
    kqv = g.op("mul_mat", "kqv", (d_v, t, n_head), v, kq)
    return g.op("cont", "kqv_out", (d_v * n_head, t), g.view(kqv, None, "permute"))


def _fa_f16_extra(g: Graph, out: Tensor, k: Tensor, v: Tensor, same: bool) -> int:
    """ggml_cuda_flash_attn_ext_get_alloc_size: the MMA/tile kernels used for prompt batches
    need F16 K and V, converted into the FA node's own allocation after its result (each
    start padded to 128 bytes); V shares K's copy when it is a view of K (MLA)."""
    end = out.nbytes
    for view, kind in ((k, "k"), (v, "v")):
        needs_f16 = (g.opts.type_k if kind == "k" else g.opts.type_v) != "f16"
        if needs_f16 and not (same and kind == "v"):
            end = -(-end // 128) * 128 + math.prod(view.ne) * F16
    return end - out.nbytes


def _attn_gate(g: Graph, q_full: Tensor, cur: Tensor, n_head: int) -> Tensor:
    """Qwen3-Next/3.5 output gate: attn * sigmoid(gate half of the Q projection)."""
    t = g.run.n_tokens
    gate = g.op("cont", "gate_reshaped", (g.d.head_k[0] * n_head, t), g.view(q_full))
    gate = g.op("unary", "gate_sigmoid", gate.ne, gate)
    return g.op("mul", "attn_gated", cur.ne, cur, gate)


def attention_mla(g: Graph, inp: Inputs, il: int, x: Tensor, mask: MaskFn | None = None) -> Tensor:
    """DeepSeek MLA with the absorption optimisation (src/models/deepseek2.cpp): the cache
    holds one compressed head (kv_lora_rank + rope dims); V is a view of K. ``mask``: builds
    the KQ mask after the cache store, from the compressed Q (DSA's top-k mask, dsa.py)."""
    p, t = f"blk.{il}.", g.run.n_tokens
    nope, kv_lora, n_head = g.shape(p + "attn_k_b.weight", 3)[:3]
    v_mla = g.shape(p + "attn_v_b.weight", 2)[1]
    rope = weight_rows(g, p + "attn_kv_a_mqa.weight", kv_lora) - kv_lora
    q, qr = _mla_query(g, inp, il, x, (nope, rope, kv_lora, n_head))
    kv = g.mm(g.w(p + "attn_kv_a_mqa.weight"), x, kv_lora + rope, "kv_cmpr_pe")
    kv_c = g.norm(g.view(kv, (kv_lora, t)), g.w(p + "attn_kv_a_norm.weight"), "kv_cmpr")
    v_cur = g.view(kv_c, (kv_lora, 1, t), "reshape")
    k_pe = g.op("rope", "k_pe", (rope, 1, t), g.view(kv, (rope, 1, t)), inp.pos)
    k_cur = g.op("concat", "Kcur", (kv_lora + rope, 1, t), v_cur, k_pe)
    kind = attn_kind(g, il) or "full"
    ai, n_kv = inp.attn[kind], kv_cells(g, kind)
    q = _rotate(g, q, ai.k_rot)
    k_cur = _rotate(g, k_cur, ai.k_rot)
    cache = g.cache(f"cache_k_l{il}", il, (kv_lora + rope, 1, n_kv), g.opts.kv_bytes("k"))
    g.into("set_rows", f"cache_k_l{il}", cache, g.view(k_cur), ai.k_idxs, cache)
    qp = g.view(g.view(q), (kv_lora + rope, t, n_head), "permute")
    kq_mask = ai.mask if mask is None else mask(qr)
    cur = _mla_core(g, il, (qp, cache), kq_mask, v_mla=v_mla)
    cur = _rotate(g, cur, ai.k_rot)
    return g.mm(g.w(p + "attn_output.weight"), cur, g.d.n_embd, "attn_output")


def _mla_core(
    g: Graph, il: int, q_cache: tuple[Tensor, Tensor], mask: Tensor, *, v_mla: int
) -> Tensor:
    """Attention over the compressed cache, then V decompressed by attn_v_b per head."""
    qp, cache = q_cache
    t, (k_row, _, n_kv), n_head = g.run.n_tokens, cache.ne, qp.ne[2]
    kv_lora = g.shape(f"blk.{il}.attn_v_b.weight")[0]
    w_v = g.w(f"blk.{il}.attn_v_b.weight")
    k = g.view(g.view(cache), (k_row, n_kv, 1), "permute")
    v = g.view(g.view(cache), (kv_lora, n_kv, 1), "permute")
    if g.opts.flash_attn:
        out = g.op("flash_attn", "fattn", (kv_lora, n_head, t), qp, k, v, mask)
        out.cuda_extra = _fa_f16_extra(g, out, k, v, same=True)
        cur = g.view(out, (kv_lora, t, n_head), "permute")
        mla = g.op("mul_mat", "fattn_mla", (v_mla, t, n_head), w_v, cur)
    else:
        v_t = g.view(v, None, "transpose")
        v_cont = g.op("cont", "v_cont", (n_kv, kv_lora, 1), v_t, esize=g.opts.kv_bytes("k"))
        kq = g.op("mul_mat", "kq", (n_kv, t, n_head), k, qp)
        kq = g.op("soft_max", "kq_soft_max", kq.ne, kq, mask)
        kqv = g.op("mul_mat", "kqv", (kv_lora, t, n_head), v_cont, kq)
        mla = g.mm(w_v, kqv, v_mla, "kqv_mla")
    return g.op("cont", "kqv_out", (v_mla * n_head, t), g.view(mla, None, "permute"))


def _mla_query(
    g: Graph, inp: Inputs, il: int, x: Tensor, dims: tuple[int, int, int, int]
) -> tuple[Tensor, Tensor | None]:
    """Q with the nope part absorbed into the compressed space, concatenated with rope; and
    the compressed, normed Q (``qr``: None without Q compression)."""
    p, t = f"blk.{il}.", g.run.n_tokens
    nope, rope, kv_lora, n_head = dims
    q_lora = weight_rows(g, p + "attn_q_a.weight", 0)
    qr = None
    if q_lora:
        q = g.mm(g.w(p + "attn_q_a.weight"), x, q_lora, "q")
        q = qr = g.norm(q, g.w(p + "attn_q_a_norm.weight"), "q")
        q = g.mm(g.w(p + "attn_q_b.weight"), q, n_head * (nope + rope), "q")
    else:
        q = g.mm(g.w(p + "attn_q.weight"), x, n_head * (nope + rope), "q")
    q3 = g.view(q, (nope + rope, n_head, t), "reshape")
    q_nope = g.view(g.view(q3, (nope, n_head, t)), (nope, t, n_head), "permute")
    absorbed = g.op(
        "mul_mat", "q_nope_absorbed", (kv_lora, t, n_head), g.w(p + "attn_k_b.weight"), q_nope
    )
    absorbed = g.view(absorbed, (kv_lora, n_head, t), "permute")
    q_pe = g.op("rope", "q_pe", (rope, n_head, t), g.view(q3, (rope, n_head, t)), inp.pos)
    return g.op("concat", "Qcur", (kv_lora + rope, n_head, t), absorbed, q_pe), qr
