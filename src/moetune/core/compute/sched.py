"""The ggml-backend scheduler (ggml_backend_sched_split_graph, ggml-backend.cpp).

Written as primitives over a list of nodes, so that the whole graph (``assign_backends`` and
``split_graph``) and one segment of it (replay.py) run the same code: pass 1 pins nodes to a
backend, the four expansion passes carry one backend id from node to node (and so from one
segment to the next), pass 4 settles the rest, and the splitter carries the current split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence

from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import CPU_BACKEND, DEV, F32, Options

VIEW_OPS = frozenset({"view", "reshape", "permute", "transpose"})  # ggml_is_view_op()
PASSES = ((True, False), (True, True), (False, False), (False, True))  # (skip_cpu, backward)


def _batch_size(node: Tensor) -> int:
    """get_op_batch_size() in ggml-cuda.cu: the rows an op would process on the device."""
    if node.op == "get_rows":
        return 0
    if node.op == "mul_mat":
        return node.ne[1] if len(node.ne) > 1 else 1
    if node.op in ("mul_mat_id", "rope"):
        return node.ne[2] if len(node.ne) > 2 else 1
    return math.prod(node.ne[1:])


def _backend_from_cur(node: Tensor, opts: Options) -> int:
    """Pass 1: assigned by llama.cpp itself (``backend`` set at build), pre-allocated
    tensors, views of them, inputs, and ops with weights (which an op-offloading device takes
    over when the batch is large enough)."""
    if node.backend != -1:
        return node.backend
    if node.buffer is not None:
        return node.buffer
    if node.view_src is not None and node.view_src.buffer is not None:
        return node.view_src.buffer
    if node.is_input:
        return CPU_BACKEND
    if node.op in ("rope", "flash_attn"):
        return -1
    for src in node.srcs:
        if src.weight and src.buffer is not None:
            target = opts.offload_to if src.buffer == CPU_BACKEND else None
            if target is not None and _batch_size(node) >= opts.op_offload_min_batch:
                return target
            return src.buffer
    return -1


def pin(nodes: Sequence[Tensor], opts: Options) -> list[int]:
    """Pass 1: each node's backend from its own buffer, view source, or weights (-1: none)."""
    return [_backend_from_cur(node, opts) for node in nodes]


def expand(
    backends: list[int], views: Sequence[bool], cur: int, skip_cpu: bool, backward: bool
) -> int:
    """One of passes 2-3: unassigned nodes take the backend of the previous assigned node
    (views are skipped; with ``skip_cpu`` a CPU node breaks the chain). Returns the carry."""
    order: Iterable[int] = range(len(backends) - 1, -1, -1) if backward else range(len(backends))
    for i in order:
        if views[i]:
            continue
        if backends[i] != -1:
            cur = -1 if skip_cpu and backends[i] == CPU_BACKEND else backends[i]
        elif cur != -1:
            backends[i] = cur
    return cur


def _tensor_backend(t: Tensor) -> int:
    return t.buffer if t.buffer is not None else t.backend


def finish(nodes: Sequence[Tensor], backends: Sequence[int]) -> None:
    """Pass 4 (in node order): views take their source's backend, unassigned sources their
    consumer's, and whatever is left goes to the device."""
    for node, backend in zip(nodes, backends, strict=True):
        node.backend = backend
    for node in nodes:
        if node.backend == -1 and node.view_src is not None:
            node.backend = _tensor_backend(node.view_src)
        for src in node.srcs:
            if src.backend == -1:
                src.backend = _tensor_backend(src.view_src) if src.view_src else node.backend
        if node.backend == -1:
            node.backend = DEV


def is_view(nodes: Sequence[Tensor]) -> list[bool]:
    return [node.op in VIEW_OPS for node in nodes]


def assign_backends(g: Graph) -> None:
    """Passes 1-4 of ggml_backend_sched_split_graph over the whole graph."""
    for leaf in g.leafs:  # pass 1: inputs on the CPU; other leafs by pass 4, from a user
        leaf.backend = CPU_BACKEND if leaf.is_input else -1
    backends, views = pin(g.nodes, g.opts), is_view(g.nodes)
    for skip_cpu, backward in PASSES:
        expand(backends, views, -1, skip_cpu, backward)
    finish(g.nodes, backends)


