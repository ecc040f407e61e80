"""ggml-alloc (ggml_gallocr_alloc_graph_impl and ggml_dyn_tallocr, ggml-alloc.c), and the
driver that builds, schedules and allocates the reserve graph."""

from __future__ import annotations

from collections.abc import Sequence

from moetune.core.compute.graph import build_graph
from moetune.core.compute.ir import Graph, HashNode, Tensor
from moetune.core.compute.params import LayerHomes, Options, Run
from moetune.core.compute.sched import Split, assign_backends, split_graph
from moetune.core.facts import ModelFacts

# ggml_op_can_inplace() in ggml-alloc.c, in the op names used below.
_INPLACE_OPS = frozenset(
    {"add", "add_id", "mul", "div", "scale", "unary", "rope", "rms_norm", "clamp", "soft_max"}
)


FreeBlocks = tuple[tuple[int, int], ...]
END = 1 << 62  # the end block: as large as any buffer can grow


class DynAlloc:
    """ggml_dyn_tallocr with one chunk: best fit among the free blocks, else the end block
    (which grows the buffer); freed blocks merge with their neighbours."""

    def __init__(self, alignment: int, free: FreeBlocks = ((0, END),)) -> None:
        self.alignment = alignment
        self.free: list[list[int]] = [list(block) for block in free]  # sorted by offset
        self.max_size = 0

    def blocks(self) -> FreeBlocks:
        """The free blocks, as (offset, size) pairs: the allocator's whole state."""
        return tuple((offset, size) for offset, size in self.free)

    def pad(self, size: int) -> int:
        return -(-size // self.alignment) * self.alignment

    def alloc(self, size: int) -> int:
        """Offset for ``size`` bytes (aligned)."""
        size = self.pad(size)
        best, best_size = len(self.free) - 1, -1
        for i, (_, block_size) in enumerate(self.free[:-1]):
            if block_size >= size and (best_size == -1 or block_size <= best_size):
                best, best_size = i, block_size
        block = self.free[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.free[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def release(self, offset: int, size: int) -> None:
        """Return a block, merging it with adjacent free blocks."""
        size = self.pad(size)
        for i, block in enumerate(self.free):
            if block[0] + block[1] == offset:
                block[1] += size
                if i + 1 < len(self.free) and block[0] + block[1] == self.free[i + 1][0]:
                    block[1] += self.free.pop(i + 1)[1]
                return
            if offset + size == block[0]:
                block[0], block[1] = offset, block[1] + size
                if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == offset:
                    self.free[i - 1][1] += self.free.pop(i)[1]
                return
        i = next((j for j, b in enumerate(self.free) if b[0] > offset), len(self.free))
        self.free.insert(i, [offset, size])


def alignment(backend: int, opts: Options) -> int:
    """Buffer alignment: the backend's (core/backends.py: 128 bytes on CUDA, 32 on the CPU
    and RPC)."""
    return opts.alignment(backend)


class GAlloc:
    """ggml_gallocr: allocate each node before its use, in place over a dying parent when
    the op allows it, and free every tensor (but outputs) after its last consumer."""

    def __init__(self, opts: Options, free: dict[int, FreeBlocks] | None = None) -> None:
        self.opts = opts
        self.allocs = {
            b: DynAlloc(alignment(b, opts), *((free[b],) if free else ())) for b in opts.backends
        }

    def size(self, t: Tensor, backend: int) -> int:
        """ggml_backend_buft_get_alloc_size: CUDA adds row padding and FA's F16 K/V."""
        size = t.nbytes
        if self.opts.is_cuda(backend):
            size += t.quant_pad + t.cuda_extra
        return size

    def allocate(self, t: Tensor, backend: int) -> None:
        """ggml_gallocr_allocate_node: once, not for views or pre-allocated tensors."""
        hn = t.alloc
        if t.buffer is not None or t.view_src is not None or hn.visited:
            return
        hn.visited = hn.allocated = True
        hn.backend = backend
        if t.op in _INPLACE_OPS and self._reuse_parent(t, hn):
            return
        hn.offset = self.allocs[backend].alloc(self.size(t, backend))

    def _reuse_parent(self, t: Tensor, hn: HashNode) -> bool:
        """In place: a parent of the same layout that this node is the last user of (or a
        head view of a tensor that nothing else uses, whose extra space is then freed)."""
        for parent in t.srcs:
            if parent.head_view and self._reuse_view_parent(t, hn, parent):
                return True
            ph = parent.alloc
            if not ph.allocated or parent.is_output or parent.layout != t.layout:
                continue
            if ph.children == 1 and ph.views == 0 and ph.backend == hn.backend:
                hn.offset, ph.allocated = ph.offset, False
                return True
        return False

    def _reuse_view_parent(self, t: Tensor, hn: HashNode, parent: Tensor) -> bool:
        """ggml_gallocr_allocate_node's view branch + ggml_gallocr_free_extra_space."""
        base = parent.view_src
        if base is None or base.is_output or parent.layout != t.layout:
            return False
        ph, bh = parent.alloc, base.alloc
        if not (ph.children == 1 and ph.views == 0 and bh.views == 1 and bh.children == 0):
            return False
        if not bh.allocated or bh.backend != hn.backend:
            return False
        hn.offset, bh.allocated = bh.offset, False
        dyn = self.allocs[hn.backend]
        used, total = dyn.pad(self.size(t, hn.backend)), dyn.pad(self.size(base, hn.backend))
        if total > used:
            dyn.release(bh.offset + used, total - used)
        return True

    def free(self, t: Tensor) -> None:
        """ggml_gallocr_free_node: outputs are never freed."""
        hn = t.alloc
        if t.is_output:
            return
        self.allocs[hn.backend].release(hn.offset, self.size(t, hn.backend))
        hn.allocated = False

    def run(self, leafs: Sequence[Tensor], order: Sequence[Tensor]) -> dict[int, int]:
        """ggml_gallocr_alloc_graph_impl; returns each backend's buffer size."""
        for leaf in leafs:
            self.allocate(leaf, leaf.backend)
        count_uses(order)
        self.walk(order)
        return self.peaks()

    def walk(self, order: Sequence[Tensor]) -> None:
        """Allocate each node (and its sources, if not yet) and free what it used last."""
        for node in order:
            for src in node.srcs:
                self.allocate(src, node.backend)
            self.allocate(node, node.backend)
            for src in node.srcs:
                self._release_parent(src)

    def peaks(self) -> dict[int, int]:
        return {b: a.max_size for b, a in self.allocs.items()}

    def blocks(self) -> dict[int, FreeBlocks]:
        return {b: a.blocks() for b, a in self.allocs.items()}

    def _release_parent(self, parent: Tensor) -> None:
        """One user of ``parent`` is done; free it (or its view source) after the last."""
        ph = parent.alloc
        ph.children -= 1
        if ph.children or ph.views:
            return
        base = parent.view_src
        if base is not None:
            bh = base.alloc
            bh.views -= 1
            if bh.views == 0 and bh.children == 0 and bh.allocated:
                self.free(base)
        elif ph.allocated:
            self.free(parent)


def count_uses(order: Sequence[Tensor]) -> None:
    """The users and views of every tensor, counted over the allocation order."""
    for node in order:
        if node.view_src is not None and node.op != "none":
            node.view_src.alloc.views += 1
        for src in node.srcs:
            src.alloc.children += 1


def simulate(facts: ModelFacts, run: Run, place: LayerHomes, opts: Options) -> dict[int, int]:
    """Build the whole reserve graph, schedule it, allocate it: the peak bytes per backend.

    The reference replay; ``estimate_compute`` gets the same figures from replay.py, which
    replays each block once per situation and reuses it."""
    graph = Graph(facts, run, place, opts)
    build_graph(graph)
    return schedule_and_allocate(graph, opts)


def schedule_and_allocate(graph: Graph, opts: Options) -> dict[int, int]:
    """Steps 2 and 3 for a built graph: split it over the backends, allocate it; the peak
    bytes per backend."""
    assign_backends(graph)
    order, splits = split_graph(graph)
    leafs = graph.leafs
    if opts.n_copies > 1:
        leafs = pipeline_copies(graph.leafs, splits, opts.n_copies) + leafs
    return GAlloc(opts).run(leafs, order)


def pipeline_copies(
    inputs: Sequence[Tensor], splits: Sequence[Split], n_copies: int
) -> list[Tensor]:
    """Pipeline parallelism (ggml_backend_sched with n_copies > 1): every graph input and
    every split input has ``n_copies`` copies, allocated first, as leafs, and never freed
    (they are marked input and output). The current copy is the tensor itself."""
    leafs: list[Tensor] = []
    for leaf in inputs:
        leaf.is_output = True
        leafs += [leaf] + [copy_of(leaf, leaf.backend) for _ in range(n_copies - 1)]
    for split in splits:
        for _, copy in split.inputs:
            copy.is_output = True
            leafs += [copy] + [copy_of(copy, split.backend) for _ in range(n_copies - 1)]
    return leafs


def copy_of(t: Tensor, backend: int) -> Tensor:
    """One more pipeline copy of ``t`` on ``backend`` (marked output: never freed)."""
    clone = Tensor(
        f"{t.name}#copy",
        "none",
        t.ne,
        t.esize,
        backend=backend,
        quant_pad=t.quant_pad,
        fixed_bytes=t.fixed_bytes,
    )
    clone.is_output = True
    return clone
