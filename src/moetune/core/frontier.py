"""The speed frontier of a plan: the placements that fit, each with its memory per device and
its forecast, ordered by what the user wants (decode, prefill, both, or a workload).

Candidates, each planned by the planner (nothing is re-derived here):
- ``--n-cpu-moe N`` for N from the smallest that fits upward: the smallest, +1, +2, +4, ...
  up to every block (more experts on the CPU: slower decode, a smaller peak);
- the ``-ot`` form at the smallest N's split, where it keeps more on the devices;
- each ``-ub`` of ``UBATCHES`` (and the plan's own), re-planned: a bigger ubatch's compute
  buffer costs device memory, so its smallest N may be larger (``-b`` follows a ``-ub`` above
  it, as llama.cpp clamps the ubatch to the batch);
- on several devices, the device sets with one device fewer (``-dev`` selects them);
- each ``-t`` of 1, 2, 4, ... below the physical cores and the cores themselves, for the plan's
  own placement and the goal's best (core/threads.py: decode's CPU-side RAM read rate and a
  prompt's CPU compute by thread count), unless the user's own ``-t`` is after ``--``.
- the op-offload threshold (``GGML_OP_OFFLOAD_MIN_BATCH``, ``offload_thresholds``) at each
  ubatch's smallest N, where the goal scores a prompt: the values that move some of the goal
  prompt's ubatches from the host link to the CPU (short prompts, a slow link), re-planned
  (above the ubatch the compute buffer holds no copy of a host weight).

The pick stays the plan's own placement unless another candidate wins by more than the
forecast's error: a calibration's leave-one-out error, else the uncalibrated forecast's
expected error (core/prior.py ``UNCALIBRATED_ERROR``); where neither is known it never
switches, but the winner is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from typing import Literal

from moetune.core.calibrate import SpeedFit
from moetune.core.command import pass_through_value
from moetune.core.facts import ModelFacts
from moetune.core.goal import DECODE_OBJECTIVES, UBATCHES, Goal, check_workload
from moetune.core.plan import (
    PlanRequest,
    PlanResult,
    check_ram,
    command_threads,
    placement_result,
    plan_forecast,
    plan_target,
    speed_basis,
)
from moetune.core.planner import OffloadPlan, fixed_split, plan_n_cpu_moe, plan_override
from moetune.core.settings import OP_OFFLOAD_MIN_BATCH, Settings
from moetune.core.speed import Forecast, MachineFigures
from moetune.core.threads import TYPICAL_SINGLE_THREAD_SHARE, thread_candidates
from moetune.errors import DoesNotFitError
from moetune.record import HIDDEN, OMIT_EMPTY, record


@record(kw_only=True)
class FrontierEntry:
    """One candidate that fits: its placement, command, memory and forecast."""

    form: Literal["n_cpu_moe", "override"]
    n_cpu_moe: int | None
    override_tensor: list[str]
    n_ubatch: int
    n_batch: int
    threads: int | None
    devices: list[str]
    device_bytes: list[int]  # each device's predicted peak, in ``devices``' order
    host_bytes: int
    command: list[str]
    forecast: Forecast
    score: float | None  # by the goal: higher is better (None: a figure is missing)
    all_devices: bool = True  # False: a device set with one device fewer (-dev)
    base: bool = False  # the plan's own placement
    picked: bool = False
    # a -t candidate: a placement at another thread count than the plan's (describe says it)
    thread_variant: bool = field(default=False, metadata=HIDDEN)
    # what it was planned from (a -t candidate re-forecasts it)
    plan: OffloadPlan | None = field(default=None, metadata=HIDDEN, repr=False)
    settings: Settings | None = field(default=None, metadata=HIDDEN, repr=False)
    # GGML_OP_OFFLOAD_MIN_BATCH the command sets (None: unset, ggml's 32; the command's env)
    op_offload_min_batch: int | None = None
    env: dict[str, str] = field(default_factory=dict, metadata=OMIT_EMPTY)


@record(kw_only=True)
class Frontier:
    """The candidates in the goal's order (unknown scores last), the pick and why."""

    goal: str
    n_prompt: int
    depth: int
    entries: list[FrontierEntry]
    best: int | None  # index of the goal's winner (None: no candidate has a score)
    picked: int  # index of the pick
    switched: bool  # the pick is not the plan's own placement
    why: str
    threads: str  # the -t candidates, and what their forecast's thread term rests on
    missing: list[str]  # the figures the forecasts lack


