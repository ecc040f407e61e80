"""``moetune plan user/model``: which file of a repository to download for this machine.

Every model GGUF of the repository (shards grouped, sizes from the hub's tree listing) is
planned as its own file would be: whether it fits at the requested context and RAM, its N
(or every expert on the GPU), the largest context it allows at the chosen KV type, the RAM
check and the predicted device peak. Sizes come first: a quant bigger than every device and
the RAM together is screened out by its size alone, its header never fetched. Up to
:data:`MAX_PLANNED` quants left, each is planned; more (a tree of thousands of files), and
the picks are found by bisection over the sizes (a smaller file of a model needs no more
memory than a bigger one), only the quants it tries read and planned. Two picks (the seeds'
trade-off): ``best``, the biggest file that fits (the highest quality), and
``best_gpu_only``, the biggest that needs no expert offload at all (the fastest).

A network or authorization error stops the listing at once (every other quant would wait
for the same hub); when no quant could be planned at all, the biggest one's error is the
command's, with its own exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel

from moetune.errors import HubAuthError, MoetuneError, NetworkError
from moetune.units import format_bytes

if TYPE_CHECKING:
    from moetune.core.devices import DeviceSpec
    from moetune.core.plan import PlanResult
    from moetune.hub import ModelName, Quant, RepoListing

PlanOf = Callable[["Quant", bool], "PlanResult"]  # (quant, at the largest context) -> plan
Prefetch = Callable[[Sequence["Quant"]], None]  # the quants about to be planned, in order
MAX_PLANNED = 32


class QuantRow(BaseModel):
    """One quant of the repository, planned (or screened out by its size)."""

    tag: str
    name: str  # user/model:TAG, what -hf takes
    file: str  # its first file (shard 1 of a split model)
    files: list[str]
    size_bytes: int
    fits: bool
    n_cpu_moe: int | None = None  # None: not planned, or a dense model's -ngl plan
    all_on_gpu: bool = False  # no expert offload at all
    max_ctx: int | None = None  # the largest context at the chosen KV type
    ram: str | None = None  # the RAM check: ok, warn, fail
    gpu_bytes: int | None = None  # the predicted device peak (every device together)
    reason: str | None = None  # why it does not fit, or why it was not planned
    command: list[str] = []


class QuantsResult(BaseModel):
    """Every quant of one repository, and the two picks (their tags)."""

    repo: str
    commit: str
    n_ctx: int | None  # the context asked for (None: each quant's default)
    cache_type: str
    quants: list[QuantRow]
    best: str | None
    best_gpu_only: str | None
    reason: str | None = None  # when nothing fits: why the smallest does not


def plan_quants(
    name: ModelName,
    listing: RepoListing,
    plan_of: PlanOf,
    devices: Sequence[DeviceSpec],
    ram: tuple[int | None, int | None, int | None],
    *,
    prefetch: Prefetch | None = None,
) -> QuantsResult:
    """Plan the quants of ``listing`` with ``plan_of``; the rows biggest first. ``prefetch``
    is told the quants that will all be planned, in that order, before the first is (their
    headers can be on their way while the first ones are planned)."""
    ordered = sorted(listing.model_quants(), key=lambda q: q.size_bytes, reverse=True)
    vram = sum(d.total_bytes or 0 for d in devices)
    room = vram + (ram[0] or 0)
    table = _QuantRows(name, ordered, plan_of)
    candidates = []
    for i, quant in enumerate(ordered):
        if room and ram[0] and quant.size_bytes > room:
            table.note(i, f"{format_bytes(quant.size_bytes)} is more than the devices and RAM hold")
        else:
            candidates.append(i)
    if len(candidates) <= MAX_PLANNED:
        if prefetch is not None:
            prefetch([ordered[i] for i in candidates])
        for i in candidates:
            table.plan(i)
    else:
        first = _first(candidates, lambda i: table.plan(i).fits)
        if first is not None:  # no offload needs the file in device memory
            small = [i for i in candidates if i >= first and ordered[i].size_bytes <= vram]
            _first(small, lambda i: table.plan(i).fits and table.plan(i).all_on_gpu)
        for i in candidates:
            if i not in table.tried:
                table.note(
                    i,
                    f"not planned: only the quants tried in the search for the picks "
                    f"({len(table.tried)} of {len(candidates)}); name it to plan it",
                )
    rows = table.rows
    fitting = [r for r in rows if r.fits]
    best = max(fitting, key=lambda r: r.size_bytes, default=None)
    gpu_only = max((r for r in fitting if r.all_on_gpu), key=lambda r: r.size_bytes, default=None)
    if best is None and not table.planned and table.errors:
        raise table.errors[min(table.errors)]
    smallest = rows[-1]
    return QuantsResult(
        repo=name.repo,
        commit=listing.commit,
        n_ctx=table.n_ctx,
        cache_type=table.cache_type,
        quants=rows,
        best=best.tag if best else None,
        best_gpu_only=gpu_only.tag if gpu_only else None,
        reason=None if best else (smallest.reason or "it does not fit"),
    )


class _QuantRows:
    """The rows, each quant planned at most once (its headers read at most once)."""

    def __init__(self, name: ModelName, ordered: list[Quant], plan_of: PlanOf) -> None:
        self.ordered, self.plan_of = ordered, plan_of
        self.rows = [
            QuantRow(
                tag=quant.tag,
                name=f"{name.repo}:{quant.tag}",
                file=quant.first.path,
                files=[f.path for f in quant.files],
                size_bytes=quant.size_bytes,
                fits=False,
            )
            for quant in ordered
        ]
        self.planned: set[int] = set()
        self.errors: dict[int, MoetuneError] = {}
        self.n_ctx: int | None = None
        self.cache_type = ""

    @property
    def tried(self) -> set[int]:
        return self.planned | set(self.errors)

    def note(self, i: int, reason: str) -> None:
        self.rows[i] = self.rows[i].model_copy(update={"reason": reason})

    def plan(self, i: int) -> QuantRow:
        if i in self.tried:
            return self.rows[i]
        quant = self.ordered[i]
        try:
            plan = self.plan_of(quant, False)
        except (NetworkError, HubAuthError):
            raise
        except MoetuneError as exc:
            self.errors[i] = exc
            self.note(i, exc.message)
            return self.rows[i]
        self.planned.add(i)
        self.n_ctx, self.cache_type = plan.settings.n_ctx, plan.settings.type_k
        self.rows[i] = _row(self.rows[i], plan, _max_ctx(self.plan_of, quant))
        return self.rows[i]


def _first(order: list[int], test: Callable[[int], bool]) -> int | None:
    """The first of ``order`` (biggest first) that passes ``test``, by bisection: those
    before it fail and those after it pass."""
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi) // 2
        if test(order[mid]):
            hi = mid
        else:
            lo = mid + 1
    return order[lo] if lo < len(order) else None


def _row(row: QuantRow, plan: PlanResult, max_ctx: int | None) -> QuantRow:
    rec = plan.recommended
    offload = bool(rec.n_cpu_moe) or bool(rec.override_tensor) or rec.n_gpu_layers < 99
    return row.model_copy(
        update={
            "fits": plan.fits,
            "n_cpu_moe": rec.n_cpu_moe,
            "all_on_gpu": not offload,
            "max_ctx": max_ctx,
            "ram": plan.ram.status,
            "gpu_bytes": rec.memory.gpu_bytes,
            "reason": plan.reason,
            "command": rec.command,
        }
    )


def _max_ctx(plan_of: PlanOf, quant: Quant) -> int | None:
    """The largest context that fits at all (experts offloaded as needed)."""
    try:
        plan = plan_of(quant, True)
    except MoetuneError:
        return None
    return plan.recommended.n_ctx if plan.fits else None
