"""LFM2's gated short convolution (src/models/lfm2.cpp ``build_shortconv_block``, build 11434),
in ggml's node order: the conv state gathered by build_rs, in_proj -> (B | C | x), B*x
transposed after the state, the state written back (one snapshot without rollback),
ssm_conv, C * conv, out_proj."""

from __future__ import annotations

from moetune.core.compute.inputs import Inputs
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.mamba import _gather, _write_back


def shortconv(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """One short-conv mixer over the ubatch ``x`` [n_embd, T]."""
    p, run, e = f"blk.{il}.shortconv.", g.run, g.d.n_embd
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    n_embd_r = g.d.ssm.n_embd_r
    d_conv = max(g.d.ssm.shortconv_l_cache - 1, 1)
    conv = _gather(g, inp, il, "r", n_embd_r, custom=False)
    _write_back(g, il, "r", n_embd_r, conv)  # the extra states (none in the reserve)
    conv = g.view(conv, (d_conv, e, n_seqs), "reshape")
    ne = (e, seq_t, n_seqs)
    x3 = g.view(x, ne, "reshape")
    bcx = g.mm(g.w(p + "in_proj.weight"), x3, 3 * e, "conv_in_proj")
    bx = g.op("mul", "bx", ne, g.view(bcx, ne), g.view(bcx, ne))
    bx_t = g.view(bx, (seq_t, e, n_seqs), "transpose")
    conv_x = g.op("concat", "conv_x", (d_conv + seq_t, e, n_seqs), conv, bx_t)
    _write_back(g, il, "r", n_embd_r, conv_x)  # slot 0: the last d_conv columns
    c = g.view(bcx, ne)
    conv_out = g.op("ssm_conv", "conv_out", ne, conv_x, g.w(p + "conv.weight"))
    y = g.op("mul", "conv_y", ne, c, conv_out)
    y = g.mm(g.w(p + "out_proj.weight"), y, e, "conv_out_proj")
    return g.view(y, (e, run.n_tokens), "reshape")
