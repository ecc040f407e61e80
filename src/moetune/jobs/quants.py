"""``moetune plan user/model``: which file of a repository to download for this machine.

Every model GGUF of the repository (shards grouped, sizes from the hub's tree listing) is
planned as its own file would be: whether it fits at the requested context and RAM, its N
(or every expert on the GPU), the largest context it allows at the chosen KV type, the RAM
check and the predicted device peak. A quant bigger than every device and the RAM together
is screened out by its size alone, its header never fetched. Two picks (the seeds'
trade-off): ``best``, the biggest file that fits (the highest quality), and ``best_gpu_only``,
the biggest that needs no expert offload at all (the fastest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel

from moetune.errors import MoetuneError
from moetune.units import format_bytes

if TYPE_CHECKING:
    from moetune.core.devices import DeviceSpec
    from moetune.core.plan import PlanResult
    from moetune.hub import ModelName, Quant, RepoListing

PlanOf = Callable[["Quant", bool], "PlanResult"]  # (quant, at the largest context) -> plan


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
) -> QuantsResult:
    """Plan every quant of ``listing`` with ``plan_of``; the rows biggest first."""
    room = sum(d.total_bytes or 0 for d in devices) + (ram[0] or 0)
    rows: list[QuantRow] = []
    n_ctx, cache_type = None, ""
    for quant in sorted(listing.quants(), key=lambda q: q.size_bytes, reverse=True):
        row = QuantRow(
            tag=quant.tag,
            name=f"{name.repo}:{quant.tag}",
            file=quant.first.path,
            files=[f.path for f in quant.files],
            size_bytes=quant.size_bytes,
            fits=False,
        )
        if room and ram[0] and quant.size_bytes > room:
            rows.append(
                row.model_copy(
                    update={
                        "reason": f"{format_bytes(quant.size_bytes)} "
                        "is more than the devices and RAM hold"
                    }
                )
            )
            continue
        try:
            plan = plan_of(quant, False)
        except MoetuneError as exc:
            rows.append(row.model_copy(update={"reason": exc.message}))
            continue
        n_ctx, cache_type = plan.settings.n_ctx, plan.settings.type_k
        rows.append(_row(row, plan, _max_ctx(plan_of, quant)))
    fitting = [r for r in rows if r.fits]
    best = max(fitting, key=lambda r: r.size_bytes, default=None)
    gpu_only = max((r for r in fitting if r.all_on_gpu), key=lambda r: r.size_bytes, default=None)
    smallest = min(rows, key=lambda r: r.size_bytes, default=None)
    return QuantsResult(
        repo=name.repo,
        commit=listing.commit,
        n_ctx=n_ctx,
        cache_type=cache_type,
        quants=rows,
        best=best.tag if best else None,
        best_gpu_only=gpu_only.tag if gpu_only else None,
        reason=None if best or smallest is None else (smallest.reason or "it does not fit"),
    )


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
