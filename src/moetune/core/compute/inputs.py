"""The reserve graph's input leaves (llm_graph_input_*, src/llama-graph.cpp)."""

from __future__ import annotations

from typing import NamedTuple

from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import F32, I32, I64, KQ_MASK_TYPES
from moetune.core.kvcache import swa_cells


class Inputs(NamedTuple):
    """The graph inputs (allocated first, in the CPU's compute buffer)."""

    tokens: Tensor
    # tokens, slots, embd of a mixed batch
    mixed: tuple[Tensor | None, Tensor | None, Tensor | None]
    pos: Tensor
    rs_copy: Tensor | None
    attn: dict[str, _AttnInputs]
    out_ids: Tensor


class _AttnInputs(NamedTuple):
    """Per attention kind (full or sliding window): cache row indices, the KQ mask and the
    Hadamard rotations that a quantized cache gets (llama-kv-cache.cpp, n_rot_k/n_rot_v)."""

    k_idxs: Tensor
    v_idxs: Tensor | None
    mask: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None
    # DSA (llm_graph_input_attn_k_dsa): the indexer cache's k_idxs, its KQ mask (F16: the
    # fused lightning indexer, cparams.fused_lid, is on by default) and its rotation
    lid: tuple[Tensor, Tensor, Tensor] | None = None


def attn_kind(g: Graph, il: int) -> str | None:
    """ "full" or "swa" for attention blocks, None for recurrent ones."""
    if g.d.recurrent[il]:
        return None
    return "swa" if il in g.d.swa_layers else "full"


def kv_cells(g: Graph, kind: str) -> int:
    """KV cells of the reserve graph: the whole cache (llama-kv-cache-iswa.cpp for SWA)."""
    run = g.run
    if kind == "swa":
        return swa_cells(g.d.n_swa, run.n_ctx, run.n_seqs, True, run.n_ubatch)
    return run.n_ctx


def build_inputs(g: Graph) -> Inputs:
    """The input leaves, in the order the graph first uses them."""
    t, e = g.run.n_tokens, g.d.n_embd
    tokens = g.input("inp_tokens", (t,), I32)
    g.input("inp_embd", (e, t), F32)  # the unused vector-embeddings branch: never freed
    mixed: tuple[Tensor | None, Tensor | None, Tensor | None] = (None, None, None)
    if g.d.record.mixed_batch:  # llm_arch_supports_mixed_batch()
        mixed = (
            g.input("inp_mixed_tokens", (t,), I32),
            g.input("inp_mixed_slots", (t,), I64),
            g.input("inp_mixed_embd", (e, t), F32),
        )
    rs_copy = g.input("rs_s_copy", (g.run.n_seqs,), I32) if g.d.recurrent_layers else None
    pos: Tensor | None = None
    attn: dict[str, _AttnInputs] = {}
    for il in g.d.layers:
        kind = attn_kind(g, il)
        if kind is None or kind in attn:
            continue
        mla = g.has(f"blk.{il}.attn_kv_a_mqa.weight")
        dsa = g.d.indexer_k > 0  # build_attn_inp_k_dsa: no rotation of the MLA part
        k_rot = None if dsa else _rot_input(g, "k", g.d.head_k[0])
        if pos is None:
            pos = g.input("inp_pos", (t * g.d.n_pos,), I32)
        v_rot = None if mla else _rot_input(g, "v", g.d.head_v[0])
        attn[kind] = _attn_inputs(g, kind, mla, k_rot, v_rot)
        if dsa:
            attn[kind] = attn[kind]._replace(lid=_lid_inputs(g, kind))
    if pos is None:
        pos = g.input("inp_pos", (t * g.d.n_pos,), I32)
    out_ids = g.input("out_ids", (g.run.n_outputs,), I32)
    return Inputs(tokens, mixed, pos, rs_copy, attn, out_ids)


def _rot_input(g: Graph, kind: str, head: int) -> Tensor | None:
    """A quantized cache rotates K (and V) by a Hadamard matrix: n_rot_k is 64 doubled while
    it divides the head size, n_rot_v is 64; heads not a multiple of 64 are not rotated."""
    if not g.opts.kv_quantized(kind) or head <= 0 or head % 64:
        return None
    n = 64
    while kind == "k" and head % (2 * n) == 0:
        n *= 2
    return g.input(f"attn_inp_{kind}_rot", (n, n), F32)


def _lid_inputs(g: Graph, kind: str) -> tuple[Tensor, Tensor, Tensor]:
    """The indexer cache's inputs: k_idxs, an F16 KQ mask, and the Hadamard rotation that
    llama_kv_cache always gives DSA indexer keys (64 doubled while it divides the key length)."""
    t, head = g.run.n_tokens, g.d.indexer_k
    k_idxs = g.input("attn_inp_k_idxs_lid", (t,), I64)
    mask = g.input("attn_inp_kq_mask_lid", (kv_cells(g, kind), t), KQ_MASK_TYPES[True])
    n = 64
    while head % (2 * n) == 0:
        n *= 2
    return k_idxs, mask, g.input("attn_inp_k_rot_lid", (n, n), F32)


def _attn_inputs(
    g: Graph, kind: str, mla: bool, k_rot: Tensor | None, v_rot: Tensor | None
) -> _AttnInputs:
    """k_idxs, v_idxs (one per element of V when V is stored transposed, i.e. without flash
    attention; none for MLA, whose V is a view of K) and the KQ mask (F16 with FA)."""
    t, fa = g.run.n_tokens, g.opts.flash_attn
    k_idxs = g.input("attn_inp_k_idxs", (t,), I64)
    v_idxs = None
    if not mla:
        v_width = 1 if fa else g.d.n_head_kv_max * g.d.head_v[0]
        v_idxs = g.input("attn_inp_v_idxs", (t * v_width,), I64)
    mask = g.input("attn_inp_kq_mask", (kv_cells(g, kind), t), KQ_MASK_TYPES[fa])
    return _AttnInputs(k_idxs, v_idxs, mask, k_rot, v_rot)
