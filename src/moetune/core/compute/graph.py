"""The reserve graph, after llama.cpp's graph builders (src/llama-graph.cpp, src/models/)."""

from __future__ import annotations

from collections.abc import Callable

from moetune.core.archs import Block, Mixer
from moetune.core.compute.attention import attention, attention_mla
from moetune.core.compute.dsa import attention_dsa
from moetune.core.compute.ffn import ffn, moe
from moetune.core.compute.gdn import gated_delta_net
from moetune.core.compute.inputs import Inputs, build_inputs
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.mamba import mamba1, mamba2
from moetune.core.compute.nemotron import nemotron_block
from moetune.core.compute.shortconv import shortconv

Part = Callable[[Graph, Inputs, int, Tensor], Tensor]
# the recurrent layers' mixers, by the name an architecture's record gives (core/archs.py)
_MIXERS: dict[Mixer, Part] = {
    "gated_delta_net": gated_delta_net,
    "mamba2": mamba2,
    "mamba1": mamba1,
    "shortconv": shortconv,
}
# blocks that are one part (mixer or FFN) on a plain residual, by the record's name for them
_ONE_PART_BLOCKS: dict[Block, Part] = {"nemotron_h": nemotron_block}


def build_graph(g: Graph) -> None:
    """Inputs, embeddings, every (non-NextN) block, the output head."""
    inp = build_inputs(g)
    res = embeddings(g, inp)
    for il in g.d.layers:
        res = layer(g, inp, il, res, il == g.d.layers[-1])
    output(g, inp, res)


def embeddings(g: Graph, inp: Inputs) -> Tensor:
    """build_inp_embd: the token path, plus the mixed-batch path whose DUP is never freed."""
    ne = (g.d.n_embd, g.run.n_tokens)
    tok = g.w("token_embd.weight")
    embd = g.op("get_rows", "embd", ne, tok, inp.tokens)
    tokens, slots, mixed_embd = inp.mixed
    if tokens is not None and mixed_embd is not None:
        rows = g.op("get_rows", "mixed_rows", ne, tok, tokens)
        dup = g.op("dup", "mixed_dup", ne, mixed_embd)  # only its set_rows view uses it
        g.into("set_rows", "mixed", dup, rows, slots, dup)
    return _scaled(g, embd, "embedding_scale")


def layer(g: Graph, inp: Inputs, il: int, res: Tensor, last: bool) -> Tensor:
    """One block: norm, mixer (attention, MLA or delta net), residual, norm, FFN, residual."""
    p = f"blk.{il}."
    if g.d.record.block:
        return _ONE_PART_BLOCKS[g.d.record.block](g, inp, il, res)
    x = g.norm(res, g.w(p + "attn_norm.weight"), "attn_norm")
    if g.d.recurrent[il]:
        cur = _MIXERS[g.d.record.mixer](g, inp, il, x)
    elif g.d.indexer_k:
        cur = attention_dsa(g, inp, il, x)
    elif g.has(p + "attn_kv_a_mqa.weight"):
        cur = attention_mla(g, inp, il, x)
    else:
        cur = attention(g, inp, il, x)
    if last and not g.d.record.out_ids_late:
        n_out = (g.d.n_embd, g.run.n_outputs)
        cur = g.op("get_rows", "attn_out_rows", n_out, cur, inp.out_ids)
        res = g.op("get_rows", "res_rows", n_out, res, inp.out_ids)
    cur = _scaled(g, cur, "residual_scale")
    ffn_inp = g.op("add", "ffn_inp", cur.ne, *_residual(g, cur, res))
    norm_w = g.w(p + "ffn_norm.weight") or g.w(p + "post_attention_norm.weight")
    x = g.norm(ffn_inp, norm_w, "ffn_norm")
    out = moe(g, il, x) if g.has(p + "ffn_gate_inp.weight") else ffn(g, il, x, "")
    out = _scaled(g, out, "residual_scale")
    return g.op("add", "l_out", out.ne, *_residual(g, out, ffn_inp))


def _residual(g: Graph, cur: Tensor, res: Tensor) -> tuple[Tensor, Tensor]:
    """The residual add's sources (ggml-alloc tries src0 first in place)."""
    return (res, cur) if g.d.record.residual_first else (cur, res)


def _scaled(g: Graph, cur: Tensor, key: str) -> Tensor:
    """Granite's scales (residual_scale, embedding_scale, logit_scale): a ggml_scale when
    the key is set and non-zero."""
    if not g.hparams.get(key):
        return cur
    return g.op("scale", key, cur.ne, cur)


def output(g: Graph, inp: Inputs, res: Tensor) -> None:
    """Output norm and logits for the output rows (t_embd and t_logits are outputs)."""
    n_out = (g.d.n_embd, g.run.n_outputs)
    late = g.d.record.out_ids_late
    if late == "l_out":
        res.is_output = True  # t_h_nextn
        res = g.op("get_rows", "rows", n_out, res, inp.out_ids)
    cur = g.norm(res, g.w(g.d.record.output_norm), "result_norm")
    if late == "norm":
        cur.is_output = True  # t_h_nextn
        cur = g.op("get_rows", "result_norm", n_out, cur, inp.out_ids)
    cur.is_output = True
    logits = _scaled(g, g.mm(g.output_weight(), cur, g.d.n_vocab, "result_output"), "logit_scale")
    logits.is_output = True
