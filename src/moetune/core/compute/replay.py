"""The reserve-graph replay, one segment at a time, each segment replayed once per situation.

``alloc.simulate`` builds, schedules and allocates the whole graph for every placement a
planner tries, so a plan's cost grows with blocks x candidates.  But the graph is a sequence
of segments (the inputs and embeddings, one per block, the output head), most blocks look
alike, and each stage of the replay passes only a little state from one segment to the next:

- the scheduler's four expansion passes carry one backend id (two of them backwards);
- the splitter carries the current split (its backend, whether it has inputs) and the copies
  of graph inputs made so far; a segment may add copies to a split that began in an earlier
  segment, and those are emitted where that split began;
- the allocator carries its free blocks and the places of the tensors that cross segments:
  the graph inputs, their copies, the residual stream and its copies, and the leafs a block
  makes of its own (DeepSeek sparse attention's zero-filled top-k rows): ggml-alloc
  allocates every leaf before the first node, so the head allocates them, each on the
  backend its block gives it, and each block frees its own.

So each stage of each segment is a function of (what the segment is, the state it gets), and
is memoised on exactly that: a block with its experts on the CPU is replayed once for a given
allocator state and reused by every later block, candidate placement and plan that reaches
the same state.  The figures are identical to ``simulate``'s (tests/unit/test_compute.py compares
them over many placements); a situation this module does not cover falls back to it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from moetune.core.compute.alloc import FreeBlocks, GAlloc, copy_of, count_uses, simulate
from moetune.core.compute.graph import embeddings, layer, output
from moetune.core.compute.inputs import Inputs, build_inputs
from moetune.core.compute.ir import Graph, HashNode, Tensor
from moetune.core.compute.params import CPU_BACKEND, DEV, LayerHomes, Options, Run
from moetune.core.compute.sched import (
    PASSES,
    VIEW_OPS,
    Split,
    Splitter,
    emit,
    expand,
    finish,
    is_view,
    new_copy,
    pin,
)
from moetune.core.facts import ModelFacts, TensorFacts

UNUSED = 1 << 40  # users of a tensor that remain after this segment (never reached)
# A tensor that crosses segments: ("res", 0, 0) the residual coming in, ("leaf", i, 0) graph
# input i, ("copy", i, backend) its copy, ("rescopy", 0, backend) a copy of the residual,
# ("bleaf", il, j) leaf j of block il (allocated by the head); inside a block's own replay,
# which blocks of the same kind share, its leafs are ("bleaf", -1, j).
Slot = tuple[str, int, int]
RES: Slot = ("res", 0, 0)
PortState = tuple[bool, int, int]  # allocated, offset, backend
SlotState = tuple[bool, int, int, bool, bool]  # + no later user, no later view
ResShape = tuple[tuple[int, ...], float] | None  # the residual's ne and element size
BlockLeaf = tuple[Slot, tuple[int, ...], float, int]  # a block's own leaf: ne, esize, backend
# a split input's copy as pipeline parallelism allocates it first: its slot (None: a copy
# that does not cross segments, a weight's), ne, esize, row padding, fixed bytes, backend
PipelineCopy = tuple[Slot | None, tuple[int, ...], float, int, int | None, int]
Carries = tuple[int, ...]
SplitEntry = tuple[int, bool]  # the current split: backend, has inputs
# The allocator's whole state between two segments: free blocks, crossing tensors.
Snapshot = tuple[tuple[tuple[int, FreeBlocks], ...], tuple[tuple[Slot, PortState], ...]]


class NotSegmentable(Exception):
    """A situation the segment replay does not cover (the whole graph is replayed instead)."""


class Kind(NamedTuple):
    """What a segment is, wherever it sits: the head, a block (its tensors, dimensions and
    placement), or the output head (where the output layer is)."""

    what: str
    sig: Hashable = None


class Segment(NamedTuple):
    kind: Kind
    il: int = -1  # the block a block segment is built for
    src: int = 0  # the model (of those sharing the replay) whose tensors it is built with
    sizes: int = 0  # the interned sizes of its weights that can be copied (``_Source``)


class Situation(NamedTuple):
    """A segment's assignment: its kind, the residual's shape and final backend, the carries
    of the expansion passes; the segment's final backends are a function of it."""

    kind: Kind
    res: ResShape
    carries: Carries
    res_backend: int


class EmissionKey(NamedTuple):
    """What a segment's allocation order depends on."""

    situation: Situation
    entry: SplitEntry
    existing: frozenset[Slot]  # copies of graph inputs made by earlier segments
    carried: bool  # the segment begins inside a split (every segment but the head)
    insertions: tuple[Slot, ...]  # copies later segments added to its last split


class _Built(NamedTuple):
    """One segment's nodes, built for a situation, and the leafs a block makes of its own
    (by ``id``: their slots)."""

    nodes: list[Tensor]
    deps: dict[int, list[Tensor]]
    res_in: Tensor | None
    res_out: Tensor | None
    leafs: tuple[Tensor, ...] = ()
    leaf_slots: Mapping[int, Slot] = MappingProxyType({})


