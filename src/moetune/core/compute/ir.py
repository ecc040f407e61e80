"""The graph IR: ggml tensors, the reserve graph being built, and the model's shapes."""

from __future__ import annotations

import math
from pathlib import PurePath

from moetune.core.compute.params import (
    CPU_BACKEND,
    CUDA_ROW_PADDING,
    DEV,
    F32,
    LayerHomes,
    Options,
    Run,
)
from moetune.core.facts import ModelFacts, TensorFacts
from moetune.errors import GGUFFormatError

_UNQUANTIZED = frozenset({"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"})


class HashNode:
    """ggml-alloc's hash_node for one tensor: users left, views left, where it lives."""

    __slots__ = ("allocated", "backend", "children", "offset", "views", "visited")

    def __init__(
        self, *, allocated: bool = False, visited: bool = False, offset: int = 0, backend: int = DEV
    ) -> None:
        self.children = self.views = 0
        self.allocated, self.visited = allocated, visited
        self.offset, self.backend = offset, backend

    def __repr__(self) -> str:
        where = f"{self.offset} on {self.backend}" if self.allocated else "unallocated"
        return f"HashNode({self.children} users, {self.views} views, {where})"


class Tensor:
    """One ggml tensor of the reserve graph: a node, an input leaf, a weight or a cache.

    ``view_src``: the base tensor of a view (never itself a view); ``buffer``: pre-allocated
    in this backend's buffer (weights, caches); ``quant_pad``: the row padding CUDA adds to a
    quantized tensor copied to it; ``cuda_extra``: what CUDA flash attention adds to convert a
    quantized K/V to F16 in place; ``fixed_bytes``: a weight's bytes from the file, or a
    strided view's span; ``port``: a tensor that crosses segments (replay.py); ``head_view``:
    a contiguous view at offset 0 of its source, which ggml-alloc lets an in-place op reuse.
    """

    __slots__ = (
        "alloc",
        "backend",
        "buffer",
        "cuda_extra",
        "esize",
        "fixed_bytes",
        "head_view",
        "is_input",
        "is_output",
        "name",
        "ne",
        "op",
        "port",
        "quant_pad",
        "srcs",
        "view_src",
        "weight",
    )

    def __init__(  # noqa: PLR0917 - ggml's own order: name, op, shape, type, sources, view
        self,
        name: str,
        op: str,
        ne: tuple[int, ...],
        esize: float = F32,
        srcs: list[Tensor] | None = None,
        view_src: Tensor | None = None,
        *,
        buffer: int | None = None,
        weight: bool = False,
        is_input: bool = False,
        backend: int = -1,
        quant_pad: int = 0,
        fixed_bytes: int | None = None,
    ) -> None:
        self.name, self.op, self.ne, self.esize = name, op, ne, esize
        self.srcs: list[Tensor] = [] if srcs is None else srcs
        self.view_src = view_src
        self.buffer, self.weight, self.is_input, self.is_output = buffer, weight, is_input, False
        self.backend, self.quant_pad, self.cuda_extra = backend, quant_pad, 0
        self.fixed_bytes = fixed_bytes
        self.port: tuple[str, int, int] | None = None
        self.head_view = False
        self.alloc = HashNode()

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.op!r}, {self.ne}, backend={self.backend})"

    @property
    def nbytes(self) -> int:
        if self.fixed_bytes is not None:
            return self.fixed_bytes
        return math.ceil(math.prod(self.ne) * self.esize)

    @property
    def layout(self) -> tuple[float, tuple[int, ...]]:
        return self.esize, self.ne


