"""clip's warm-up graphs (tools/mtmd/models/*.cpp, build 11434) for the projector types
moetune replays: SigLIP + Gemma 3 pooling (siglip.cpp), the Qwen2/2.5-VL and Qwen3-VL
mergers (qwen2vl.cpp, qwen3vl.cpp) and GLM-4V (glm4v.cpp)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from moetune.core.compute.clip.builder import F16, F32, I32, Builder
from moetune.core.compute.ir import Tensor


class Shape(NamedTuple):
    """What a graph needs: the projector type, the tower's shape, the warm-up image side."""

    proj: str
    n_embd: int
    n_head: int
    d_head: int
    n_layer: int
    patch: int
    n_merge: int
    n_wa_pattern: int
    image: int  # warm-up image side (pixels)

    @property
    def px(self) -> int:
        return self.image // self.patch

    @property
    def n_patches(self) -> int:
        return self.px * self.px


def _blk(il: int, name: str) -> str:
    return f"v.blk.{il}.{name}"


def _qkv_views(b: Builder, cur: Tensor, s: Shape) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V as strided views of one fused qkv result: [d_head, n_head, n_pos, 1]."""
    ne = (s.d_head, s.n_head, s.n_patches, 1)
    return b.view(cur, ne, "view"), b.view(cur, ne, "view"), b.view(cur, ne, "view")


def _separate_qkv(
    b: Builder, cur: Tensor, s: Shape, il: int, rms: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """build_vit's separate Q/K/V (with biases and optional whole-width norms), reshaped."""
    ne = (s.d_head, s.n_head, s.n_patches, 1)
    out = []
    for part in ("q", "k", "v"):
        x = b.add(
            b.mm(b.w(_blk(il, f"attn_{part}.weight")), cur), b.w(_blk(il, f"attn_{part}.bias"))
        )
        norm = b.w(_blk(il, f"attn_{part}_norm.weight")) if part != "v" else None
        if norm is not None and norm.ne[0] != s.d_head:
            x = b.norm(x, norm, None, rms)
        x = b.view(x, ne)
        if norm is not None and norm.ne[0] == s.d_head:
            x = b.norm(x, norm, None, rms)
        out.append(x)
    return out[0], out[1], out[2]


def _ffn_of(b: Builder, x: Tensor, il: int) -> Tensor:
    def g(name: str) -> Tensor | None:
        return b.w(_blk(il, name))

    return b.ffn(
        x,
        g("ffn_up.weight"),
        g("ffn_up.bias"),
        g("ffn_gate.weight"),
        g("ffn_gate.bias"),
        g("ffn_down.weight"),
        g("ffn_down.bias"),
    )


def build_vit(
    b: Builder,
    inp: Tensor,
    s: Shape,
    *,
    rms: bool,
    pos: Tensor | None,
    add_pos: Callable[[Tensor], Tensor] | None,
) -> Tensor:
    """clip_graph::build_vit (one image): [n_embd, n_pos, 1]."""
    if pos is not None:
        inp = b.add(inp, pos)
    inp_l = b.view(inp, (s.n_embd, s.n_patches))
    if b.has("v.pre_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.pre_ln.weight"), b.w("v.pre_ln.bias"), rms)
    for il in range(s.n_layer):
        cur = b.norm(inp_l, b.w(_blk(il, "ln1.weight")), b.w(_blk(il, "ln1.bias")), rms)
        qkv_w = b.w(_blk(il, "attn_qkv.weight"))
        if qkv_w is not None:
            cur = b.add(b.mm(qkv_w, cur), b.w(_blk(il, "attn_qkv.bias")))
            q, k, v = _qkv_views(b, cur, s)
            for part in ("q", "k"):
                norm = b.w(_blk(il, f"attn_{part}_norm.weight"))
                if norm is not None:
                    if part == "q":
                        q = b.norm(q, norm, None, rms)
                    else:
                        k = b.norm(k, norm, None, rms)
        else:
            q, k, v = _separate_qkv(b, cur, s, il, rms)
        if add_pos is not None:
            q, k = add_pos(q), add_pos(k)
        cur = b.attn(
            b.w(_blk(il, "attn_out.weight")), b.w(_blk(il, "attn_out.bias")), q, k, v, None
        )
        cur = b.mul(cur, b.w(_blk(il, "ls1.weight")))
        if b.has(_blk(il, "attn_post_norm.weight")):
            cur = b.norm(cur, b.w(_blk(il, "attn_post_norm.weight")), None, rms)
        cur = b.add(cur, inp_l)
        inp_l = cur
        cur = b.norm(cur, b.w(_blk(il, "ln2.weight")), b.w(_blk(il, "ln2.bias")), rms)
        cur = _ffn_of(b, cur, il)
        if b.has(_blk(il, "ffn_post_norm.weight")):
            cur = b.norm(cur, b.w(_blk(il, "ffn_post_norm.weight")), None, rms)
        cur = b.mul(cur, b.w(_blk(il, "ls2.weight")))
        cur = b.add(inp_l, cur)
        inp_l = b.mul(cur, b.w(_blk(il, "out_scale.weight")))
    if b.has("v.post_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.post_ln.weight"), b.w("v.post_ln.bias"), rms)
    return b.view(inp_l, (s.n_embd, s.n_patches, 1))


