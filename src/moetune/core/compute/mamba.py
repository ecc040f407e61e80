"""Mamba mixers of the recurrent hybrids: Mamba-2 (Granite 4.0 H, Nemotron-H) and Mamba-1
(Jamba), after src/models/mamba-base.cpp ``build_mamba2_layer`` / ``build_mamba_layer`` and
llm_graph_context::build_rs (src/llama-graph.cpp), in ggml's node order (a depth-first walk
from each ``ggml_build_forward_expand``, sources left to right)."""

from __future__ import annotations

from moetune.core.compute.inputs import Inputs
from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import F32


def _gather(g: Graph, inp: Inputs, il: int, kind: str, rows: int, *, custom: bool) -> Tensor:
    """build_rs, first half: gather the states of the ubatch's sequences from the cache (rows
    ``rows`` wide).  With a custom getter (the SSM scan reads its own states) the gather skips
    the first state: ``n_rs - 1`` rows.  Returns the gathered rows."""
    n_seqs = g.run.n_seqs
    cache = g.cache(f"cache_{kind}_l{il}", il, (rows, n_seqs), F32)
    n_rows = n_seqs - 1 if custom else n_seqs
    return g.op("get_rows", f"{kind}_states", (rows, n_rows), g.view(cache), inp.rs_copy)


def _write_back(g: Graph, il: int, kind: str, rows: int, src: Tensor) -> None:
    """A cpy of (a view of) ``src`` into the layer's ``kind`` state cache."""
    cache = g.cache(f"cache_{kind}_l{il}", il, (rows, g.run.n_seqs), F32)
    g.into("cpy", f"{kind}_state_cpy", cache, g.view(src), g.view(cache))