class Split:
    """Consecutive nodes on one backend, with the copies of foreign sources they need
    (``inputs``: source and copy). A ``carried`` split began before these nodes: its inputs
    are emitted where it began, and ``had_inputs`` says whether it had some already."""

    __slots__ = ("backend", "carried", "had_inputs", "inputs", "nodes")

    def __init__(self, backend: int, *, carried: bool = False, had_inputs: bool = False) -> None:
        self.backend, self.carried, self.had_inputs = backend, carried, had_inputs
        self.inputs: list[tuple[Tensor, Tensor]] = []
        self.nodes: list[Tensor] = []


CopyKey = Callable[[Tensor], Hashable]
CopyMaker = Callable[[Tensor, int], Tensor]


def new_copy(src: Tensor, backend: int) -> Tensor:
    """A backend's copy of ``src`` (ggml_dup_tensor_layout: a strided view's span)."""
    return Tensor(
        f"copy of {src.name}",
        "none",
        src.ne,
        src.esize,
        backend=backend,
        quant_pad=src.quant_pad,
        fixed_bytes=src.fixed_bytes,
    )


class Splitter:
    """Pass 5: consecutive nodes of one backend form a split; a source from another backend is
    copied (once per backend) into the first split that needs it; a weight from another
    backend starts a new split when the current one already has inputs. ``key`` names a
    source in ``copies``; ``make`` makes its copy."""

    def __init__(
        self,
        first: Split,
        copies: dict[tuple[Hashable, int], Tensor],
        key: CopyKey = id,
        make: CopyMaker = new_copy,
    ) -> None:
        self.splits = [first]
        self.copies, self.key, self.make = copies, key, make

    def add(self, node: Tensor) -> None:
        split = self.splits[-1]
        if node.op in VIEW_OPS:
            split.nodes.append(node)
            return
        has_inputs = bool(split.inputs) or split.had_inputs
        new_weight = has_inputs and any(
            s.weight and _tensor_backend(s) != split.backend for s in node.srcs
        )
        if node.backend != split.backend or new_weight:
            split = Split(node.backend)
            self.splits.append(split)
        for i, src in enumerate(node.srcs):
            if _tensor_backend(src) != split.backend:
                node.srcs[i] = self._copy_of(src, split)
        split.nodes.append(node)

    def _copy_of(self, src: Tensor, split: Split) -> Tensor:
        key = (self.key(src), split.backend)
        copy = self.copies.get(key)
        if copy is None:
            copy = self.make(src, split.backend)
            self.copies[key] = copy
            split.inputs.append((src, copy))
        return copy


def first_backend(nodes: Iterable[Tensor]) -> int:
    """The first split's backend: the first non-view node's (the device when there is none)."""
    return next((n.backend for n in nodes if n.op not in VIEW_OPS), DEV)


def emit(splits: Sequence[Split], deps: dict[int, list[Tensor]], opts: Options) -> list[Tensor]:
    """The graph copy: each split's inputs first (a dependency on the source, then the copy),
    then its nodes; on CUDA devices, the alloc-dependency nodes that ggml-cuda's
    graph_optimize adds. A carried split's inputs are emitted where it began."""
    order: list[Tensor] = []
    for split in splits:
        if not split.carried:
            for src, copy in split.inputs:
                base = src.view_src if src.view_src is not None else src
                dep = Tensor(
                    f"dep {src.name}", "none", src.ne, src.esize, [src], base, backend=src.backend
                )
                order += [dep, copy]
        for node in split.nodes:
            order.append(node)
            kept = deps.get(id(node))
            if kept is not None and opts.is_cuda(node.backend):
                order.append(
                    Tensor(
                        "alloc dep", "none", (0,), F32, list(kept), kept[0], backend=node.backend
                    )
                )
    return order


def split_graph(g: Graph) -> tuple[list[Tensor], list[Split]]:
    """Pass 5 and the graph copy over the whole graph: the allocation order, and the splits
    (whose inputs pipeline parallelism copies ``n_copies`` times)."""
    splitter = Splitter(Split(first_backend(g.nodes)), {})
    for node in g.nodes:
        splitter.add(node)
    order = emit(splitter.splits, {id(until): kept for until, kept in g.deps}, g.opts)
    return order, splitter.splits
