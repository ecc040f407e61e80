"""DeepSeek sparse attention (src/models/deepseek32.cpp, glm-dsa.cpp): MLA whose KQ mask
admits only the top-k cells a lightning indexer scores highest.

Node order follows ggml's graph expansion, not the builder's line order: the indexer's key
store is expanded first, then build_attn (llm_graph_input_attn_k_dsa, src/llama-graph.cpp)
expands Q, V, K and the MLA cache store, and the top-k mask is reached from the flash
attention's mask source: a zero-filled ``[1, k, T]`` leaf, the indexer's Q and weights, the
fused ``lightning_indexer`` score ``[n_kv, T]``, its top-k, and a copy of the MLA mask filled
with -inf into which the top-k rows are set to 0, added to the mask.
"""

from __future__ import annotations

from moetune.core.compute.attention import attention_mla
from moetune.core.compute.inputs import Inputs, attn_kind, kv_cells
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import F32, I32
from moetune.core.hparams import scalar


def attention_dsa(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """One DSA block's attention: the indexer key store (full indexer layers), then MLA with
    the top-k mask."""
    kind = attn_kind(g, il) or "full"
    lid = inp.attn[kind].lid
    full = g.d.indexer_full[il] if il < len(g.d.indexer_full) else False
    cache = None
    if full and lid is not None:
        cache = _store_keys(g, inp, il, x, lid)

    def mask(qr: Tensor | None) -> Tensor:
        return _top_k_mask(g, inp, il, (x, qr), cache)

    return attention_mla(g, inp, il, x, mask)


def _store_keys(
    g: Graph, inp: Inputs, il: int, x: Tensor, lid: tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    """indexer_k = rope(layer_norm(attn_k x)) rotated by the Hadamard matrix, set into the
    indexer cache (one key head per cell)."""
    p, t, head = f"blk.{il}.indexer.", g.run.n_tokens, g.d.indexer_k
    k_idxs, _, rot = lid
    k = g.mm(g.w(p + "attn_k.weight"), x, head, "indexer_k")
    k = g.op("norm", "indexer_k", k.ne, k)
    k = g.op("mul", "indexer_k", k.ne, k, g.w(p + "k_norm.weight"))
    k = g.op("add", "indexer_k", k.ne, k, g.w(p + "k_norm.bias"))
    k = g.op("rope", "indexer_k", (head, 1, t), g.view(k, (head, 1, t), "reshape"), inp.pos)
    k = g.op("mul_mat", "indexer_k", k.ne, rot, k)
    n_kv = kv_cells(g, attn_kind(g, il) or "full")
    cache = g.cache(f"cache_lid_k_l{il}", il, (head, 1, n_kv), g.opts.kv_bytes("k"))
    g.into("set_rows", f"cache_lid_k_l{il}", cache, g.view(k, (head, t)), k_idxs, cache)
    return cache


def _top_k_mask(
    g: Graph, inp: Inputs, il: int, xq: tuple[Tensor, Tensor | None], cache: Tensor | None
) -> Tensor:
    """build_attn (DSA): the MLA mask with only the top-k cells of each token left open."""
    kind = attn_kind(g, il) or "full"
    ai, t = inp.attn[kind], g.run.n_tokens
    n_kv = kv_cells(g, kind)
    top_k = min(n_kv, scalar(g.hparams, "attention.indexer.top_k", 0) or n_kv)
    zeros = g.leaf("zeros", (1, top_k, t), F32)
    zeros = g.op("fill", "zeros", zeros.ne, zeros)
    if cache is not None and ai.lid is not None:
        top = _indexer_top_k(g, inp, il, xq, (cache, ai.lid[1], ai.lid[2]), top_k=top_k)
        g.carry["top_k"] = top
    else:  # glm-dsa's shared layers reuse the last full layer's top-k
        top = g.carry.get("top_k") or Tensor("top_k", "cont", (top_k, t), I32)
        g.borrowed = True
    top3 = g.view(top, (top_k, t, 1))
    mask = ai.mask
    filled = g.op("fill", "kq_mask_all", mask.ne, mask, esize=mask.esize)
    filled4 = g.view(filled, (1, *mask.ne))
    opened = g.into("set_rows", "kq_mask_top_k", filled4, zeros, top3, filled4)
    opened = g.view(opened, mask.ne)
    return g.op("add", "kq_mask_top_k", mask.ne, opened, mask, esize=mask.esize)


def _indexer_top_k(
    g: Graph,
    inp: Inputs,
    il: int,
    xq: tuple[Tensor, Tensor | None],
    lid: tuple[Tensor, Tensor, Tensor],
    *,
    top_k: int,
) -> Tensor:
    """Indexer Q (from the compressed Q), per-head weights, the fused lightning indexer
    score over every cell, and the indices of its top-k (made contiguous)."""
    p, t, head = f"blk.{il}.indexer.", g.run.n_tokens, g.d.indexer_k
    x, qr = xq
    cache, mask, rot = lid
    n_head = g.shape(p + "proj.weight", 2)[1]
    q = g.mm(g.w(p + "attn_q_b.weight"), qr if qr is not None else x, n_head * head, "indexer_q")
    q = g.op(
        "rope", "indexer_q", (head, n_head, t), g.view(q, (head, n_head, t), "reshape"), inp.pos
    )
    q = g.view(g.op("mul_mat", "indexer_q", q.ne, rot, q), (head, n_head, t, 1))
    k = g.view(cache, cache.ne)
    weights = g.mm(g.w(p + "proj.weight"), x, n_head, "indexer_weights")
    weights = g.op("scale", "indexer_weights", weights.ne, g.view(weights, weights.ne))
    score = g.op("lightning_indexer", "indexer_score", (cache.ne[2], t), q, k, weights, mask)
    top = g.op("top_k", "top_k", (top_k, t), score, esize=I32)
    return g.op("cont", "top_k", top.ne, top, esize=I32)