def mamba2(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """build_mamba2_layer: ssm_in -> (z | xBC | dt); conv state + xBC -> ssm_conv (+bias)
    -> silu; ssm_scan over the states; y + x*D; swiglu(z, y); grouped RMS norm; ssm_out."""
    p, ssm, run = f"blk.{il}.", g.d.ssm, g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    d_inner, n_head = ssm.inner_size, max(ssm.time_step_rank, 1)
    head_dim, n_group = d_inner // n_head, max(ssm.group_count, 1)
    channels = d_inner + 2 * n_group * ssm.state_size
    conv = _gather(g, inp, il, "r", ssm.n_embd_r, custom=False)
    _write_back(g, il, "r", ssm.n_embd_r, conv)  # the extra states (none in the reserve)
    conv = g.view(conv, (ssm.conv_kernel - 1, channels, n_seqs), "reshape")
    zxbcdt = g.mm(g.w(p + "ssm_in.weight"), x, d_inner + channels + n_head, "zxBCdt")
    zxbcdt = g.view(zxbcdt, (zxbcdt.ne[0], seq_t, n_seqs), "reshape")
    xbc = g.view(g.view(zxbcdt, (channels, seq_t, n_seqs)), None, "transpose")
    conv_x = g.op("concat", "conv_x", (ssm.conv_kernel - 1 + seq_t, channels, n_seqs), conv, xbc)
    _write_back(g, il, "r", ssm.n_embd_r, conv_x)  # the last d_conv - 1 columns
    xbc = g.op(
        "ssm_conv", "xBC_conv", (channels, seq_t, n_seqs), conv_x, g.w(p + "ssm_conv1d.weight")
    )
    bias = g.w(p + "ssm_conv1d.bias")
    if bias is not None:
        xbc = g.op("add", "xBC_biased", xbc.ne, xbc, bias)
    xbc = g.op("unary", "xBC_silu", xbc.ne, xbc)
    heads = (head_dim, n_head, seq_t, n_seqs)
    y = _mamba2_scan(g, inp, il, (xbc, zxbcdt), heads, n_group=n_group)
    xv = g.view(xbc, heads)
    y = g.op("add", "mamba2_y_add_d", heads, y, g.op("mul", "x_d", heads, xv, g.w(p + "ssm_d")))
    z = g.op("cont", "z", heads, g.view(zxbcdt, heads))
    y = g.op("glu", "y_swiglu", heads, z, y)
    if g.has(p + "ssm_norm.weight"):
        grouped = g.view(y, (d_inner // n_group, n_group, seq_t, n_seqs), "reshape")
        grouped.head_view = True
        y = g.norm(grouped, g.w(p + "ssm_norm.weight"), "ssm_norm")
    y = g.view(y, (d_inner, run.n_tokens), "reshape")
    return g.mm(g.w(p + "ssm_out.weight"), y, g.d.n_embd, "mamba_out")


def _mamba2_scan(
    g: Graph,
    inp: Inputs,
    il: int,
    srcs: tuple[Tensor, Tensor],
    heads: tuple[int, ...],
    *,
    n_group: int,
) -> Tensor:
    """dt + bias, ssm_scan over the cached states (build_rs with the scan as getter), the
    extra states and the new states written back; returns the scan's y view."""
    p, ssm = f"blk.{il}.", g.d.ssm
    xbc, zxbcdt = srcs
    head_dim, n_head, seq_t, n_seqs = heads
    cache_s = g.cache(f"cache_s_l{il}", il, (ssm.n_embd_s, n_seqs), F32)
    states = g.view(cache_s, (ssm.state_size, head_dim, n_head, n_seqs), "reshape")
    x = g.view(xbc, heads)
    dt = g.op("cont", "dt", (n_head, seq_t, n_seqs), g.view(zxbcdt, (n_head, seq_t, n_seqs)))
    dt = g.op("add", "dt_biased", dt.ne, dt, g.w(p + "ssm_dt.bias"))
    bc = (ssm.state_size, n_group, seq_t, n_seqs)
    scan = g.op(
        "ssm_scan",
        "y_ssm",
        (head_dim * n_head * seq_t * n_seqs + ssm.n_embd_s * n_seqs,),
        states,
        x,
        dt,
        g.w(p + "ssm_a"),
        g.view(xbc, bc),
        g.view(xbc, bc),
        inp.rs_copy,
    )
    return _scan_done(g, inp, il, scan, heads)


def _scan_done(g: Graph, inp: Inputs, il: int, scan: Tensor, ne: tuple[int, ...]) -> Tensor:
    """build_rs after the scan: the gather of the extra states (expanded only now) and their
    write-back, then the new states' write-back; returns the scan's y, a head view (the add
    of x*D reuses the scan's buffer and frees its state part)."""
    ssm = g.d.ssm
    extra = _gather(g, inp, il, "s", ssm.n_embd_s, custom=True)
    _write_back(g, il, "s", ssm.n_embd_s, extra)
    _write_back(g, il, "s", ssm.n_embd_s, scan)
    y = g.view(scan, ne)
    y.head_view = True
    return y


def mamba1(g: Graph, inp: Inputs, il: int, x: Tensor) -> Tensor:
    """build_mamba_layer: ssm_in -> (x | z); conv state + x -> ssm_conv (+bias) -> silu;
    ssm_x -> (dt | B | C), each RMS-normed when the norms exist (Jamba), else dt made
    contiguous; ssm_dt (+bias); ssm_scan; y + x*D; swiglu(z, y); ssm_out."""
    p, ssm, run = f"blk.{il}.", g.d.ssm, g.run
    seq_t, n_seqs = run.n_tokens // run.n_seqs, run.n_seqs
    d_inner, d_state, dt_rank = ssm.inner_size, ssm.state_size, max(ssm.time_step_rank, 1)
    conv = _gather(g, inp, il, "r", ssm.n_embd_r, custom=False)
    _write_back(g, il, "r", ssm.n_embd_r, conv)
    conv = g.view(conv, (ssm.conv_kernel - 1, d_inner, n_seqs), "reshape")
    x = g.view(x, (g.d.n_embd, seq_t, n_seqs), "reshape")
    xz = g.mm(g.w(p + "ssm_in.weight"), x, 2 * d_inner, "xz")
    xt = g.view(g.view(xz, (d_inner, seq_t, n_seqs)), None, "transpose")
    conv_x = g.op("concat", "conv_x", (ssm.conv_kernel - 1 + seq_t, d_inner, n_seqs), conv, xt)
    _write_back(g, il, "r", ssm.n_embd_r, conv_x)
    ne = (d_inner, seq_t, n_seqs)
    cache_s = g.cache(f"cache_s_l{il}", il, (ssm.n_embd_s, n_seqs), F32)
    states = g.view(cache_s, (d_state, 1, d_inner, n_seqs), "reshape")
    xc = g.op("ssm_conv", "x_conv", ne, conv_x, g.w(p + "ssm_conv1d.weight"))
    xc = g.op("add", "x_biased", ne, xc, g.w(p + "ssm_conv1d.bias"))
    xc = g.op("unary", "x_silu", ne, xc)
    x4 = g.view(xc, (1, d_inner, seq_t, n_seqs), "reshape")
    dt, b, c = _mamba1_dbc(g, il, xc, (dt_rank, d_state, seq_t, n_seqs))
    scan = g.op(
        "ssm_scan",
        "y_ssm",
        (d_inner * seq_t * n_seqs + ssm.n_embd_s * n_seqs,),
        states,
        x4,
        dt,
        g.w(p + "ssm_a"),
        b,
        c,
        inp.rs_copy,
    )
    y = _scan_done(g, inp, il, scan, ne)
    y = g.op("add", "y_add_d", ne, y, g.op("mul", "x_d", ne, xc, g.w(p + "ssm_d")))
    z = g.op("cont", "z", ne, g.view(xz, ne))
    y = g.op("glu", "y_swiglu", ne, z, y)
    out = g.mm(g.w(p + "ssm_out.weight"), y, g.d.n_embd, "mamba_out")
    return g.view(out, (g.d.n_embd, run.n_tokens), "reshape")


def _mamba1_dbc(
    g: Graph, il: int, x: Tensor, dims: tuple[int, int, int, int]
) -> tuple[Tensor, Tensor, Tensor]:
    """x_db = ssm_x @ x split into dt, B, C (RMS-normed with their weights when present, in
    the scan's source order: dt first), dt = ssm_dt @ dt + bias."""
    p = f"blk.{il}."
    dt_rank, d_state, seq_t, n_seqs = dims
    x_db = g.mm(g.w(p + "ssm_x.weight"), x, dt_rank + 2 * d_state, "x_db")
    dt = g.view(x_db, (dt_rank, seq_t, n_seqs))
    if g.has(p + "ssm_dt_norm.weight"):
        dt = g.norm(dt, g.w(p + "ssm_dt_norm.weight"), "ssm_dt_norm")
    else:
        dt = g.op("cont", "dt", dt.ne, dt)
    dt = g.mm(g.w(p + "ssm_dt.weight"), dt, g.d.ssm.inner_size, "dt")
    dt = g.op("add", "dt_biased", dt.ne, dt, g.w(p + "ssm_dt.bias"))
    bc = []
    for name in ("ssm_b_norm", "ssm_c_norm"):
        view = g.view(x_db, (d_state, 1, seq_t, n_seqs))
        w = g.w(p + name + ".weight")
        bc.append(g.norm(view, w, name) if w is not None else view)
    return dt, bc[0], bc[1]