WeightSize = tuple[int, str]  # a weight's bytes and ggml type (its row padding on CUDA)


class _Source:
    """One of the models that share a replay (the quants of one model: the same tensors
    and dimensions, other types): its tensors, its segments, and the sizes of the weights a
    segment can copy. Only a weight in host memory (op offload copies it to the GPU) or one
    moved off its block's device is ever copied into a compute buffer; every other weight
    sits in its own buffer, so its bytes do not reach the allocator."""

    def __init__(self, index: int, facts: ModelFacts) -> None:
        self.index, self.facts = index, facts
        self.tensors = {t.name: t for t in facts.tensors}
        self.own: dict[int, list[TensorFacts]] = {}
        for t in facts.tensors:
            if t.layer is not None:
                self.own.setdefault(t.layer, []).append(t)
        self.global_sizes = tuple(_size(t) for t in facts.tensors if t.layer is None)
        self.segs: dict[tuple[str, Hashable, int], Segment] = {}

    def block_sizes(
        self, il: int, on_host: bool, moves: Sequence[tuple[str, int]]
    ) -> tuple[WeightSize, ...]:
        """The sizes that matter in block ``il``: every weight's on the host, else those of
        its moved tensors (``moves``: names without ``blk.N.``)."""
        own = self.own.get(il, ())
        if on_host:
            return tuple(_size(t) for t in own)
        found = (self.tensors.get(f"blk.{il}.{name}") for name, _ in moves)
        return tuple((0, "") if t is None else _size(t) for t in found)


def _size(t: TensorFacts) -> WeightSize:
    return (t.nbytes or 0, t.type)


class _Profile:
    """Pass 1 of one segment (its pinned backends), the carries it passes on, and the shape of
    the residual it hands to the next segment."""

    __slots__ = ("carries", "pinned", "res_out", "views")

    def __init__(self, pinned: tuple[int, ...], views: tuple[bool, ...], res_out: ResShape) -> None:
        self.pinned, self.views, self.res_out = pinned, views, res_out
        self.carries: dict[tuple[int, Carries, int], int] = {}

    def carry(self, index: int, prior: Carries, cur: int) -> int:
        """The carry out of pass ``index``, given the carries into the earlier passes."""
        key = (index, prior, cur)
        found = self.carries.get(key)
        if found is None:
            found = expand(self.after(prior), self.views, cur, *PASSES[index])
            self.carries[key] = found
        return found

    def after(self, carries: Carries) -> list[int]:
        """The backends after the first ``len(carries)`` expansion passes."""
        backends = list(self.pinned)
        for (skip_cpu, backward), cur in zip(PASSES, carries, strict=False):
            expand(backends, self.views, cur, skip_cpu, backward)
        return backends


class _SplitOut(NamedTuple):
    """What the splitter did in one segment (its nodes replayed with a given entry state)."""

    exit: SplitEntry
    started: bool  # a split began in this segment
    additions: tuple[Slot, ...]  # copies added to the split the segment began in
    new_copies: frozenset[Slot]  # copies of graph inputs made here
    uses: tuple[tuple[Slot, int, int], ...]  # (slot, users, views), insertions aside


class _Plan:
    """One segment in the split sweep, and the copies later segments attribute to it."""

    __slots__ = ("carried", "entry", "existing", "insertions", "out", "situation")

    def __init__(
        self,
        situation: Situation,
        entry: SplitEntry,
        existing: frozenset[Slot],
        carried: bool,
        out: _SplitOut,
    ) -> None:
        self.situation, self.entry, self.existing = situation, entry, existing
        self.carried, self.out = carried, out
        self.insertions: tuple[Slot, ...] = ()

    def key(self) -> EmissionKey:
        return EmissionKey(self.situation, self.entry, self.existing, self.carried, self.insertions)


class _Emission(NamedTuple):
    slots: tuple[Slot, ...]  # crossing tensors, in the order the emission touches them
    created: frozenset[Slot]  # those allocated here (copies emitted by this segment)


class _Emitted(NamedTuple):
    """A segment's fresh nodes in allocation order, and the copies its splits take in."""

    built: _Built
    order: list[Tensor]
    emission: _Emission
    copies: list[Tensor]  # each split input's copy, in the order ggml lists them


class _AllocOut(NamedTuple):
    blocks: dict[int, FreeBlocks]
    peaks: dict[int, int]
    slots: tuple[PortState, ...]  # after the segment, per slot of the emission
    res_out: PortState | None
    block_leafs: tuple[tuple[Slot, PortState], ...] = ()  # the head: every block's own leafs