class Graph:
    """The reserve graph of one ubatch, built in ggml's node order."""

    def __init__(
        self,
        facts: ModelFacts,
        run: Run,
        place: LayerHomes,
        opts: Options,
        tensors: dict[str, TensorFacts] | None = None,
    ) -> None:
        self.d = facts.dims
        self.file = facts.paths[0] if facts.paths else "the model"
        self.hparams = facts.hparams
        self.run, self.place, self.opts = run, place, opts
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        # CUDA alloc deps: keep tensors until a node
        self.deps: list[tuple[Tensor, list[Tensor]]] = []
        self._tensors = {t.name: t for t in facts.tensors} if tensors is None else tensors
        self._weights: dict[str, Tensor] = {}
        # llama-context.cpp graph_get_cb: with every layer offloaded (or a batch under 32
        # tokens) a block's "norm" tensors are assigned to the block's device, so that the
        # scheduler does not run them on the previous block's device.
        full = (
            all(place.block(il) != CPU_BACKEND for il in self.d.layers)
            and place.output != CPU_BACKEND
        )
        self.pin_norms = full or run.n_tokens < 32
        # tensors a later block reuses (glm-dsa's shared indexer layers: the last top-k)
        self.carry: dict[str, Tensor] = {}
        # a block used a tensor an earlier block made (from ``carry``, or its stand-in when
        # the block is built alone): the segment replay cannot replay it on its own
        self.borrowed = False

    def has(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str, n_dims: int = 1) -> list[int]:
        """A weight's ggml shape. GGUFFormatError when the model lacks it or it has fewer
        than ``n_dims`` dimensions: llama.cpp refuses such a model as it loads the tensor."""
        found = self._tensors.get(name)
        if found is not None and len(found.shape) >= n_dims:
            return found.shape
        file = PurePath(self.file).name
        if found is None:
            raise GGUFFormatError(f"{file}: tensor {name} is missing ({self.d.arch} needs it)")
        if len(found.shape) < n_dims:
            raise GGUFFormatError(
                f"{file}: tensor {name} has shape {found.shape} "
                f"({self.d.arch} needs {n_dims} dimensions)"
            )
        return found.shape

    def w(self, name: str) -> Tensor | None:
        """A weight by full tensor name (None if the model has no such tensor)."""
        found = self._weights.get(name)
        if found is None and name in self._tensors:
            found = _weight_tensor(self._tensors[name], self.place.weight(self._tensors[name]))
            self._weights[name] = found
        return found

    def output_weight(self) -> Tensor | None:
        """output.weight, or for tied embeddings the copy of token_embd that llama.cpp loads
        into the output layer's buffer (TENSOR_DUPLICATED)."""
        found = self.w("output.weight")
        if found is None and "token_embd.weight" in self._tensors:
            found = _weight_tensor(self._tensors["token_embd.weight"], self.place.output)
        return found

    def leaf(self, name: str, ne: tuple[int, ...], esize: float) -> Tensor:
        """A tensor without an op that is not an input (ggml_new_tensor in a graph builder):
        a graph leaf, allocated with the inputs before any node, on its first user's backend."""
        leaf = Tensor(name, "none", ne, esize)
        self.leafs.append(leaf)
        return leaf

    def input(self, name: str, ne: tuple[int, ...], esize: float) -> Tensor:
        leaf = Tensor(name, "none", ne, esize, is_input=True)
        self.leafs.append(leaf)
        return leaf

    def cache(self, name: str, il: int, ne: tuple[int, ...], esize: float) -> Tensor:
        return Tensor(name, "none", ne, esize, buffer=self.place.block(il))

    def op(
        self, op: str, name: str, ne: tuple[int, ...], *srcs: Tensor | None, esize: float = F32
    ) -> Tensor:
        node = Tensor(name, op, ne, esize, srcs=[s for s in srcs if s is not None])
        self.nodes.append(node)
        return node

    def view(
        self,
        src: Tensor,
        ne: tuple[int, ...] | None = None,
        op: str = "view",
        span: int | None = None,
    ) -> Tensor:
        """A view (or reshape/permute/transpose) of ``src``: no memory of its own.  ``span``:
        ggml_nbytes of a strided view (what a copy of it to another backend takes)."""
        base = src.view_src if src.view_src is not None else src
        node = Tensor(
            f"{src.name} ({op})",
            op,
            src.ne if ne is None else ne,
            src.esize,
            [src],
            base,
            fixed_bytes=span,
        )
        self.nodes.append(node)
        return node

    def into(self, op: str, name: str, dst: Tensor, *srcs: Tensor | None) -> Tensor:
        """An op whose result is a view of ``dst`` (set_rows, cpy into a cache)."""
        node = self.op(op, name, dst.ne, *srcs, esize=dst.esize)
        node.view_src = dst.view_src if dst.view_src is not None else dst
        return node

    def mm(self, w: Tensor | None, x: Tensor, rows: int, name: str) -> Tensor:
        """mul_mat: [rows, x.ne[1:]] (F32)."""
        return self.op("mul_mat", name, (rows, *x.ne[1:]), w, x)

    def norm(self, x: Tensor, w: Tensor | None, name: str) -> Tensor:
        """build_norm (RMS): rms_norm, then mul by the weight; a block's norm is pinned to
        the block's device where llama.cpp pins it (``pin_norms``)."""
        cur = self.op("rms_norm", "norm", x.ne, x)
        if w is None:
            return cur
        if self.pin_norms and w.name.startswith("blk."):
            cur.backend = self.place.block(int(w.name.split(".", 2)[1]))
        return self.op("mul", name, x.ne, cur, w)


def _weight_tensor(tensor: TensorFacts, backend: int) -> Tensor:
    """A pre-allocated weight; ``quant_pad`` is the row padding a CUDA copy of it adds."""
    nbytes = tensor.nbytes or 0
    ne0 = tensor.shape[0] if tensor.shape else 0
    pad = 0
    if tensor.type.upper() not in _UNQUANTIZED and ne0 % CUDA_ROW_PADDING:
        elements = math.prod(tensor.shape) or 1
        pad = (CUDA_ROW_PADDING - ne0 % CUDA_ROW_PADDING) * nbytes // elements
    ne = tuple(tensor.shape) or (0,)
    return Tensor(
        tensor.name, "none", ne, 0, buffer=backend, weight=True, quant_pad=pad, fixed_bytes=nbytes
    )


def weight_rows(g: Graph, name: str, default: int) -> int:
    """Output width of a weight matrix (ggml ne[1]), or ``default`` if the model lacks it."""
    return g.shape(name)[1] if g.has(name) and len(g.shape(name)) > 1 else default
