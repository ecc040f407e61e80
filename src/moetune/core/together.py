"""Several models resident together on the same devices and RAM (``--together``): each its
own placement, the devices' budgets shared so that the sum of their peaks fits.

Each model is planned (``make_plan``, the one path) at shares of every device's budget: 1/S,
2/S, ... S/S of it (``SHARES``). A share's plan is the placement the planner picks within it
(for an MoE model the smallest ``--n-cpu-moe N`` that fits), with its predicted peak on each
device and its forecast; shares that give the same placement are one candidate. The split is
the combination of one candidate per model whose peaks add up within every device's budget
and whose host bytes within the RAM, and that maximises the weighted sum of each model's
forecast score (the goal's: decode tok/s by default) relative to its best alone (the whole
budget): a model's weight (``--weights``) says how much its speed counts, not equal shares
of the memory. Where a model has no score (a figure missing), its share of weights on the
devices stands for it.

Each model is its own llama-server process (a router child), so each pays its own runtime
overhead (the CUDA context, cuBLAS, pools: ``gpu_overhead_bytes``, "of a CUDA process"), once
per model in the sum: a model's predicted peak holds it.

An RPC device cannot hold two processes' models at once: ggml-rpc-server serves one client at
a time (it accepts the next connection only when the current one closes), so a second
process on it waits for ever. With an RPC device among the devices, the models are planned
one at a time (each alone with the whole budget), and the result says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import field, replace
from typing import ClassVar

from moetune.core.facts import ModelFacts
from moetune.core.goal import Goal
from moetune.core.plan import PlanRequest, PlanResult, make_plan
from moetune.errors import BadValueError, DoesNotFitError
from moetune.record import record
from moetune.units import format_bytes

SHARES = 16  # each device's budget in sixteenths
MAX_COMBINATIONS = 200_000  # the search's bound (16 candidates each: four models)
RPC_ONE_AT_A_TIME = (
    "an RPC device serves one process at a time (ggml-rpc-server accepts the next client only "
    "when the current one closes): the models are planned one at a time, each alone on the "
    "devices; serve them with --models-max 1"
)


@record(frozen=True, kw_only=True)
class TogetherCandidate:
    """One model at one share: its plan, its peak on each device, its host bytes, score."""

    share: int  # of SHARES
    plan: PlanResult
    device_bytes: tuple[int, ...]
    host_bytes: int
    score: float | None
    gpu_weight_share: float  # its weights on the devices, of all its weights


@record(frozen=True, kw_only=True)
class TogetherModel:
    """One model of a together plan: its plan at its share, and what its speed gives up."""

    name: str
    weight: float
    share: int  # the sixteenths of each device's budget it was planned within
    plan: PlanResult
    device_bytes: list[int]  # its predicted peak on each device
    host_bytes: int
    score: float | None  # the goal's score at its share
    alone_score: float | None  # the goal's score with the whole budget, alone


@record(frozen=True, kw_only=True)
class TogetherPlan:
    """Several models planned to stay loaded at once (``together``), or, with an RPC device
    among the devices, one at a time (``together`` False, ``reason`` says why)."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("models_max",)

    goal: str
    together: bool
    models: list[TogetherModel]
    device_names: list[str]
    device_budgets: list[int]
    # the models' predicted peaks added up, per device (one at a time: the largest)
    device_sums: list[int]
    host_bytes: int  # their host bytes added up (one at a time: the largest)
    ram_available_bytes: int | None
    warnings: list[str] = field(default_factory=list)
    reason: str | None = None  # why they are not together (an RPC device)

    @property
    def models_max(self) -> int:
        """The router's ``--models-max`` that serves them as planned."""
        return len(self.models) if self.together else 1


def parse_weights(text: str | None, n: int) -> tuple[float, ...]:
    """``--weights w1,w2,...``: one positive number per model (default: equal)."""
    if text is None:
        return (1.0,) * n
    words = [w.strip() for w in text.split(",")]
    try:
        values = tuple(float(w) for w in words)
    except ValueError:
        raise BadValueError(f"--weights {text!r}: give numbers, one per model") from None
    if len(values) != n:
        raise BadValueError(f"--weights {text!r}: {len(values)} weights for {n} models")
    if not all(0 < v < float("inf") for v in values):
        raise BadValueError(f"--weights {text!r}: each weight above 0 and finite")
    return values


def has_rpc(req: PlanRequest) -> bool:
    return any(d.kind == "rpc" for d in req.devices)