def _n_steps(smallest: int, n_layers: int) -> list[int]:
    """N from the smallest upward: +0, +1, +2, +4, +8, ... and every block."""
    found = [smallest]
    step = 1
    while smallest + step < n_layers:
        found.append(smallest + step)
        step *= 2
    if smallest < n_layers:
        found.append(n_layers)
    return found


def _ubatches(req: PlanRequest, settings: Settings) -> list[int]:
    """The ubatch candidates: the user's own ``-ub`` after ``--`` alone; else 512 to 4096 and
    the plan's, at most the user's own ``-b`` (llama.cpp clamps -ub to -b) and none above
    the context (it clamps -b to the context, llama-context.cpp: a larger -ub is the same
    run)."""
    if pass_through_value(req.pass_through, "-ub", "--ubatch-size") is not None:
        return [settings.n_ubatch]
    wanted = sorted({*UBATCHES, settings.n_ubatch})
    wanted = [ub for ub in wanted if ub <= settings.n_ctx] or [settings.n_ubatch]
    if pass_through_value(req.pass_through, "-b", "--batch-size") is not None:
        return [ub for ub in wanted if ub <= settings.n_batch] or [settings.n_batch]
    return wanted


def _ubatch_settings(settings: Settings, n_ubatch: int) -> Settings:
    return replace(settings, n_ubatch=n_ubatch, n_batch=max(settings.n_batch, n_ubatch))


def device_subsets(req: PlanRequest) -> list[PlanRequest]:
    """The request on every device set with one device fewer (``-dev`` names it); none on
    one device."""
    n = len(req.devices)
    if n < 2:
        return []
    found = []
    for drop in range(n):
        keep = [i for i in range(n) if i != drop]
        devices = tuple(req.devices[i] for i in keep)
        found.append(
            replace(
                req,
                devices=devices,
                target_vram=tuple(req.target_vram_of(i) for i in keep),
                headrooms=tuple(req.headroom_of(i) for i in keep),
                device_args=(
                    *req.device_args,
                    "-dev",
                    ",".join(d.name for d in devices),
                ),
                figures=replace(req.figures, devices=tuple(req.figures.devices[i] for i in keep))
                if req.figures is not None
                else None,
            )
        )
    return found


def _entry(
    facts: ModelFacts,
    req: PlanRequest,
    plan: OffloadPlan,
    settings: Settings,
    goal: Goal,
    *,
    basis: tuple[MachineFigures, SpeedFit | None],
) -> FrontierEntry | None:
    """The candidate ``plan`` (None when a device or the RAM cannot hold it), forecast on
    ``basis`` (core.plan.speed_basis)."""
    target = plan_target(req)
    if not target.fits(plan.memory):
        return None
    if check_ram(plan.memory, req.ram_total_bytes, req.ram_available_bytes).status == "fail":
        return None
    placed = placement_result(req, plan, settings, target)
    found = plan_forecast(
        facts, req, plan.placement, settings, basis, depth=goal.depth, n_prompt=goal.n_prompt
    )
    return FrontierEntry(
        form="n_cpu_moe" if placed.n_cpu_moe is not None else "override",
        n_cpu_moe=placed.n_cpu_moe,
        override_tensor=placed.override_tensor,
        n_ubatch=settings.n_ubatch,
        n_batch=settings.n_batch,
        threads=command_threads(req),
        devices=[d.name for d in req.devices],
        device_bytes=[d.total_bytes for d in plan.memory.devices],
        host_bytes=plan.memory.host_bytes,
        command=placed.command,
        forecast=found,
        score=goal.score(found),
        plan=plan,
        settings=settings,
        op_offload_min_batch=settings.op_offload_min_batch,
        env=dict(placed.env),
    )