class Replay:
    """The memoised replay for one model, run and options (see the module's docstring)."""

    def __init__(self, facts: ModelFacts, run: Run, opts: Options) -> None:
        self.facts, self.run, self.opts = facts, run, opts
        self.n_blocks = facts.n_layers
        self._sources: list[_Source] = []
        self._source_ids: dict[int, int] = {}
        self._size_ids: dict[tuple[WeightSize, ...], int] = {}
        first = self.source(facts)
        base = self._graph(self._uniform(DEV), first)
        self.inp: Inputs = build_inputs(base)
        self.leafs = base.leafs
        # pipeline parallelism: every graph input and split input has n_copies copies,
        # allocated by the head before any node and never freed (alloc.pipeline_copies)
        self.pipeline = opts.n_copies > 1
        for leaf in self.leafs:
            leaf.backend = CPU_BACKEND
            leaf.is_output = self.pipeline
        self.leaf_slot: dict[int, Slot] = {id(t): ("leaf", i, 0) for i, t in enumerate(self.leafs)}
        self.ports: dict[Slot, Tensor] = {}  # the one copy tensor of each copy slot
        interned: dict[Hashable, int] = {}
        self.block_sigs = {
            il: interned.setdefault(self._block_sig(il, first.own.get(il, ())), len(interned))
            for il in facts.dims.layers
        }
        self._profiles: dict[tuple[Kind, ResShape], _Profile] = {}
        self._finals: dict[Situation, tuple[int, int | None]] = {}
        self._leaf_homes: dict[Situation, tuple[BlockLeaf, ...]] = {}
        self._splits: dict[tuple[Situation, SplitEntry, frozenset[Slot], bool], _SplitOut] = {}
        self._emissions: dict[EmissionKey, _Emission] = {}
        self._allocs: dict[Hashable, _AllocOut] = {}
        self._results: dict[tuple[tuple[Kind, ...], tuple[int, ...]], dict[int, int]] = {}
        self._sweeps: dict[tuple[Kind, ...], tuple[list[_Plan], dict[Slot, tuple[int, int]]]] = {}
        self._simulated: OrderedDict[tuple[int, LayerHomes], dict[int, int]] = OrderedDict()
        self._snapshots: list[Snapshot] = []
        self._state_ids: dict[Snapshot, int] = {}
        self._steps: dict[Hashable, tuple[int, tuple[tuple[int, int], ...]]] = {}
        self._copies: dict[tuple[EmissionKey, int, int], tuple[PipelineCopy, ...]] = {}

    # --- building segments ----------------------------------------------------------------

    def source(self, facts: ModelFacts) -> _Source:
        """``facts``' place among the models that share this replay (registered the first
        time: they differ only in what their weights weigh)."""
        index = self._source_ids.get(id(facts))
        if index is not None and self._sources[index].facts is facts:
            return self._sources[index]
        found = _Source(len(self._sources), facts)
        self._sources.append(found)
        self._source_ids[id(facts)] = found.index
        return found

    @property
    def n_sources(self) -> int:
        return len(self._sources)

    def _graph(self, place: LayerHomes, src: _Source) -> Graph:
        return Graph(src.facts, self.run, place, self.opts, tensors=src.tensors)

    def _uniform(
        self, backend: int, moves: frozenset[tuple[str, int]] = frozenset(), output: int = DEV
    ) -> LayerHomes:
        """Every block on ``backend`` (a segment only reads its own block's homes)."""
        return LayerHomes((*(backend,) * self.n_blocks, output), moves)

    def _block_sig(self, il: int, own: Sequence[TensorFacts]) -> Hashable:
        """What block ``il`` is (``own``: its tensors, in the file's order), whatever its
        weights weigh (the segments' ``sizes`` hold what matters of that)."""
        d = self.facts.dims
        tensors = tuple((t.name.split(".", 2)[-1], tuple(t.shape)) for t in own)
        return (tensors, d.swa[il], d.recurrent[il], d.n_head[il], d.n_head_kv[il])

    def segments(self, place: LayerHomes, src: _Source | None = None) -> tuple[Segment, ...]:
        """The graph's segments for ``place``, built with ``src``'s tensors (default: the
        first model's); the same objects for the same situations."""
        src = src or self._sources[0]
        last = self.facts.dims.layers[-1]
        grouped = place.grouped_moves()
        outside = grouped.get(-1, ())
        found = [self._segment(src, "head", outside or None, -1)]
        segment, homes = self._segment, place.homes
        for il in self.facts.dims.layers:
            home = homes[il]
            how = (home if home >= 0 else CPU_BACKEND, grouped.get(il, ()), il == last)
            found.append(segment(src, "block", how, il))
        found.append(segment(src, "tail", (place.output, outside), -1))
        return tuple(found)

    def _segment(self, src: _Source, what: str, how: Hashable, il: int) -> Segment:
        key = (what, how, il)
        seg = src.segs.get(key)
        if seg is None:
            if what == "block" and isinstance(how, tuple):
                sig: Hashable = (self.block_sigs[il], *how)
                home, moves, _ = how
                sizes = src.block_sizes(il, home == CPU_BACKEND, moves)
            else:
                sig, sizes = how, src.global_sizes
            size_id = self._size_ids.setdefault(sizes, len(self._size_ids))
            seg = Segment(Kind(what, sig), il, src.index, size_id)
            src.segs[key] = seg
        return seg

    def _build(self, seg: Segment, res: ResShape, res_backend: int) -> _Built:
        """Fresh nodes for ``seg``, the residual coming in as a stand-in tensor."""
        res_in = None if res is None else Tensor("res", "add", res[0], res[1], backend=res_backend)
        kind, src = seg.kind, self._sources[seg.src]
        res_out: Tensor | None = None
        if kind.what == "head":
            outside = kind.sig if isinstance(kind.sig, tuple) else ()
            g = self._graph(self._uniform(DEV, frozenset(outside)), src)
            res_out = embeddings(g, self.inp)
        elif kind.what == "block" and res_in is not None and isinstance(kind.sig, tuple):
            _, home, moves, last = kind.sig
            il = seg.il
            moved = frozenset((f"blk.{il}.{name}", backend) for name, backend in moves)
            g = self._graph(self._uniform(home, moved), src)
            res_out = layer(g, self.inp, il, res_in, last)
            if any(leaf.is_input for leaf in g.leafs):
                raise NotSegmentable("a block with graph inputs of its own")
            if g.borrowed:
                raise NotSegmentable("a block that uses a tensor of an earlier block")
        elif kind.what == "tail" and res_in is not None and isinstance(kind.sig, tuple):
            out_home, outside = kind.sig
            g = self._graph(self._uniform(CPU_BACKEND, frozenset(outside), output=out_home), src)
            output(g, self.inp, res_in)
        else:
            raise NotSegmentable(f"cannot build a {kind.what} segment here")
        deps = {id(until): kept for until, kept in g.deps}
        if not g.leafs:
            return _Built(g.nodes, deps, res_in, res_out)
        slots = {id(leaf): ("bleaf", -1, j) for j, leaf in enumerate(g.leafs)}
        return _Built(g.nodes, deps, res_in, res_out, tuple(g.leafs), slots)

    def _profile(self, seg: Segment, res: ResShape) -> _Profile:
        key = (seg.kind, res)
        found = self._profiles.get(key)
        if found is None:
            built = self._build(seg, res, DEV)
            out = built.res_out
            found = _Profile(
                pinned=tuple(pin(built.nodes, self.opts)),
                views=tuple(is_view(built.nodes)),
                res_out=None if out is None else (out.ne, out.esize),
            )
            self._profiles[key] = found
        return found

    def _assigned(self, seg: Segment, situation: Situation) -> _Built:
        """The segment's nodes with their final backends (passes 2-4)."""
        built = self._build(seg, situation.res, situation.res_backend)
        finish(built.nodes, self._profile(seg, situation.res).after(situation.carries))
        return built

    # --- one estimate ---------------------------------------------------------------------

    def peaks(self, place: LayerHomes, facts: ModelFacts | None = None) -> dict[int, int]:
        """The compute buffer of each backend for ``place`` (as ``simulate`` gives it), for
        ``facts`` (default: the model the replay was made for; another must share its
        structure, ``structure_of``)."""
        src = self.source(facts or self.facts)
        try:
            return self.segmented_peaks(place, src.facts)
        except NotSegmentable:
            key = (src.index, place)
            found = self._simulated.get(key)
            if found is None:  # the whole graph (pipeline copies, glm-dsa shared layers)
                found = simulate(src.facts, self.run, place, self.opts)
                self._simulated[key] = found
                while len(self._simulated) > 64:
                    self._simulated.popitem(last=False)
            return dict(found)

    def segmented_peaks(self, place: LayerHomes, facts: ModelFacts | None = None) -> dict[int, int]:
        """``peaks`` by the segment replay alone (NotSegmentable where it does not apply)."""
        segments = self.segments(place, self.source(facts or self.facts))
        kinds = tuple(seg.kind for seg in segments)
        sized = (kinds, tuple(seg.sizes for seg in segments))
        found = self._results.get(sized)
        if found is None:
            sweep = self._sweeps.get(kinds)  # the splits do not depend on what weights weigh
            if sweep is None:
                plans = self._split_sweep(segments, self._situations(segments))
                sweep = self._sweeps[kinds] = (plans, self._last_uses(segments, plans))
            found = self._alloc_sweep(segments, *sweep)
            self._results[sized] = found
        return dict(found)

    def _situations(self, segments: Sequence[Segment]) -> list[Situation]:
        """Each segment's residual, carries and residual backend: passes 1-4 at segment level."""
        shapes: list[ResShape] = []
        profiles: list[_Profile] = []
        res: ResShape = None
        for seg in segments:
            shapes.append(res)
            profiles.append(self._profile(seg, res))
            res = profiles[-1].res_out
        carries = _carries(profiles)
        situations: list[Situation] = []
        res_backend = -1
        for seg, shape, into in zip(segments, shapes, carries, strict=True):
            situation = Situation(seg.kind, shape, into, res_backend)
            situations.append(situation)
            res_backend = self._final(seg, situation)[0]
        if self._final(segments[0], situations[0])[1] is None:
            raise NotSegmentable("the head has no node to begin the first split")
        return situations

    def _final(self, seg: Segment, situation: Situation) -> tuple[int, int | None]:
        """(the residual's backend out, the first non-view node's backend)."""
        found = self._finals.get(situation)
        if found is None:
            built = self._assigned(seg, situation)
            out = built.res_out
            first = next((n.backend for n in built.nodes if n.op not in VIEW_OPS), None)
            found = (out.backend if out is not None else -1, first)
            self._finals[situation] = found
            self._leaf_homes[situation] = tuple(
                (built.leaf_slots[id(leaf)], leaf.ne, leaf.esize, leaf.backend)
                for leaf in built.leafs
            )
        return found

    # --- splits ---------------------------------------------------------------------------

    def _slot_of(self, t: Tensor, built: _Built) -> Slot | None:
        if t is built.res_in:
            return RES
        if (slot := self.leaf_slot.get(id(t))) is not None:
            return slot
        if (slot := built.leaf_slots.get(id(t))) is not None:
            return slot
        return t.port

    def _port(self, slot: Slot, src: Tensor) -> Tensor:
        """The one tensor of a copy slot (made from ``src`` the first time)."""
        found = self.ports.get(slot)
        if found is None:
            found = new_copy(src, slot[2])
            found.port = slot
            found.is_output = self.pipeline
            self.ports[slot] = found
        return found

    def _splitter(
        self, built: _Built, entry: SplitEntry, existing: frozenset[Slot], carried: bool
    ) -> Splitter:
        """Run pass 5 over the segment's nodes, from the given current split."""
        copies: dict[tuple[Hashable, int], Tensor] = {}
        for slot in existing:
            copies[(("leaf", slot[1], 0), slot[2])] = self.ports[slot]

        def key_of(t: Tensor) -> Hashable:
            return self.leaf_slot.get(id(t), id(t))

        def make(t: Tensor, backend: int) -> Tensor:
            if t is built.res_in:
                return self._port(("rescopy", 0, backend), t)
            if (slot := self.leaf_slot.get(id(t))) is not None:
                return self._port(("copy", slot[1], backend), t)
            return new_copy(t, backend)

        first = Split(entry[0], carried=carried, had_inputs=entry[1])
        splitter = Splitter(first, copies, key_of, make)
        for node in built.nodes:
            splitter.add(node)
        return splitter

    def _split_sweep(
        self, segments: Sequence[Segment], situations: Sequence[Situation]
    ) -> list[_Plan]:
        """Pass 5 segment by segment; copies added to a split that began in an earlier
        segment are attributed to that segment (they are emitted at the split's start)."""
        first = self._final(segments[0], situations[0])[1]
        entry: SplitEntry = (DEV if first is None else first, False)
        existing: frozenset[Slot] = frozenset()
        plans: list[_Plan] = []
        origin = 0
        for i, (seg, situation) in enumerate(zip(segments, situations, strict=True)):
            out = self._split(seg, situation, entry, existing, carried=i > 0)
            plans.append(_Plan(situation, entry, existing, i > 0, out))
            if out.additions:
                if any(s[0] == "rescopy" for s in out.additions) and origin != i - 1:
                    raise NotSegmentable("a copy of the residual joins a split of two blocks ago")
                plans[origin].insertions += out.additions
            if out.started:
                origin = i
            existing |= out.new_copies
            entry = out.exit
        return plans

    def _split(
        self,
        seg: Segment,
        situation: Situation,
        entry: SplitEntry,
        existing: frozenset[Slot],
        carried: bool,
    ) -> _SplitOut:
        key = (situation, entry, existing, carried)
        found = self._splits.get(key)
        if found is not None:
            return found
        built = self._assigned(seg, situation)
        splits = self._splitter(built, entry, existing, carried).splits
        additions: list[Slot] = []
        if carried:
            for src, copy in splits[0].inputs:
                if copy.port is None:
                    raise NotSegmentable(f"a copy of {src.name} joins an earlier segment's split")
                additions.append(copy.port)
        new = frozenset(
            copy.port
            for split in splits
            for _, copy in split.inputs
            if copy.port is not None and copy.port[0] == "copy"
        )
        last = splits[-1]
        found = _SplitOut(
            exit=(last.backend, bool(last.inputs) or last.had_inputs),
            started=len(splits) > 1 or not carried,
            additions=tuple(additions),
            new_copies=new,
            uses=self._uses(emit(splits, built.deps, self.opts), built),
        )
        self._splits[key] = found
        return found

    def _uses(self, order: Sequence[Tensor], built: _Built) -> tuple[tuple[Slot, int, int], ...]:
        """Users and views of each crossing tensor in an emission."""
        users: dict[Slot, list[int]] = {}
        for node in order:
            if node.view_src is not None and node.op != "none":
                slot = self._slot_of(node.view_src, built)
                if slot is not None:
                    users.setdefault(slot, [0, 0])[1] += 1
            for src in node.srcs:
                slot = self._slot_of(src, built)
                if slot is not None:
                    users.setdefault(slot, [0, 0])[0] += 1
        return tuple((slot, c, v) for slot, (c, v) in users.items())

    @staticmethod
    def _last_uses(
        segments: Sequence[Segment], plans: Sequence[_Plan]
    ) -> dict[Slot, tuple[int, int]]:
        """The last segment that uses each graph input, copy and block leaf (as a source, as
        a view)."""
        last: dict[Slot, list[int]] = {}
        for i, (seg, plan) in enumerate(zip(segments, plans, strict=True)):
            uses = list(plan.out.uses)
            # an input copied by a later segment: the copy's dependency node uses it here
            uses += [(("leaf", s[1], 0), 1, 0) for s in plan.insertions if s[0] == "copy"]
            for slot, children, views in uses:
                if slot[0] in ("leaf", "copy", "bleaf"):
                    entry = last.setdefault(_absolute(slot, seg.il), [-1, -1])
                    entry[0] = i if children else entry[0]
                    entry[1] = i if views else entry[1]
        return {slot: (c, v) for slot, (c, v) in last.items()}

    # --- allocation -----------------------------------------------------------------------

    def _alloc_sweep(
        self, segments: Sequence[Segment], plans: Sequence[_Plan], last: dict[Slot, tuple[int, int]]
    ) -> dict[int, int]:
        """The allocator, segment by segment: each step memoised on (the segment's allocation
        order, the whole allocator state before it, which crossing tensors are done)."""
        state = self._state_id(GAlloc(self.opts).blocks(), {})
        peaks = dict.fromkeys(self.opts.backends, 0)
        breaks = {i for pair in last.values() for i in pair}
        done: frozenset[tuple[Slot, bool, bool]] = frozenset()
        # every block's own leafs, where the blocks put them: the head allocates them
        leafs = tuple(
            (_absolute(slot, seg.il), ne, esize, backend)
            for seg, plan in zip(segments, plans, strict=True)
            for slot, ne, esize, backend in self._leaf_homes[plan.situation]
        )
        copies: tuple[PipelineCopy, ...] = ()
        if self.pipeline:
            if leafs:
                raise NotSegmentable("pipeline copies of blocks' own leafs")
            copies = tuple(
                c
                for seg, plan in zip(segments, plans, strict=True)
                for c in self._copies_of(seg, plan)
            )
        for i, (seg, plan) in enumerate(zip(segments, plans, strict=True)):
            if i in breaks or i == 0:
                done = frozenset((slot, c <= i, v <= i) for slot, (c, v) in last.items())
            head_leafs, head_copies = (leafs, copies) if i == 0 else ((), ())
            key = (id(plan.out), plan.insertions, seg.sizes, state, done, head_leafs, head_copies)
            step = self._steps.get(key)
            if step is None:
                step = self._step(
                    seg, plan, state, last, i, head_leafs=head_leafs, head_copies=head_copies
                )
                self._steps[key] = step
            state = step[0]
            for backend, peak in step[1]:
                peaks[backend] = max(peaks[backend], peak)
        return peaks

    def _state_id(self, blocks: dict[int, FreeBlocks], ports: dict[Slot, PortState]) -> int:
        """The interned id of a whole allocator state: free blocks and crossing tensors."""
        snapshot = (tuple(sorted(blocks.items())), tuple(sorted(ports.items())))
        found = self._state_ids.get(snapshot)
        if found is None:
            found = len(self._snapshots)
            self._state_ids[snapshot] = found
            self._snapshots.append(snapshot)
        return found

    def _step(
        self,
        seg: Segment,
        plan: _Plan,
        state: int,
        last: dict[Slot, tuple[int, int]],
        i: int,
        *,
        head_leafs: tuple[BlockLeaf, ...] = (),
        head_copies: tuple[PipelineCopy, ...] = (),
    ) -> tuple[int, tuple[tuple[int, int], ...]]:
        """One segment's allocation from an interned state: (the next state, its peaks);
        the head also allocates ``head_leafs``, the blocks' own leafs, and ``head_copies``,
        every split input's pipeline copies."""
        blocks_items, port_items = self._snapshots[state]
        blocks, ports = dict(blocks_items), dict(port_items)
        ekey = plan.key()
        emission = self._emission_of(seg, ekey)
        states = tuple(
            _slot_state(slot, emission, ports, last, i, il=seg.il, pipeline=self.pipeline)
            for slot in emission.slots
        )
        key = (ekey, seg.sizes, blocks_items, states, head_leafs, head_copies)
        found = self._allocs.get(key)
        if found is None:
            found = self._allocate(
                seg, ekey, blocks, states, head_leafs=head_leafs, head_copies=head_copies
            )
            self._allocs[key] = found
        ports.update(found.block_leafs)
        ports.update(
            zip((_absolute(slot, seg.il) for slot in emission.slots), found.slots, strict=True)
        )
        if found.res_out is not None:
            ports[RES] = found.res_out
        return self._state_id(found.blocks, ports), tuple(found.peaks.items())

    def _emission_of(self, seg: Segment, ekey: EmissionKey) -> _Emission:
        found = self._emissions.get(ekey)
        if found is None:
            found = self._remember(seg, ekey).emission
        return found

    def _copies_of(self, seg: Segment, plan: _Plan) -> tuple[PipelineCopy, ...]:
        """The copies the segment's splits take in, as the head allocates them first."""
        ekey = plan.key()
        found = self._copies.get((ekey, seg.src, seg.sizes))
        if found is None:
            self._remember(seg, ekey)
            found = self._copies[(ekey, seg.src, seg.sizes)]
        return found

    def _remember(self, seg: Segment, ekey: EmissionKey) -> _Emitted:
        """One emission of the segment, kept: its crossing tensors, and its copies (with
        pipeline parallelism: their sizes depend on the weights, ``seg.sizes``)."""
        emitted = self._emit(seg, ekey)
        self._emissions[ekey] = emitted.emission
        if self.pipeline:
            self._copies[(ekey, seg.src, seg.sizes)] = tuple(
                (t.port, t.ne, t.esize, t.quant_pad, t.fixed_bytes, t.backend)
                for t in emitted.copies
            )
        return emitted

    def _emit(self, seg: Segment, ekey: EmissionKey) -> _Emitted:
        """The segment's allocation order (its own splits' inputs, copies attributed to it by
        later segments, its nodes), and the crossing tensors it touches, in order."""
        built = self._assigned(seg, ekey.situation)
        splitter = self._splitter(built, ekey.entry, ekey.existing, ekey.carried)
        target = splitter.splits[-1]
        for slot in ekey.insertions:
            src = built.res_out if slot[0] == "rescopy" else self.leafs[slot[1]]
            assert src is not None
            target.inputs.append((src, self.ports[slot]))
        order = emit(splitter.splits, built.deps, self.opts)
        copies = [c for split in splitter.splits if not split.carried for _, c in split.inputs]
        seen: dict[Slot, None] = {}
        if seg.kind.what == "head":
            seen.update({self.leaf_slot[id(t)]: None for t in self.leafs})
        created: set[Slot] = set()
        for node in order:
            for t in (node, node.view_src, *node.srcs):
                found = None if t is None else self._slot_of(t, built)
                if found is not None:
                    seen.setdefault(found, None)
                    if t is node:
                        created.add(found)
        return _Emitted(built, order, _Emission(tuple(seen), frozenset(created)), copies)

    def _allocate(
        self,
        seg: Segment,
        ekey: EmissionKey,
        blocks: dict[int, FreeBlocks],
        states: tuple[SlotState, ...],
        *,
        head_leafs: tuple[BlockLeaf, ...] = (),
        head_copies: tuple[PipelineCopy, ...] = (),
    ) -> _AllocOut:
        """Run ggml-alloc over one segment from the given free blocks and crossing tensors
        (the head: the graph inputs first, then ``head_leafs``, as ggml-alloc allocates every
        leaf before the first node; with pipeline parallelism each graph input and each of
        ``head_copies`` n_copies times before them)."""
        built, order, emission, copies = self._emit(seg, ekey)
        tensors = [self._tensor(slot, built) for slot in emission.slots]
        for t, (allocated, offset, backend, _, _) in zip(tensors, states, strict=True):
            t.alloc = HashNode(
                allocated=allocated,
                visited=allocated,
                offset=offset,
                backend=backend if backend >= 0 else DEV,
            )
        galloc = GAlloc(self.opts, blocks)
        own: list[tuple[Slot, Tensor]] = []
        if self.pipeline:
            for copy in copies:  # allocated by the head, never freed
                if copy.port is None:
                    copy.alloc = HashNode(allocated=True, visited=True, backend=copy.backend)
                    copy.is_output = True
        if seg.kind.what == "head":
            if self.pipeline:
                own += self._allocate_copies(galloc, head_copies)
                placed = {slot: stand.alloc for slot, stand in own}
                for t, slot in zip(tensors, emission.slots, strict=True):
                    if (at := placed.get(slot)) is not None:  # the head's own crossing copies
                        t.alloc = HashNode(
                            allocated=True, visited=True, offset=at.offset, backend=at.backend
                        )
            for leaf in self.leafs:
                galloc.allocate(leaf, leaf.backend)
            for slot, ne, esize, backend in head_leafs:
                stand_in = Tensor("block leaf", "none", ne, esize, backend=backend)
                galloc.allocate(stand_in, backend)
                own.append((slot, stand_in))
        count_uses(order)
        for t, (_, _, _, no_user, no_view) in zip(tensors, states, strict=True):
            t.alloc.children += 0 if no_user else UNUSED
            t.alloc.views += 0 if no_view else UNUSED
        galloc.walk(order)
        out = built.res_out
        return _AllocOut(
            blocks=galloc.blocks(),
            peaks=galloc.peaks(),
            slots=tuple(_port_state(t) for t in tensors),
            res_out=None if out is None else _port_state(out),
            block_leafs=tuple((slot, _port_state(t)) for slot, t in own),
        )

    def _allocate_copies(
        self, galloc: GAlloc, head_copies: tuple[PipelineCopy, ...]
    ) -> list[tuple[Slot, Tensor]]:
        """alloc.pipeline_copies in the head: each graph input, then each split input, with
        its n_copies - 1 more; the crossing copies' places (never freed: any later segment
        finds them allocated)."""
        n_more = self.opts.n_copies - 1
        for leaf in self.leafs:
            galloc.allocate(leaf, leaf.backend)
            for _ in range(n_more):
                galloc.allocate(copy_of(leaf, leaf.backend), leaf.backend)
        placed: list[tuple[Slot, Tensor]] = []
        for slot, ne, esize, quant_pad, fixed_bytes, backend in head_copies:
            proto = Tensor("copy", "none", ne, esize, quant_pad=quant_pad, fixed_bytes=fixed_bytes)
            # the split's own copy first (the one its nodes use), then the others
            copies = [copy_of(proto, backend) for _ in range(self.opts.n_copies)]
            for copy in copies:
                galloc.allocate(copy, backend)
            if slot is not None:
                placed.append((slot, copies[0]))
        return placed

    def _tensor(self, slot: Slot, built: _Built) -> Tensor:
        if slot == RES:
            assert built.res_in is not None
            return built.res_in
        if slot[0] == "leaf":
            return self.leafs[slot[1]]
        if slot[0] == "bleaf":
            return built.leafs[slot[2]]
        return self.ports[slot]


