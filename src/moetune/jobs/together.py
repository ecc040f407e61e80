"""``moetune run A B --together``: the models planned together (core/together.py), then
launched together, each its own llama-server as a router's children are, and measured with
all of them loaded: each device's peak is the sum of every process's use of it (each
process's own figure from its probe: NVML's per process, llama.cpp's buffer lines on the
other devices). Where a device is over its budget, the model whose step costs least forecast
speed (its weighted share of its best alone) moves one more expert block to the CPU
(``--n-cpu-moe N+1``) and all are launched again; it converges when every device is within
its budget, within ``MAX_LAUNCHES`` launches. Each model's winner is saved as a tuned
profile naming the set (``TuneSettings.together``); ``export --together`` picks the set.

An RPC device cannot hold two processes' models at once (ggml-rpc-server serves one client
at a time): run --together refuses it before any launch, and says to tune each alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import field, replace
from typing import TYPE_CHECKING

from moetune.core.memory import estimate
from moetune.core.placement import Placement
from moetune.errors import BadValueError, OutOfMemoryError, ServerFailedError
from moetune.record import record
from moetune.units import MIB, format_bytes

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts
    from moetune.core.goal import Goal
    from moetune.core.plan import PlanRequest
    from moetune.core.together import TogetherPlan
    from moetune.jobs.launch import DeviceSetup, LaunchSpec
    from moetune.jobs.run import Fill
    from moetune.llamacpp.process import RunningServer
    from moetune.store.tuned import ProfileStore, TogetherSet, TunedProfile, TuneKey
    from moetune.units import Ctx, Sizes

MAX_LAUNCHES = 12
RPC_REFUSED = (
    "run --together: an RPC device serves one process at a time (ggml-rpc-server accepts the "
    "next client only when the current one closes), so these models cannot be loaded together "
    "on it"
)
RPC_HINT = (
    "tune each alone (moetune run A, then moetune run B) and serve them one at a time "
    "(export preset A B: --models-max 1)"
)


@record(frozen=True, kw_only=True)
class TogetherMember:
    """One model launched together with the others: its N, what it measured on each device
    (its own process's use) and its speed, measured with all of them loaded."""

    name: str
    model: str
    weight: float
    planned_n_cpu_moe: int
    n_cpu_moe: int
    tensor_split: list[float]
    device_predicted: list[int]
    device_measured: list[int | None]
    decode_tps: float | None = None
    prompt_tps: float | None = None
    ttft_s: float | None = None
    forecast_score: float | None = None  # the goal's forecast at its N
    command: list[str] = field(default_factory=list)
    log_path: str | None = None
    profile_name: str | None = None
    profile_path: str | None = None


@record(frozen=True, kw_only=True)
class TogetherLaunch:
    """One launch of every model at once: each one's N, each device's sum (measured with all
    loaded, predicted), and whether every device was within its budget."""

    n_cpu_moe: list[int]
    device_measured: list[int | None]
    device_predicted: list[int]
    status: str  # ok | over | oom
    message: str | None = None
    stepped: str | None = None  # the model moved one more block to the CPU after it


@record(frozen=True, kw_only=True)
class TogetherRun:
    """``run A B --together``: the launches, and the models at the last one that fit."""

    together: bool
    set_id: str
    goal: str
    converged: bool
    models: list[TogetherMember]
    launches: list[TogetherLaunch]
    device_names: list[str]
    device_budgets: list[int]
    device_measured: list[int | None]  # the winner's sums, with all loaded
    reused_profiles: bool = False
    notes: list[str] = field(default_factory=list)


@record(frozen=True)
class _Model:
    """One model of the run: what launches it and what plans it."""

    name: str
    facts: ModelFacts
    spec: LaunchSpec
    request: PlanRequest

    def placement(self, n: int, split: Sequence[float]) -> Placement:
        return Placement.with_n_cpu_moe(n, tensor_split=tuple(split))

    def predicted(self, placement: Placement, setup: DeviceSetup) -> list[int]:
        memory = estimate(
            self.facts, placement, self.spec.settings, setup.devices, extras=self.spec.extras
        )
        return [d.total_bytes for d in memory.devices]


def _score(model: _Model, n: int, goal: Goal) -> float | None:
    """The goal's forecast of ``model`` at ``--n-cpu-moe n`` (the one path: make_plan)."""
    from moetune.core.plan import make_plan

    try:
        plan = make_plan(model.facts, replace(model.request, n_cpu_moe=n, ctx_max=False))
    except BadValueError:
        return None
    return None if plan.forecast is None else goal.score(plan.forecast)


def _measure(server: RunningServer, setup: DeviceSetup) -> list[int | None]:
    """This process's use of each device (its probe's figure, plus the device's runtime
    overhead where the probe sees llama.cpp's buffers alone)."""
    found: list[int | None] = []
    for probe, device in zip(setup.probes, setup.devices, strict=True):
        figure = probe.device_bytes(server)
        if figure is not None and not probe.includes_overhead:
            figure += device.overhead_bytes
        found.append(figure)
    return found


def _sums(per_model: Sequence[Sequence[int | None]], n_devices: int) -> list[int | None]:
    sums: list[int | None] = []
    for i in range(n_devices):
        figures = [m[i] for m in per_model]
        sums.append(None if any(f is None for f in figures) else sum(f or 0 for f in figures))
    return sums


def _over(
    measured: Sequence[int | None], predicted: Sequence[int], budgets: Sequence[int]
) -> list[int]:
    """The devices over their budgets (a device with no figure where something was predicted
    counts as over, as run's do)."""
    return [
        i
        for i, (m, p, b) in enumerate(zip(measured, predicted, budgets, strict=True))
        if (m is None and p > 0) or (m is not None and m > b)
    ]


def _launch_all(
    models: Sequence[_Model],
    placements: Sequence[Placement],
    setup: DeviceSetup,
    fill: Fill,
    on_event: Callable[[str], None],
) -> tuple[str, str | None, list[list[int | None]], list[tuple[float | None, ...]], list[str]]:
    """Start every model's llama-server, wait until each is ready, warm each up and fill its
    context, then measure each process on each device with all of them loaded, and (where
    every device is within budget) time each; every server is stopped before it returns.
    (status, message, each model's measured per device, each model's (decode, prompt, ttft),
    each one's log)."""
    from moetune.jobs.run import _speed
    from moetune.jobs.status import NO_STATUS
    from moetune.llamacpp.client import ServerClient, fill_context

    with ExitStack() as stack:
        servers: list[RunningServer] = []
        for model, placement in zip(models, placements, strict=True):
            on_event(f"{model.name}: starting llama-server at N={placement.n_cpu_moe}")
            servers.append(stack.enter_context(model.spec.start(model.spec.args(placement))))
        logs = [str(s.log_path) for s in servers]
        try:
            clients = [stack.enter_context(ServerClient(s.url)) for s in servers]
            for model, server, client in zip(models, servers, clients, strict=True):
                on_event(f"{model.name}: loading")
                client.wait_ready(model.spec.ready_timeout_s, server.check_alive)
            filled = []
            for model, client in zip(models, clients, strict=True):
                on_event(f"{model.name}: filling the context (all loaded)")
                client.complete("Hello", 4, stream=False)
                filled.append(
                    fill_context(client, fill.tokens or model.spec.settings.n_ctx, fill.n_predict)
                )
            for server in servers:  # all still loaded
                server.check_alive()
            each = [_measure(server, setup) for server in servers]
            speeds: list[tuple[float | None, ...]] = [
                (done.predicted_per_second, done.prompt_per_second, done.ttft_s) for done in filled
            ]
            if not _over(_sums(each, len(setup.devices)), [0] * len(setup.devices), setup.budgets):
                for i, (model, client) in enumerate(zip(models, clients, strict=True)):
                    on_event(f"{model.name}: timing requests (all loaded)")
                    timed = _speed(client, fill, NO_STATUS).decode_tps.median
                    speeds[i] = (timed, *speeds[i][1:])
            return "measured", None, each, speeds, logs
        except OutOfMemoryError as exc:
            return "oom", exc.message.splitlines()[0], [], [], logs
        except ServerFailedError:
            for server in servers:
                if (line := server.failure()) is not None:
                    return "oom", line, [], [], logs
            raise


def run_together(
    models: Sequence[str],
    *,
    weights: str | None,
    pass_through: tuple[str, ...],
    server: str | None,
    cache_type: str,
    ctx: Ctx | None,
    target_vram: Sizes | None,
    headroom: Sizes,
    overhead: Sizes | None,
    rpc: str | None,
    force: bool,
    objective: str | None,
    fill: Fill,
    save: bool,
    retune: bool,
    warn: Callable[[str], None],
    on_event: Callable[[str], None],
    on_note: Callable[[str], None],
    store: ProfileStore | None = None,
) -> TogetherRun:
    """Plan ``models`` together on the devices ``server`` lists, launch them together and
    step until each device's measured peak with all loaded is within its budget; save each
    model's winner as a tuned profile of the set (unless not ``save``)."""
    from moetune.core.command import rpc_endpoints
    from moetune.core.goal import goal_of
    from moetune.core.together import parse_weights, plan_together
    from moetune.store.tuned import ProfileStore, model_identity, together_set

    if len(models) < 2:
        raise BadValueError("--together runs two models or more", hint="name them: run A B")
    if ctx is not None and ctx.tokens is None:
        raise BadValueError("--together takes --ctx N, not max", hint="give each model's context")
    shares = parse_weights(weights, len(models))
    if rpc or rpc_endpoints(pass_through):  # before any launch
        raise BadValueError(RPC_REFUSED, hint=RPC_HINT)
    goal = goal_of(objective, None)
    runs, setup = _open(
        models,
        pass_through=pass_through,
        server=server,
        cache_type=cache_type,
        ctx=ctx,
        target_vram=target_vram,
        headroom=headroom,
        overhead=overhead,
        rpc=rpc,
        force=force,
        warn=warn,
    )
    planned = plan_together([(m.name, m.facts, m.request) for m in runs], goal, shares)
    identities = [model_identity(m.spec.model) for m in runs]
    tset = together_set(identities, shares, setup.budgets)
    store = store if store is not None else ProfileStore()
    keys = [_key(m, setup, tset) for m in runs]
    start = [m.plan.recommended.n_cpu_moe or 0 for m in planned.models]
    splits = [list(m.plan.recommended.tensor_split) for m in planned.models]
    notes: list[str] = []
    reused: list[TunedProfile] | None = None
    if not retune:
        matches = [store.match(k) for k in keys]
        for match in matches:
            notes += match.notes
        if all(match.profile is not None for match in matches):
            reused = [m.profile for m in matches if m.profile is not None]
            start = [p.placement.n_cpu_moe or 0 for p in reused]
            splits = [list(p.placement.tensor_split) for p in reused]
            notes.append(
                f"tuned profiles of set {tset.id} match: N={','.join(map(str, start))}, "
                "one launch to confirm"
            )
    for note in notes:
        on_note(note)
    on_event(
        f"planned together on {', '.join(planned.device_names)}: "
        + ", ".join(f"{m.name} N={n}" for m, n in zip(runs, start, strict=True))
    )
    result = _tune(
        runs,
        planned,
        start=start,
        splits=splits,
        setup=setup,
        goal=goal,
        fill=fill,
        on_event=on_event,
        on_note=on_note,
    )
    result = replace(
        result, set_id=tset.id, notes=notes + result.notes, reused_profiles=reused is not None
    )
    if not save or not result.converged:
        return result
    return _save(store, keys, result, reused, on_note)


def _open(
    models: Sequence[str],
    *,
    pass_through: tuple[str, ...],
    server: str | None,
    cache_type: str,
    ctx: Ctx | None,
    target_vram: Sizes | None,
    headroom: Sizes,
    overhead: Sizes | None,
    rpc: str | None,
    force: bool,
    warn: Callable[[str], None],
) -> tuple[list[_Model], DeviceSetup]:
    """Each model opened, its launch prepared as run's (the devices llama-server lists, the
    budgets, the context) and its plan request for the same devices and budgets; BAD_VALUE
    for a dense model, and for an RPC device among the devices."""
    from pathlib import Path

    from moetune.jobs.devices import DeviceSet
    from moetune.jobs.figures import ram_figure
    from moetune.jobs.launch import prepare_launch
    from moetune.jobs.models import launch_spec, open_model
    from moetune.jobs.plan import machine_figures, plan_inputs, plan_request

    opened: list[tuple[str, ModelFacts, LaunchSpec, DeviceSetup]] = []
    for text in models:
        facts, spec = launch_spec(text, pass_through, server=server, cache_type=cache_type)
        if not facts.is_moe:
            raise BadValueError(
                f"{text}: a dense model has no experts to step", hint="plan it with moetune plan"
            )
        spec, setup = prepare_launch(
            facts,
            spec,
            ctx=ctx,
            target_bytes=target_vram,
            headroom_bytes=headroom,
            overhead=overhead,
            rpc=rpc,
            warn=warn,
            force=force,
        )
        if any(d.kind == "rpc" for d in setup.devices):
            raise BadValueError(RPC_REFUSED, hint=RPC_HINT)
        opened.append((Path(spec.model).name.removesuffix(".gguf"), facts, spec, setup))
    setup = opened[0][3]
    found = DeviceSet(setup.devices, "llama-server", setup.device_args, here=True)
    inputs = plan_inputs(
        found,
        pass_through=pass_through,
        ctx=ctx,
        cache_type=cache_type,
        targets=target_vram,
        ram=None,
        headroom=headroom,
        force=True,  # prepare_launch checked the targets
    )
    figures = machine_figures(found, ram_figure(None, measure=False, warn=warn), inputs.ram[2])
    inputs = inputs._replace(figures=figures)
    runs: list[_Model] = []
    for (name, facts, spec, _), text in zip(opened, models, strict=True):
        request = plan_request(open_model(text), inputs)
        # the run's own context
        request = replace(request, settings=replace(request.settings, n_ctx=spec.settings.n_ctx))
        runs.append(_Model(name, facts, spec, request))
    return runs, setup


def _key(model: _Model, setup: DeviceSetup, tset: TogetherSet) -> TuneKey:
    from moetune.jobs.run import run_key

    key = run_key(model.spec, setup)
    return key.model_copy(update={"settings": key.settings.model_copy(update={"together": tset})})


def _tune(
    runs: Sequence[_Model],
    planned: TogetherPlan,
    *,
    start: Sequence[int],
    splits: Sequence[Sequence[float]],
    setup: DeviceSetup,
    goal: Goal,
    fill: Fill,
    on_event: Callable[[str], None],
    on_note: Callable[[str], None],
) -> TogetherRun:
    """Launch all, step the cheapest model where a device is over, until all are within."""
    ns = list(start)
    weights = [m.weight for m in planned.models]
    alone = [m.alone_score for m in planned.models]
    launches: list[TogetherLaunch] = []
    best_found: _Found | None = None
    scores: dict[tuple[int, int], float | None] = {}

    def score(i: int, n: int) -> float | None:
        if (i, n) not in scores:
            scores[(i, n)] = _score(runs[i], n, goal)
        return scores[(i, n)]

    for _ in range(MAX_LAUNCHES):
        placements = [m.placement(n, s) for m, n, s in zip(runs, ns, splits, strict=True)]
        predicted = [m.predicted(p, setup) for m, p in zip(runs, placements, strict=True)]
        sums_predicted = [sum(p[i] for p in predicted) for i in range(len(setup.devices))]
        status, message, each, speeds, logs = _launch_all(runs, placements, setup, fill, on_event)
        sums: list[int | None] = (
            _sums(each, len(setup.devices)) if each else [None] * len(setup.devices)
        )
        if status == "measured":
            status = "over" if _over(sums, sums_predicted, setup.budgets) else "ok"
        launch = TogetherLaunch(
            n_cpu_moe=list(ns),
            device_measured=sums,
            device_predicted=sums_predicted,
            status=status,
            message=message,
        )
        if status == "ok":
            launches.append(launch)
            on_note(describe_launch(launch, setup))
            best_found = (list(ns), each, speeds, logs)
            break
        chosen = _cheapest(runs, ns, weights, alone, score)
        if chosen is None:
            launches.append(launch)
            on_note(describe_launch(launch, setup))
            break
        launch = replace(launch, stepped=runs[chosen].name)
        launches.append(launch)
        on_note(describe_launch(launch, setup))
        ns[chosen] += 1
    converged = best_found is not None
    members = _members(
        runs,
        planned,
        start=start,
        splits=splits,
        setup=setup,
        found=best_found,
        ns=ns,
        score=score,
    )
    last = launches[-1] if launches else None
    return TogetherRun(
        together=True,
        set_id="",
        goal=goal.name,
        converged=converged,
        models=members,
        launches=launches,
        device_names=[d.name for d in setup.devices],
        device_budgets=list(setup.budgets),
        device_measured=list(last.device_measured) if last is not None and converged else [],
        notes=[] if converged else [f"not within the budgets after {len(launches)} launches"],
    )


def _cheapest(
    runs: Sequence[_Model],
    ns: Sequence[int],
    weights: Sequence[float],
    alone: Sequence[float | None],
    score: Callable[[int, int], float | None],
) -> int | None:
    """The model whose next block to the CPU costs least forecast speed: its weight times
    the forecast it loses, relative to its best alone (without a forecast: a block's share of
    its layers); None where every model has every block on the CPU."""
    costs: list[tuple[float, int]] = []
    for i, model in enumerate(runs):
        if ns[i] >= model.facts.n_layers:
            continue
        now, after, best = score(i, ns[i]), score(i, ns[i] + 1), alone[i]
        if now is not None and after is not None and best:
            cost = weights[i] * (now - after) / best
        else:
            cost = weights[i] / model.facts.n_layers
        costs.append((cost, i))
    return min(costs)[1] if costs else None


_Found = tuple[list[int], list[list[int | None]], list[tuple[float | None, ...]], list[str]]


def _members(
    runs: Sequence[_Model],
    planned: TogetherPlan,
    *,
    start: Sequence[int],
    splits: Sequence[Sequence[float]],
    setup: DeviceSetup,
    found: _Found | None,
    ns: Sequence[int],
    score: Callable[[int, int], float | None],
) -> list[TogetherMember]:
    """Each model at the launch that fit (``found``), else at the last N tried."""
    from moetune.jobs.run import command_for

    final = found[0] if found is not None else list(ns)
    members: list[TogetherMember] = []
    for i, (model, pm) in enumerate(zip(runs, planned.models, strict=True)):
        placement = model.placement(final[i], splits[i])
        member = TogetherMember(
            name=model.name,
            model=model.spec.model,
            weight=pm.weight,
            planned_n_cpu_moe=start[i],
            n_cpu_moe=final[i],
            tensor_split=list(splits[i]),
            device_predicted=model.predicted(placement, setup),
            device_measured=[None] * len(setup.devices),
            forecast_score=score(i, final[i]),
        )
        if found is not None:
            decode, prompt, ttft = found[2][i]
            member = replace(
                member,
                device_measured=list(found[1][i]),
                decode_tps=decode,
                prompt_tps=prompt,
                ttft_s=ttft,
                command=command_for(model.spec, placement),
                log_path=found[3][i],
            )
        members.append(member)
    return members


def describe_launch(launch: TogetherLaunch, setup: DeviceSetup) -> str:
    """One line per launch: each model's N, each device's measured sum against its budget."""
    ns = ", ".join(f"N={n}" for n in launch.n_cpu_moe)
    devices = "; ".join(
        f"{d.name} measured {'-' if m is None else f'{m / MIB:.1f}'} MiB "
        f"(predicted {p / MIB:.1f}) of {format_bytes(b)}"
        for d, m, p, b in zip(
            setup.devices,
            launch.device_measured,
            launch.device_predicted,
            setup.budgets,
            strict=True,
        )
    )
    stepped = f"; one more block of {launch.stepped} to the CPU" if launch.stepped else ""
    why = f" ({launch.message})" if launch.message else ""
    return f"together {ns}: {launch.status}{why}, {devices}{stepped}"


def _save(
    store: ProfileStore,
    keys: Sequence[TuneKey],
    result: TogetherRun,
    reused: Sequence[TunedProfile] | None,
    on_note: Callable[[str], None],
) -> TogetherRun:
    """Each model's winner as a tuned profile of the set (its measured peak its own
    process's use, with all loaded)."""
    from moetune.store.tuned import TunedFigures, new_profile

    saved: list[TogetherMember] = []
    for i, (key, member) in enumerate(zip(keys, result.models, strict=True)):
        measured = [m for m in member.device_measured if m is not None]
        figures = TunedFigures(
            vram_bytes=sum(measured) if measured else None,
            ttft_s=member.ttft_s,
            decode_tps=member.decode_tps,
            prompt_tps=member.prompt_tps,
            repeats=1 if member.decode_tps is not None else 0,
        )
        previous = reused[i] if reused is not None else None
        profile = new_profile(
            key,
            member.n_cpu_moe,
            figures,
            [key.llama_cpp.binary, *member.command[1:]],
            previous if result.reused_profiles and len(result.launches) == 1 else None,
            tensor_split=member.tensor_split or None,
        )
        try:
            path = store.save(profile)
        except BadValueError as exc:
            on_note(f"the tuned profile of {member.name} was not saved: {exc.message}")
            saved.append(member)
            continue
        saved.append(replace(member, profile_name=profile.name, profile_path=str(path)))
    return replace(result, models=saved)
