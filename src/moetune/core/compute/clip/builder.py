"""A ggml graph under construction for clip (tools/mtmd): tensors as ``ir.Tensor``, ops with
ggml's source order and shapes, and ggml's node order (ggml_visit_parents_graph: a
depth-first walk over the sources, from each ``ggml_build_forward_order`` root in turn, then
from the output)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from moetune.core.compute.ir import Tensor
from moetune.core.compute.params import F16, F32, I32

Shape = tuple[int, ...]


def _pad4(ne: Sequence[int]) -> Shape:
    return (*ne, *([1] * (4 - len(ne))))


def esize_of(type_name: str) -> float:
    """Bytes per element of a weight type (used by ops that copy a weight, e.g. cont)."""
    return {"F32": 4.0, "F16": 2.0, "BF16": 2.0}.get(type_name.upper(), 2.0)


class Builder:
    """The clip graph being built: weights (pre-allocated in ``weight_backend``), inputs
    (``ggml_set_input``: the CPU's), ops and views; ``order()`` gives ggml's node order."""

    def __init__(
        self, weights: Mapping[str, tuple[Shape, str, int]], weight_backend: int, flash_attn: bool
    ) -> None:
        self._weights = weights
        self._made: dict[str, Tensor] = {}
        self.weight_backend = weight_backend
        self.flash_attn = flash_attn
        self.roots: list[Tensor] = []

    # --- leaves ---------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._weights

    def w(self, name: str) -> Tensor | None:
        """A weight by tensor name (None if the file lacks it)."""
        if name not in self._weights:
            return None
        if name not in self._made:
            shape, type_name, nbytes = self._weights[name]
            self._made[name] = Tensor(
                name,
                "none",
                _pad4(shape),
                esize_of(type_name),
                buffer=self.weight_backend,
                weight=True,
                fixed_bytes=nbytes,
            )
        return self._made[name]

    def req(self, name: str) -> Tensor:
        found = self.w(name)
        if found is None:
            raise KeyError(name)
        return found

    def inp(self, name: str, ne: Sequence[int], esize: float = F32) -> Tensor:
        return Tensor(name, "none", _pad4(ne), esize, is_input=True)

    # --- ops -----------------------------------------------------------------------------
    def op(self, op: str, ne: Sequence[int], *srcs: Tensor | None, esize: float = F32) -> Tensor:
        return Tensor(op, op, _pad4(ne), esize, srcs=[s for s in srcs if s is not None])

    def view(self, src: Tensor, ne: Sequence[int] | None = None, op: str = "reshape") -> Tensor:
        base = src.view_src if src.view_src is not None else src
        shape = src.ne if ne is None else _pad4(ne)
        return Tensor(f"{src.name} ({op})", op, shape, src.esize, [src], base)

    def permute(self, src: Tensor, *axes: int) -> Tensor:
        """ggml_permute: source dim i goes to position axes[i]."""
        ne = [0, 0, 0, 0]
        for i, axis in enumerate(axes):
            ne[axis] = src.ne[i]
        return self.view(src, ne, "permute")

    def transpose(self, src: Tensor) -> Tensor:
        return self.view(src, (src.ne[1], src.ne[0], *src.ne[2:]), "transpose")

    def cont(self, src: Tensor, ne: Sequence[int] | None = None) -> Tensor:
        return self.op("cont", src.ne if ne is None else ne, src, esize=src.esize)

    def cast(self, src: Tensor, esize: float) -> Tensor:
        return self.op("cpy", src.ne, src, esize=esize)

    def mm(self, w: Tensor | None, x: Tensor) -> Tensor:
        """ggml_mul_mat(w, x): [w.ne1, x.ne1, x.ne2, x.ne3]."""
        if w is None:
            return x
        return self.op("mul_mat", (w.ne[1], *x.ne[1:]), w, x)

    def add(self, a: Tensor, b: Tensor | None) -> Tensor:
        return a if b is None else self.op("add", a.ne, a, b)

    def mul(self, a: Tensor, b: Tensor | None) -> Tensor:
        return a if b is None else self.op("mul", a.ne, a, b)

    def unary(self, a: Tensor) -> Tensor:
        return self.op("unary", a.ne, a)

    def norm(self, x: Tensor, w: Tensor | None, b: Tensor | None, rms: bool) -> Tensor:
        """clip_graph::build_norm."""
        cur = self.op("rms_norm" if rms else "norm", x.ne, x)
        return self.add(self.mul(cur, w), b)

    def conv_2d(self, kernel: Tensor, x: Tensor, stride: int) -> Tensor:
        """ggml_conv_2d (no padding): im2col (F16), mul_mat, permute, cont."""
        kw, kh, ic, oc = kernel.ne
        ow = (x.ne[0] - kw) // stride + 1
        oh = (x.ne[1] - kh) // stride + 1
        n = x.ne[3]
        # F16 columns (F32 for a BF16 kernel, not modelled: BF16 patch embeddings are rare)
        im2col = self.op("im2col", (ic * kh * kw, ow, oh, n), kernel, x, esize=F16)
        cols = self.view(im2col, (ic * kh * kw, ow * oh * n))
        res = self.op("mul_mat", (ow * oh * n, oc), cols, self.view(kernel, (kw * kh * ic, oc)))
        res = self.view(res, (ow, oh, n, oc))
        return self.cont(self.permute(res, 0, 1, 3, 2))

    def ffn(  # noqa: PLR0917 - build_ffn's own order
        self,
        x: Tensor,
        up: Tensor | None,
        up_b: Tensor | None,
        gate: Tensor | None,
        gate_b: Tensor | None,
        down: Tensor | None,
        down_b: Tensor | None,
    ) -> Tensor:
        """clip_graph::build_ffn: a GLU op with a gate, else an in-place activation."""
        tmp = self.add(self.mm(up, x), up_b)
        if gate is not None:
            cur = self.add(self.mm(gate, x), gate_b)
            cur = self.op("glu", cur.ne, cur, tmp)
        else:
            cur = self.unary(tmp)
        return self.add(self.mm(down, cur), down_b)

    def attn(  # noqa: PLR0917 - build_attn's own order
        self,
        wo: Tensor | None,
        wo_b: Tensor | None,
        q_cur: Tensor,
        k_cur: Tensor,
        v_cur: Tensor,
        mask: Tensor | None,
    ) -> Tensor:
        """clip_graph::build_attn over [d_head, n_head, n_pos, 1] Q/K/V."""
        self.roots += [q_cur, k_cur, v_cur]  # ggml_build_forward_order
        q = self.permute(q_cur, 0, 2, 1, 3)
        k = self.permute(k_cur, 0, 2, 1, 3)
        if self.flash_attn:
            v = self.permute(v_cur, 0, 2, 1, 3)
            k = self.cast(k, F16)
            v = self.cast(v, F16)
            if mask is not None:
                mask = self.cast(mask, F16)
            fa = self.op("flash_attn", (v.ne[0], q.ne[2], q.ne[1], q.ne[3]), q, k, v, mask)
            cur = self.view(fa, (fa.ne[0] * fa.ne[1], fa.ne[2] * fa.ne[3]))
        else:
            v = self.cont(self.permute(v_cur, 1, 2, 0, 3))
            kq = self.op("mul_mat", (k.ne[1], q.ne[1], q.ne[2], q.ne[3]), k, q)
            kq = self.op("soft_max", kq.ne, kq, mask)
            kqv = self.op("mul_mat", (v.ne[1], kq.ne[1], kq.ne[2], kq.ne[3]), v, kq)
            cur = self.permute(kqv, 0, 2, 1, 3)
            cur = self.cont(cur, (cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3]))
        return self.add(self.mm(wo, cur), wo_b)

    def rope(self, x: Tensor, pos: Tensor) -> Tensor:
        return self.op("rope", x.ne, x, pos)

    def concat0(self, a: Tensor, b: Tensor) -> Tensor:
        return self.op("concat", (a.ne[0] + b.ne[0], *a.ne[1:]), a, b)

    # --- order ---------------------------------------------------------------------------
    def order(self, output: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """ggml's nodes and leafs: depth-first over sources from each root, then the output."""
        seen: set[int] = set()
        nodes: list[Tensor] = []
        leafs: list[Tensor] = []
        for root in [*self.roots, output]:
            stack: list[tuple[Tensor, int]] = [(root, 0)]
            if id(root) in seen:
                continue
            seen.add(id(root))
            while stack:
                t, i = stack.pop()
                if i < len(t.srcs):
                    stack.append((t, i + 1))
                    src = t.srcs[i]
                    if id(src) not in seen:
                        seen.add(id(src))
                        stack.append((src, 0))
                    continue
                (leafs if t.op == "none" else nodes).append(t)
        return nodes, leafs


def n_elements(ne: Sequence[int]) -> int:
    return math.prod(ne)


__all__ = ["F16", "F32", "I32", "Builder", "Shape", "esize_of", "n_elements"]