def _carries(profiles: Sequence[_Profile]) -> list[Carries]:
    """The carries into each segment of each expansion pass, forwards or backwards."""
    into: list[list[int]] = [[] for _ in profiles]
    for index, (_, backward) in enumerate(PASSES):
        cur = -1
        order = range(len(profiles) - 1, -1, -1) if backward else range(len(profiles))
        for i in order:
            prior = tuple(into[i])
            into[i].append(cur)
            cur = profiles[i].carry(index, prior, cur)
    return [tuple(c) for c in into]


def _absolute(slot: Slot, il: int) -> Slot:
    """A slot as the whole graph knows it: a block's own leaf, of block ``il``."""
    return ("bleaf", il, slot[2]) if slot[0] == "bleaf" else slot


def _slot_state(
    slot: Slot,
    emission: _Emission,
    ports: dict[Slot, PortState],
    last: dict[Slot, tuple[int, int]],
    i: int,
    *,
    il: int,
    pipeline: bool = False,
) -> SlotState:
    """A crossing tensor's place before segment ``i`` (of block ``il``), and whether segment
    ``i`` is its last user. The residual and its copies have one consumer segment; a tensor
    emitted here is allocated here (with pipeline parallelism a copy is the head's)."""
    at = _absolute(slot, il)
    fresh = slot in emission.created and not (pipeline and slot[0] in ("copy", "rescopy"))
    state = (False, 0, -1) if fresh else ports.get(at, (False, 0, -1))
    if slot[0] in ("res", "rescopy"):
        return (*state, True, True)
    children, views = last.get(at, (-1, -1))
    return (*state, children <= i, views <= i)