def _candidates(
    facts: ModelFacts, req: PlanRequest, settings: Settings, goal: Goal
) -> list[FrontierEntry]:
    """Every candidate on ``req``'s devices at ``settings``' context and cache types."""
    target = plan_target(req)
    basis = speed_basis(req)
    found: list[FrontierEntry] = []
    for n_ubatch in _ubatches(req, settings):
        at = _ubatch_settings(settings, n_ubatch)
        try:
            smallest = plan_n_cpu_moe(facts, target, at, extras=req.extras)
        except DoesNotFitError:
            continue
        n0 = smallest.placement.n_cpu_moe or 0
        plans = [smallest] + [
            fixed_split(facts, target, at, n, extras=req.extras)
            for n in _n_steps(n0, facts.n_layers)[1:]
        ]
        counts = tuple(int(c) for c in smallest.placement.tensor_split) or None
        try:
            alt = plan_override(facts, target, at, counts, extras=req.extras)
        except DoesNotFitError:
            alt = None
        if alt is not None and alt.memory.gpu_weights_bytes > smallest.memory.gpu_weights_bytes:
            plans.insert(1, alt)
        entries = [_entry(facts, req, p, at, goal, basis=basis) for p in plans]
        found += [e for e in entries if e is not None]
        found += threshold_entries(facts, req, at, goal, basis=basis, own=entries[0], plan=smallest)
    return found


def prompt_ubatches(n_prompt: int, n_ubatch: int) -> set[int]:
    """The sizes of the ubatches an ``n_prompt``-token prompt runs in (full ones, the rest)."""
    sizes = {min(n_prompt, n_ubatch)} if n_prompt > 0 else set()
    if n_prompt > n_ubatch and n_prompt % n_ubatch:
        sizes.add(n_prompt % n_ubatch)
    return sizes


def offload_thresholds(settings: Settings, n_prompt: int) -> list[int]:
    """The op-offload thresholds worth forecasting beside ``settings``' own for a prompt of
    ``n_prompt`` tokens: for each of its ubatch sizes that the own threshold offloads, the
    power of two above it (that ubatch and the smaller ones computed on the CPU), and ggml's
    32 where the own threshold is another; one per set of offloaded ubatches, none that
    offloads what the own one does."""
    sizes = prompt_ubatches(n_prompt, settings.n_ubatch)

    def offloaded(threshold: int) -> frozenset[int]:
        return frozenset(size for size in sizes if size >= threshold)

    own = settings.offload_min_batch
    wanted = [1 << size.bit_length() for size in sorted(sizes) if size >= own]
    if own != OP_OFFLOAD_MIN_BATCH:
        wanted.append(OP_OFFLOAD_MIN_BATCH)
    seen = {offloaded(own)}
    found: list[int] = []
    for threshold in sorted(set(wanted)):
        if (sets := offloaded(threshold)) not in seen:
            seen.add(sets)
            found.append(threshold)
    return found


def threshold_entries(
    facts: ModelFacts,
    req: PlanRequest,
    settings: Settings,
    goal: Goal,
    *,
    basis: tuple[MachineFigures, SpeedFit | None],
    own: FrontierEntry | None,
    plan: OffloadPlan,
) -> list[FrontierEntry]:
    """The smallest N at ``settings``' ubatch re-planned at each of ``offload_thresholds``
    (a threshold above the ubatch leaves the host weights' copies out of the compute buffer,
    so N may be smaller; ``plan`` is that N at the own threshold), where the goal scores a
    prompt, the forecast changes from
    ``own``'s (the same ubatch at the own threshold) and scores it (its figures known)."""
    if goal.objective in DECODE_OBJECTIVES or own is None:
        return []
    target = plan_target(req)
    found: list[FrontierEntry] = []
    for threshold in offload_thresholds(settings, goal.n_prompt):
        at = replace(settings, op_offload_min_batch=threshold)
        # ``plan`` (the own smallest N) at the threshold first: no figure, no re-planning
        probe = plan_forecast(
            facts, req, plan.placement, at, basis, depth=goal.depth, n_prompt=goal.n_prompt
        )
        if goal.score(probe) is None:
            continue
        try:
            plan = plan_n_cpu_moe(facts, target, at, extras=req.extras)
        except DoesNotFitError:
            continue
        entry = _entry(facts, req, plan, at, goal, basis=basis)
        # one the forecast cannot score (the CPU's FLOP/s unknown) ranks nothing: left out
        if entry is not None and entry.score is not None and _terms(entry) != _terms(own):
            found.append(entry)
    return found