def _candidate(facts: ModelFacts, req: PlanRequest, share: int, goal: Goal) -> TogetherCandidate:
    budgets = req.budgets
    targets = tuple(max(1, b * share // SHARES) for b in budgets)
    plan = make_plan(facts, replace(req, target_vram=targets, ctx_max=False))
    memory = plan.first.memory
    weights = memory.gpu_weights_bytes + memory.cpu_weights_bytes
    return TogetherCandidate(
        share=share,
        plan=plan,
        device_bytes=tuple(d.total_bytes for d in memory.devices),
        host_bytes=memory.host_bytes,
        score=goal.score(plan.forecast) if plan.forecast is not None else None,
        gpu_weight_share=memory.gpu_weights_bytes / weights if weights else 1.0,
    )


def candidates(facts: ModelFacts, req: PlanRequest, goal: Goal) -> list[TogetherCandidate]:
    """The model's placements at each share that fit it (the same placement once: its
    smallest share), smallest share first."""
    found: list[TogetherCandidate] = []
    seen: set[tuple[str, ...]] = set()
    for share in range(1, SHARES + 1):
        try:
            one = _candidate(facts, req, share, goal)
        except BadValueError:  # a share too small to plan in
            continue
        if not one.plan.fits:
            continue
        key = tuple(one.plan.first.command)
        if key in seen:
            continue
        seen.add(key)
        found.append(one)
    return found


def _value(c: TogetherCandidate, alone: TogetherCandidate) -> float:
    """What a candidate is worth relative to its best alone: the score's ratio, else the
    share of its weights on the devices."""
    if c.score is not None and alone.score:
        return c.score / alone.score
    return c.gpu_weight_share / alone.gpu_weight_share if alone.gpu_weight_share else 0.0


def plan_together(
    models: Sequence[tuple[str, ModelFacts, PlanRequest]],
    goal: Goal,
    weights: Sequence[float] | None = None,
) -> TogetherPlan:
    """The plan of ``models`` (each a name, its facts and its request, all for the same
    devices and budgets) loaded at once: the combination of their placements that fits every
    device and the RAM and maximises the weighted sum of their relative forecast scores.
    DoesNotFitError when no combination fits (what each needs at least is said)."""
    if len(models) < 2:
        raise BadValueError("--together plans two models or more")
    weights = tuple(weights) if weights is not None else (1.0,) * len(models)
    first = models[0][2]
    budgets = list(first.budgets)
    names = [d.name for d in first.devices]
    ram = first.ram_available_bytes or first.ram_total_bytes
    if has_rpc(first):
        return _one_at_a_time(models, goal, weights)
    found = [candidates(facts, req, goal) for _, facts, req in models]
    for (name, _, _), options in zip(models, found, strict=True):
        if not options:
            raise DoesNotFitError(f"{name} does not fit the devices even alone")
    alone = [options[-1] for options in found]  # the largest share: as good as alone
    total = 1
    for options in found:
        total *= len(options)
    if total > MAX_COMBINATIONS:
        raise BadValueError(
            f"--together: {total} combinations of {len(models)} models' placements to search",
            hint="plan fewer models together",
        )
    best: tuple[float, int, tuple[TogetherCandidate, ...]] | None = None
    for combo in itertools.product(*found):
        sums = [sum(c.device_bytes[i] for c in combo) for i in range(len(budgets))]
        if any(s > b for s, b in zip(sums, budgets, strict=True)):
            continue
        host = sum(c.host_bytes for c in combo)
        if ram is not None and host > ram:
            continue
        value = sum(w * _value(c, a) for w, c, a in zip(weights, combo, alone, strict=True))
        key = (value, -sum(sums), combo)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        least = " + ".join(
            f"{name} {format_bytes(max(options[0].device_bytes))}"
            for (name, _, _), options in zip(models, found, strict=True)
        )
        raise DoesNotFitError(
            f"the models do not fit together: at their smallest placements {least}, beyond "
            f"{format_bytes(max(budgets))}",
            hint="plan fewer models together, or give a larger --target-vram",
        )
    chosen = best[2]
    return TogetherPlan(
        goal=goal.name,
        together=True,
        models=[
            _model(name, w, c, a)
            for (name, _, _), w, c, a in zip(models, weights, chosen, alone, strict=True)
        ],
        device_names=names,
        device_budgets=budgets,
        device_sums=[sum(c.device_bytes[i] for c in chosen) for i in range(len(budgets))],
        host_bytes=sum(c.host_bytes for c in chosen),
        ram_available_bytes=ram,
    )


def _model(name: str, weight: float, c: TogetherCandidate, a: TogetherCandidate) -> TogetherModel:
    return TogetherModel(
        name=name,
        weight=weight,
        share=c.share,
        plan=c.plan,
        device_bytes=list(c.device_bytes),
        host_bytes=c.host_bytes,
        score=c.score,
        alone_score=a.score,
    )


def _one_at_a_time(
    models: Sequence[tuple[str, ModelFacts, PlanRequest]],
    goal: Goal,
    weights: Sequence[float],
) -> TogetherPlan:
    """Each model alone with the whole budget (an RPC device holds one process's models)."""
    first = models[0][2]
    budgets = list(first.budgets)
    planned: list[TogetherModel] = []
    for (name, facts, req), w in zip(models, weights, strict=True):
        alone = _candidate(facts, req, SHARES, goal)
        if not alone.plan.fits:
            raise DoesNotFitError(f"{name} does not fit: {alone.plan.reason}")
        planned.append(_model(name, w, alone, alone))
    return TogetherPlan(
        goal=goal.name,
        together=False,
        models=planned,
        device_names=[d.name for d in first.devices],
        device_budgets=budgets,
        device_sums=[max(m.device_bytes[i] for m in planned) for i in range(len(budgets))],
        host_bytes=max(m.host_bytes for m in planned),
        ram_available_bytes=first.ram_available_bytes or first.ram_total_bytes,
        warnings=[RPC_ONE_AT_A_TIME],
        reason=RPC_ONE_AT_A_TIME,
    )