def build_inp(b: Builder, s: Shape) -> tuple[Tensor, Tensor]:
    """clip_graph::build_inp: the patch conv, transposed to [n_embd, n_patches] (+ bias)."""
    inp_raw = b.inp("inp_raw", (s.image, s.image, 3, 1))
    inp = b.conv_2d(b.req("v.patch_embd.weight"), inp_raw, s.patch)
    inp = b.view(inp, (s.n_patches, s.n_embd, 1))
    inp = b.cont(b.transpose(inp))
    return b.add(inp, b.w("v.patch_embd.bias")), inp_raw


def resize_pos(b: Builder, s: Shape) -> Tensor:
    """clip_graph::resize_position_embeddings: the weight itself at its native size."""
    pos = b.req("v.position_embd.weight")
    side = math.isqrt(pos.ne[1])
    if side == s.px:
        return pos
    cur = b.view(pos, (s.n_embd, side, side))
    cur = b.permute(cur, 2, 0, 1, 3)
    cur = b.op("upscale", (s.px, s.px, s.n_embd, 1), cur)
    cur = b.permute(cur, 1, 2, 0, 3)
    return b.cont(cur, (s.n_embd, s.n_patches))


def merge_2x2(b: Builder, x: Tensor, s: Shape) -> Tensor:
    """The Qwen/GLM "second conv dimension" reorder of [w, h, c] or [c, w*h] into 2x2 groups."""
    cur = b.cont(x, (s.n_embd * 2, s.px // 2, s.px, 1))
    cur = b.view(cur, (s.n_embd * 2, s.px // 2, 2, s.px // 2))
    cur = b.permute(cur, 0, 2, 1, 3)
    return b.cont(cur, (s.n_embd, s.n_patches, 1))


def _two_convs(b: Builder, s: Shape) -> tuple[Tensor, Tensor]:
    inp_raw = b.inp("inp_raw", (s.image, s.image, 3, 1))
    conv0 = b.conv_2d(b.req("v.patch_embd.weight"), inp_raw, s.patch)
    conv1 = b.conv_2d(b.req("v.patch_embd.weight.1"), inp_raw, s.patch)
    inp = b.add(conv0, conv1)
    return merge_2x2(b, b.permute(inp, 1, 2, 0, 3), s), inp_raw


def build_gemma3(b: Builder, s: Shape) -> Tensor:
    """clip_graph_siglip for PROJECTOR_TYPE_GEMMA3: ViT, avg-pool, RMS norm, projection."""
    inp, _ = build_inp(b, s)
    cur = build_vit(b, inp, s, rms=False, pos=b.w("v.position_embd.weight"), add_pos=None)
    cur = b.transpose(cur)
    cur = b.cont(cur, (s.px, s.px, s.n_embd, 1))
    side = (s.px - s.n_merge) // s.n_merge + 1
    cur = b.op("pool_2d", (side, side, s.n_embd, 1), cur)
    cur = b.view(cur, (side * side, s.n_embd, 1))
    cur = b.cont(b.transpose(cur))
    cur = b.mul(b.op("rms_norm", cur.ne, cur), b.w("mm.soft_emb_norm.weight"))
    proj = b.req("mm.input_projection.weight")
    return b.mm(b.cont(b.transpose(proj)), cur)


def _mrope(b: Builder, pos: Tensor) -> Callable[[Tensor], Tensor]:
    return lambda x: b.rope(x, pos)


def build_qwen2vl(b: Builder, s: Shape) -> Tensor:
    """clip_graph_qwen2vl (Qwen2-VL, Qwen2.5-VL with window attention)."""
    rms = s.proj == "qwen2.5vl_merger"
    inp, _ = _two_convs(b, s)
    n = s.n_patches
    positions = b.inp("positions", (n * 4,), I32)
    inp_l = inp
    if b.has("v.pre_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.pre_ln.weight"), b.w("v.pre_ln.bias"), rms)
    window_mask = None
    if s.n_wa_pattern > 0:
        inv_idx = b.inp("inv_window_idx", (n // 4,), I32)
        window_mask = b.inp("window_mask", (n, n), F32)
        if b.flash_attn:
            window_mask = b.cast(window_mask, F16)
        inp_l = b.view(inp_l, (s.n_embd * 4, n // 4))
        inp_l = b.op("get_rows", (s.n_embd * 4, n // 4), inp_l, inv_idx)
        inp_l = b.view(inp_l, (s.n_embd, n, 1))
    for il in range(s.n_layer):
        full = (il + 1) % s.n_wa_pattern == 0 if s.n_wa_pattern > 0 else True
        cur = b.norm(inp_l, b.w(_blk(il, "ln1.weight")), b.w(_blk(il, "ln1.bias")), rms)
        ne = (s.d_head, s.n_head, n)
        proj = [b.mm(b.w(_blk(il, f"attn_{p}.weight")), cur) for p in "qkv"]
        q, k, v = (
            b.view(b.add(x, b.w(_blk(il, f"attn_{p}.bias"))), ne)
            for x, p in zip(proj, "qkv", strict=True)
        )
        q, k = b.rope(q, positions), b.rope(k, positions)
        cur = b.attn(
            b.w(_blk(il, "attn_out.weight")),
            b.w(_blk(il, "attn_out.bias")),
            q,
            k,
            v,
            None if full else window_mask,
        )
        cur = b.add(cur, inp_l)
        inp_l = cur
        cur = b.norm(cur, b.w(_blk(il, "ln2.weight")), b.w(_blk(il, "ln2.bias")), rms)
        inp_l = b.add(inp_l, _ffn_of(b, cur, il))
    if b.has("v.post_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.post_ln.weight"), b.w("v.post_ln.bias"), rms)
    emb = b.view(inp_l, (s.n_embd * 4, n // 4, 1))
    emb = b.ffn(
        emb, b.w("mm.0.weight"), b.w("mm.0.bias"), None, None, b.w("mm.2.weight"), b.w("mm.2.bias")
    )
    if s.n_wa_pattern > 0:
        idx = b.inp("window_idx", (n // 4,), I32)
        emb = b.view(emb, (emb.ne[0], n // 4))
        emb = b.op("get_rows", (emb.ne[0], n // 4), emb, idx)
        emb = b.view(emb, (emb.ne[0], n // 4, 1))
    return emb


def build_qwen3vl(b: Builder, s: Shape) -> Tensor:
    """clip_graph_qwen3vl: fused qkv, learned + M-RoPE positions, deepstack mergers."""
    inp, _ = _two_convs(b, s)
    n = s.n_patches
    inp = b.add(inp, b.w("v.patch_embd.bias"))
    pos = merge_2x2(b, resize_pos(b, s), s)
    inp_l = b.add(inp, pos)
    positions = b.inp("positions", (n * 4,), I32)
    if b.has("v.pre_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.pre_ln.weight"), b.w("v.pre_ln.bias"), False)
    deepstack: Tensor | None = None
    for il in range(s.n_layer):
        cur = b.norm(inp_l, b.w(_blk(il, "ln1.weight")), b.w(_blk(il, "ln1.bias")), False)
        cur = b.add(b.mm(b.w(_blk(il, "attn_qkv.weight")), cur), b.w(_blk(il, "attn_qkv.bias")))
        q, k, v = _qkv_views(b, cur, s)
        q, k = b.rope(q, positions), b.rope(k, positions)
        cur = b.attn(
            b.w(_blk(il, "attn_out.weight")), b.w(_blk(il, "attn_out.bias")), q, k, v, None
        )
        cur = b.add(cur, inp_l)
        inp_l = cur
        cur = b.norm(cur, b.w(_blk(il, "ln2.weight")), b.w(_blk(il, "ln2.bias")), False)
        cur = b.add(inp_l, _ffn_of(b, cur, il))
        if b.has(f"v.deepstack.{il}.fc1.weight"):
            m = s.n_merge * s.n_merge
            feat = b.view(cur, (s.n_embd * m, n // m, 1))
            feat = b.norm(
                feat,
                b.w(f"v.deepstack.{il}.norm.weight"),
                b.w(f"v.deepstack.{il}.norm.bias"),
                False,
            )
            feat = b.ffn(
                feat,
                b.w(f"v.deepstack.{il}.fc1.weight"),
                b.w(f"v.deepstack.{il}.fc1.bias"),
                None,
                None,
                b.w(f"v.deepstack.{il}.fc2.weight"),
                b.w(f"v.deepstack.{il}.fc2.bias"),
            )
            deepstack = feat if deepstack is None else b.concat0(deepstack, feat)
        inp_l = cur
    if b.has("v.post_ln.weight"):
        inp_l = b.norm(inp_l, b.w("v.post_ln.weight"), b.w("v.post_ln.bias"), False)
    emb = b.view(inp_l, (s.n_embd * 4, n // 4, 1))
    emb = b.ffn(
        emb, b.w("mm.0.weight"), b.w("mm.0.bias"), None, None, b.w("mm.2.weight"), b.w("mm.2.bias")
    )
    return emb if deepstack is None else b.concat0(emb, deepstack)


def build_glm4v(b: Builder, s: Shape) -> Tensor:
    """clip_graph_glm4v: two patch convs, RMS ViT with M-RoPE, conv patch merger, FC, FFN."""
    n = s.n_patches
    inp_raw = b.inp("inp_raw", (s.image, s.image, 3, 1))
    inp = b.conv_2d(b.req("v.patch_embd.weight"), inp_raw, s.patch)
    positions = b.inp("positions", (n * 4,), I32)
    inp = b.add(inp, b.conv_2d(b.req("v.patch_embd.weight.1"), inp_raw, s.patch))
    inp = merge_2x2(b, b.permute(inp, 1, 2, 0, 3), s)
    inp = b.add(inp, b.w("v.patch_embd.bias"))
    if b.has("v.norm_embd.weight"):
        inp = b.norm(inp, b.w("v.norm_embd.weight"), b.w("v.norm_embd.bias"), True)
    pos = merge_2x2(b, resize_pos(b, s), s) if b.has("v.position_embd.weight") else None
    cur = build_vit(b, inp, s, rms=True, pos=pos, add_pos=_mrope(b, positions))
    m = s.n_merge
    n_out = n // m // m
    cur = b.view(cur, (s.n_embd, m, m, n_out))
    cur = b.cont(b.permute(cur, 2, 0, 1, 3))
    cur = b.conv_2d(b.req("mm.patch_merger.weight"), cur, m)
    cur = b.view(cur, (cur.ne[2], n_out))
    cur = b.add(cur, b.w("mm.patch_merger.bias"))
    cur = b.mm(b.req("mm.model.fc.weight"), cur)
    cur = b.norm(cur, b.w("mm.post_norm.weight"), b.w("mm.post_norm.bias"), False)
    cur = b.unary(cur)
    return b.ffn(
        cur,
        b.w("mm.up.weight"),
        b.w("mm.up.bias"),
        b.w("mm.gate.weight"),
        b.w("mm.gate.bias"),
        b.w("mm.down.weight"),
        b.w("mm.down.bias"),
    )


GRAPHS: dict[str, Callable[[Builder, Shape], Tensor]] = {
    "gemma3": build_gemma3,
    "qwen2vl_merger": build_qwen2vl,
    "qwen2.5vl_merger": build_qwen2vl,
    "qwen3vl_merger": build_qwen3vl,
    "glm4v": build_glm4v,
}
