"""The ggml-backend scheduler (ggml_backend_sched_split_graph, ggml-backend.cpp)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from moetune.core.compute.ir import Graph, Tensor
from moetune.core.compute.params import CPU, DEV, F32, OP_OFFLOAD_MIN_BATCH, Options

_VIEW_OPS = frozenset({"view", "reshape", "permute", "transpose"})  # ggml_is_view_op()


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
    """Pass 1: pre-allocated tensors, views of them, inputs, and ops with weights (which an
    op-offloading device takes over when the batch is large enough)."""
    if node.buffer is not None:
        return node.buffer
    if node.view_src is not None and node.view_src.buffer is not None:
        return node.view_src.buffer
    if node.is_input:
        return CPU
    if node.op in ("rope", "flash_attn"):
        return -1
    for src in node.srcs:
        if src.weight and src.buffer is not None:
            offload = opts.op_offload and src.buffer == CPU
            if offload and _batch_size(node) >= OP_OFFLOAD_MIN_BATCH:
                return DEV
            return src.buffer
    return -1


def _expand(nodes: Iterable[Tensor], skip_cpu: bool) -> None:
    """Pass 2: give unassigned nodes the backend of the previous assigned node."""
    cur = -1
    for node in nodes:
        if node.op in _VIEW_OPS:
            continue
        if node.backend != -1:
            cur = -1 if skip_cpu and node.backend == CPU else node.backend
        elif cur != -1:
            node.backend = cur


def assign_backends(g: Graph) -> None:
    """Passes 1-4 of ggml_backend_sched_split_graph (all ops are taken as supported)."""
    for leaf in g.leafs:
        leaf.backend = CPU
    for node in g.nodes:
        node.backend = _backend_from_cur(node, g.opts)
    for skip_cpu in (True, False):
        _expand(g.nodes, skip_cpu)
        _expand(reversed(g.nodes), skip_cpu)
    for node in g.nodes:  # pass 4
        if node.backend == -1 and node.view_src is not None:
            node.backend = _tensor_backend(node.view_src)
        for src in node.srcs:
            if src.backend == -1:
                src.backend = _tensor_backend(src.view_src) if src.view_src else node.backend
        if node.backend == -1:
            node.backend = DEV


def _tensor_backend(t: Tensor) -> int:
    return t.buffer if t.buffer is not None else t.backend


@dataclass
class _Split:
    backend: int
    inputs: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (source, its copy)
    nodes: list[Tensor] = field(default_factory=list)


def split_graph(g: Graph) -> list[Tensor]:
    """Pass 5 and the graph copy: consecutive nodes of one backend form a split; a source
    from another backend is copied (once per backend) at the start of the first split that
    needs it; a weight from another backend starts a new split so its copy can be reused."""
    first = next((n.backend for n in g.nodes if n.op not in _VIEW_OPS), DEV)
    splits = [_Split(first)]
    copies: dict[tuple[int, int], Tensor] = {}
    for node in g.nodes:
        split = splits[-1]
        if node.op in _VIEW_OPS:
            split.nodes.append(node)
            continue
        new_weight = split.inputs and any(
            s.weight and _tensor_backend(s) != split.backend for s in node.srcs
        )
        if node.backend != split.backend or new_weight:
            split = _Split(node.backend)
            splits.append(split)
        for i, src in enumerate(node.srcs):
            if _tensor_backend(src) != split.backend:
                node.srcs[i] = _copy_of(src, split, copies)
        split.nodes.append(node)
    return _graph_copy(g, splits)


def _copy_of(src: Tensor, split: _Split, copies: dict[tuple[int, int], Tensor]) -> Tensor:
    """The split's backend copy of ``src`` (ggml_dup_tensor_layout: a strided view's span)."""
    key = (id(src), split.backend)
    copy = copies.get(key)
    if copy is None:
        ne, esize = src.ne, src.esize
        copy = Tensor(
            f"copy of {src.name}",
            "none",
            ne,
            esize,
            backend=split.backend,
            quant_pad=src.quant_pad,
            fixed_bytes=src.fixed_bytes,
        )
        copies[key] = copy
        split.inputs.append((src, copy))
    return copy


def _graph_copy(g: Graph, splits: list[_Split]) -> list[Tensor]:
    """Each split's inputs first (a dependency on the source, then the copy), then its nodes;
    on CUDA, the alloc-dependency nodes that ggml-cuda's graph_optimize adds."""
    deps = {id(until): kept for until, kept in g.deps} if g.opts.cuda else {}
    order: list[Tensor] = []
    for split in splits:
        for src, copy in split.inputs:
            base = src.view_src if src.view_src is not None else src
            dep = Tensor(
                f"dep {src.name}", "none", src.ne, src.esize, [src], base, backend=src.backend
            )
            order += [dep, copy]
        for node in split.nodes:
            order.append(node)
            kept = deps.get(id(node))
            if kept is not None and node.backend == DEV:
                order.append(
                    Tensor("alloc dep", "none", (0,), F32, list(kept), kept[0], backend=DEV)
                )
    return order