def _terms(entry: FrontierEntry) -> list[tuple[str, float]]:
    return [(t.term, t.amount) for t in entry.forecast.prefill_terms]


def _same(entry: FrontierEntry, other: FrontierEntry) -> bool:
    return (entry.command, entry.devices, entry.env) == (other.command, other.devices, other.env)


def _order(entries: Sequence[FrontierEntry]) -> list[FrontierEntry]:
    """Best score first, unknown scores last (each group in its planned order)."""
    known = sorted((e for e in entries if e.score is not None), key=lambda e: -(e.score or 0))
    return known + [e for e in entries if e.score is None]


def choose(
    entries: Sequence[FrontierEntry], base: int, goal: Goal, error: float | None
) -> tuple[int, bool, str]:
    """(the pick's index, whether it switched, why) among ordered ``entries`` whose
    ``base``-th is the plan's own placement; ``error``: the forecast's relative error (None:
    unknown)."""
    best, own = entries[0], entries[base]
    if best.score is None or own.score is None:
        return base, False, f"the plan's own placement: the forecast cannot rank by {goal.name}"
    if _same(best, own) or best.score <= own.score:
        return base, False, f"the plan's own placement is also the fastest by {goal.name}"
    gain = best.score / own.score - 1 if own.score > 0 else float("inf")
    winner = f"{describe(best)} forecast {gain:+.0%} by {goal.name}"
    if error is None:
        return (
            base,
            False,
            (
                f"kept the plan's own placement: {winner}, but the forecast's error is "
                "unknown (moetune calibrate measures it)"
            ),
        )
    if gain <= error:
        return base, False, f"kept the plan's own placement: {winner}, within its {error:.0%}"
    return 0, True, f"switched: {winner}, beyond its {error:.0%} error"


def describe(entry: FrontierEntry) -> str:
    """``--n-cpu-moe 4 -ub 2048`` (``-ot`` for the override form; ``-dev`` on a subset; the
    variables before it: ``GGML_OP_OFFLOAD_MIN_BATCH=1024 --n-cpu-moe 4 -ub 2048``)."""
    place = f"--n-cpu-moe {entry.n_cpu_moe}" if entry.form == "n_cpu_moe" else "-ot"
    devices = "" if entry.all_devices else f" -dev {','.join(entry.devices)}"
    threads = f" -t {entry.threads}" if entry.thread_variant else ""
    env = "".join(f"{key}={value} " for key, value in entry.env.items())
    return f"{env}{place} -ub {entry.n_ubatch}{devices}{threads}"


THREADS_NOTE = (
    "-t: not a candidate: the physical cores are unknown; each command keeps llama.cpp's "
    "default threads"
)


def _thread_counts(req: PlanRequest) -> list[int]:
    """The ``-t`` candidates of ``req`` besides its own (none where the user's ``-t`` is after
    ``--`` or the cores are unknown)."""
    if pass_through_value(req.pass_through, "-t", "--threads") is not None:
        return []
    own = command_threads(req)
    return [t for t in thread_candidates(req.physical_cores, own) if t != own]