def _port_state(t: Tensor) -> PortState:
    hn = t.alloc
    return (hn.allocated, hn.offset, hn.backend)


_REPLAYS: OrderedDict[tuple[Structure, Run, Options], Replay] = OrderedDict()
_KEEP = 8
_MAX_SOURCES = 32  # models one replay serves before a fresh one takes over (bounds its memo)


class Structure:
    """What the reserve graph of a model depends on, but for what its weights weigh: the
    architecture, its hyperparameters, each tensor's name, shape, block and role. The quants
    of one model share it, and so share one replay (its hash is computed once)."""

    __slots__ = ("_hash", "key")

    def __init__(self, facts: ModelFacts) -> None:
        hparams = tuple(
            sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in facts.hparams.items())
        )
        tensors = tuple((t.name, tuple(t.shape), t.layer, t.role) for t in facts.tensors)
        self.key = (facts.architecture, facts.n_layers, hparams, tensors)
        self._hash = hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Structure) and (
            self is other or (self._hash == other._hash and self.key == other.key)
        )


_STRUCTURES: OrderedDict[int, tuple[ModelFacts, Structure]] = OrderedDict()


def structure_of(facts: ModelFacts) -> Structure:
    """``facts``' structure (the last few models' are kept)."""
    found = _STRUCTURES.get(id(facts))
    if found is not None and found[0] is facts:
        _STRUCTURES.move_to_end(id(facts))
        return found[1]
    structure = Structure(facts)
    _STRUCTURES[id(facts)] = (facts, structure)
    while len(_STRUCTURES) > 4 * _KEEP:
        _STRUCTURES.popitem(last=False)
    return structure


def replay_for(facts: ModelFacts, run: Run, opts: Options) -> Replay:
    """The replay for this model's structure, run and options (the last few are kept): the
    quants of one model share it; give ``facts`` to its ``peaks``."""
    key = (structure_of(facts), run, opts)
    found = _REPLAYS.get(key)
    if found is not None and found.n_sources < _MAX_SOURCES:
        _REPLAYS.move_to_end(key)
        return found
    replay = Replay(facts, run, opts)
    _REPLAYS[key] = replay
    _REPLAYS.move_to_end(key)
    while len(_REPLAYS) > _KEEP:
        _REPLAYS.popitem(last=False)
    return replay
