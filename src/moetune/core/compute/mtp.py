"""The MTP context's reserve graph (``LLM_GRAPH_TYPE_DECODER_MTP``): one NextN block run on
the target model's weights, after src/models/glm4-moe.cpp and qwen35moe.cpp ``graph_mtp``.

Inputs: the draft tokens and the target's hidden state ``h``
(``mtp_h_input``, n_embd x T), then positions, output ids and the KV inputs of the MTP cache.
Nodes: the token rows (``nextn.embed_tokens`` if the block has its own, else ``token_embd``),
RMS norms of both (``enorm``, ``hnorm``), their concat (2E x T), ``eh_proj``, then a full
decoder block over all T tokens (attention on the NextN block's own cache, the MoE FFN with
its shared expert), the head norm (``nextn.shared_head_norm``, else ``output_norm``; its
result ``h_nextn`` is an output), the output rows and the logits by ``nextn.shared_head_head``
(else ``output``).

The context reserves like any other (llama_context::sched_reserve): T = min(n_ctx, n_ubatch)
tokens over the whole MTP cache, ``n_outputs_max = n_parallel`` logits rows
(common_base_params_to_speculative), its own scheduler and buffers, the same pipeline-parallel
rule as the main context. Replayed whole (``alloc.simulate``'s steps): one block is cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

from moetune.core.compute.alloc import schedule_and_allocate
from moetune.core.compute.attention import attention
from moetune.core.compute.ffn import ffn, moe
from moetune.core.compute.inputs import Inputs, _attn_inputs, _rot_input
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import CPU_BACKEND, F32, I32, LayerHomes, Options, Run
from moetune.core.facts import ModelFacts


def mtp_inputs(g: Graph) -> tuple[Inputs, Tensor]:
    """The MTP graph's input leaves, in llama.cpp's order (llm_graph_input_embd_h, then
    build_inp_pos, build_inp_out_ids, build_attn_inp_kv), and the hidden-state input."""
    t, e = g.run.n_tokens, g.d.n_embd
    tokens = g.input("inp_tokens", (t,), I32)
    # inp->embd (n_embd_inp x T) is set as an input but, with tokens, no node uses it: it is
    # not in the graph and ggml-alloc never allocates it
    h = g.input("mtp_h_input", (e, t), F32)
    pos = g.input("inp_pos", (t * g.d.n_pos,), I32)
    out_ids = g.input("out_ids", (g.run.n_outputs,), I32)
    k_rot = _rot_input(g, "k", g.d.head_k[0])
    v_rot = _rot_input(g, "v", g.d.head_v[0])
    attn = {"full": _attn_inputs(g, "full", False, k_rot, v_rot)}
    return Inputs(tokens, (None, None, None), pos, None, attn, out_ids), h


def _head_norm(g: Graph, x: Tensor, w: Tensor | None) -> Tensor:
    """build_norm with il = -1: never pinned to a block's device."""
    cur = g.op("rms_norm", "norm", x.ne, x)
    return cur if w is None else g.op("mul", "h_nextn", x.ne, cur, w)


def build_mtp_graph(g: Graph, il: int) -> None:
    """graph_mtp for NextN block ``il`` (the first one: ``nextn_layer_offset`` 0)."""
    p, t, e = f"blk.{il}.", g.run.n_tokens, g.d.n_embd
    inp, h = mtp_inputs(g)
    embed = g.w(p + "nextn.embed_tokens.weight") or g.w("token_embd.weight")
    tok = g.op("get_rows", "mtp_tok_embd", (e, t), embed, inp.tokens)
    h_norm = g.norm(h, g.w(p + "nextn.hnorm.weight"), "mtp_hnorm")
    e_norm = g.norm(tok, g.w(p + "nextn.enorm.weight"), "mtp_enorm")
    concat = g.op("concat", "mtp_concat", (2 * e, t), e_norm, h_norm)
    res = g.mm(g.w(p + "nextn.eh_proj.weight"), concat, e, "mtp_eh_proj")
    x = g.norm(res, g.w(p + "attn_norm.weight"), "mtp_attn_norm")
    cur = attention(g, inp, il, x)
    ffn_inp = g.op("add", "mtp_ffn_inp", cur.ne, cur, res)
    x = g.norm(ffn_inp, g.w(p + "post_attention_norm.weight"), "mtp_post_attn_norm")
    out = moe(g, il, x) if g.has(p + "ffn_gate_inp.weight") else ffn(g, il, x, "")
    cur = g.op("add", "mtp_post_ffn", out.ne, out, ffn_inp)
    head_norm = g.w(p + "nextn.shared_head_norm.weight") or g.w("output_norm.weight")
    cur = _head_norm(g, cur, head_norm)
    cur.is_output = True  # t_h_nextn
    cur = g.op("get_rows", "mtp_shared_head_norm", (e, g.run.n_outputs), cur, inp.out_ids)
    head = g.w(p + "nextn.shared_head_head.weight") or g.output_weight()
    logits = g.mm(head, cur, g.d.n_vocab, "result_output")
    logits.is_output = True


def simulate_mtp(
    facts: ModelFacts, run: Run, place: LayerHomes, opts: Options, il: int
) -> dict[int, int]:
    """Build, schedule and allocate the MTP graph: the peak bytes per backend."""
    graph = Graph(facts, run, place, opts)
    build_mtp_graph(graph, il)
    return schedule_and_allocate(graph, opts)


def mtp_peaks(
    facts: ModelFacts, run: Run, place: LayerHomes, opts: Options, kinds: Sequence[str]
) -> tuple[tuple[int, ...], int]:
    """Each device's and the host's MTP compute buffer (0 where the model has no NextN)."""
    layout = facts.dims
    if layout.kv_end >= layout.n_layer_all:
        return (0,) * len(kinds), 0
    peaks = simulate_mtp(facts, run, place, opts, layout.kv_end)
    return tuple(peaks.get(i, 0) for i in range(len(kinds))), peaks.get(CPU_BACKEND, 0)