def thread_entries(
    facts: ModelFacts,
    req: PlanRequest,
    entries: Sequence[FrontierEntry],
    goal: Goal,
    basis: tuple[MachineFigures, SpeedFit | None],
) -> list[FrontierEntry]:
    """The ``-t`` candidates: the plan's own placement and the goal's best (of the entries
    on every device) at each other thread count, re-forecast there."""
    counts = _thread_counts(req)
    whole = [e for e in entries if e.all_devices and e.plan is not None]
    if not counts or not whole:
        return []
    scored = [e for e in whole if e.score is not None]
    sources = [e for e in whole if e.base]
    if scored:
        best = max(scored, key=lambda e: e.score or 0.0)
        sources += [best] if all(best is not e for e in sources) else []
    found: list[FrontierEntry] = []
    for source in sources:
        assert source.plan is not None and source.settings is not None
        for t in counts:
            at = replace(req, threads=t)
            entry = _entry(facts, at, source.plan, source.settings, goal, basis=basis)
            if entry is not None:
                entry.thread_variant = True
                found.append(entry)
    return found


def threads_note(req: PlanRequest, basis: tuple[MachineFigures, SpeedFit | None]) -> str:
    """What the ``-t`` candidates are, and what their thread term rests on."""
    if pass_through_value(req.pass_through, "-t", "--threads") is not None:
        return "-t: the one after -- (not a candidate)"
    counts = thread_candidates(req.physical_cores, command_threads(req))
    if not counts:
        return THREADS_NOTE
    figures, fit = basis
    if fit is not None and fit.trusted and fit.ram_single_thread_share is not None:
        share, source = fit.ram_single_thread_share, "calibrated"
    elif figures.ram_single_thread_share is not None:
        share, source = figures.ram_single_thread_share, "measured by thread count"
    else:
        share, source = TYPICAL_SINGLE_THREAD_SHARE, "typical"
    return (
        f"-t: candidates {', '.join(map(str, counts))} (of {req.physical_cores} physical "
        f"cores); one thread reads {share:.0%} of the RAM figure ({source}), compute scales "
        "with the cores (hyper-threads add nothing)"
    )


def frontier(
    facts: ModelFacts,
    req: PlanRequest,
    result: PlanResult,
    goal: Goal,
    *,
    error: float | None = None,
) -> Frontier | None:
    """The frontier of ``result`` (None for a dense model or a plan that does not fit);
    ``error``: the forecast's relative error (default: the fit's leave-one-out median error;
    None while it is uncalibrated). A workload that does not fit the plan's context is a
    BadValueError (goal.check_workload)."""
    check_workload(goal.workload, result.settings)
    if not facts.is_moe or not result.fits:
        return None
    basis = speed_basis(req)
    if error is None and basis[1] is not None:
        error = basis[1].forecast_error
    if error is None:  # uncalibrated (or its fit refused as noisy): its expected error
        error = result.forecast.expected_error if result.forecast is not None else None
    settings = result.settings
    entries = _candidates(facts, req, settings, goal)
    for subset in device_subsets(req):
        fewer = _candidates(facts, subset, settings, goal)
        entries += [replace(e, all_devices=False) for e in fewer]
    own = result.first  # the plan's own placement: its first command
    names = [d.name for d in req.devices]
    for entry in entries:
        entry.base = (entry.command, entry.devices, entry.env) == (own.command, names, own.env)
    if not any(e.base for e in entries):  # e.g. a fixed --n-cpu-moe below the steps
        plan = OffloadPlan(own.placement, own.memory, tuple(own.moved_layers))
        found = _entry(facts, req, plan, settings, goal, basis=basis)
        if found is not None:
            found.base = True
            entries.insert(0, found)
    entries += thread_entries(facts, req, entries, goal, basis)
    ordered = _order(entries)
    if not ordered:
        return None
    base = next((i for i, e in enumerate(ordered) if e.base), 0)
    picked, switched, why = choose(ordered, base, goal, error)
    ordered[picked].picked = True
    missing = list(dict.fromkeys(m for e in ordered for m in e.forecast.missing))
    return Frontier(
        goal=goal.name,
        n_prompt=goal.n_prompt,
        depth=goal.depth,
        entries=ordered,
        best=0 if ordered[0].score is not None else None,
        picked=picked,
        switched=switched,
        why=why,
        threads=threads_note(req, basis),
        missing=missing,
    )
