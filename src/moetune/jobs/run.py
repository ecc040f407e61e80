"""`moetune run` without the terminal: plan, then tune N with real launches, each one filling
the context and measuring the device; then, where the ``-ot`` form keeps more on the devices
than the converged N, one launch of it (planned within the budgets less the error N's launch
measured), kept where its measured peaks are within the budgets; reuse or save tuned profiles.
Returns data.

One launch (a trial): start llama-server at N, wait, warm up, fill the context, measure, stop.
Out of memory at load or during the fill counts as "too big" (status ``oom``); any other
failure of llama-server ends the run with one line: the cause from its log, and the log's path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.core.command import command_env, hf_argv
from moetune.core.devices import DeviceSpec, bufts, default_overhead
from moetune.core.facts import ModelFacts
from moetune.core.flags import pairs
from moetune.core.memory import MemoryEstimate, estimate
from moetune.core.placement import Placement
from moetune.core.planner import (
    OffloadPlan,
    _Search,
    counts_split,
    distribute,
    moved_blocks,
    override_beside,
    plan_n_cpu_moe,
)
from moetune.core.search import Attempt, Search, Split, best_attempt, tune
from moetune.errors import (
    BadValueError,
    DoesNotFitError,
    MoetuneError,
    OutOfMemoryError,
    ServerFailedError,
)
from moetune.jobs.launch import DeviceSetup, LaunchSpec
from moetune.jobs.measure import BenchRequests, Prompts, Repeats, measure_depths
from moetune.jobs.objective import merged, tune_for_goal, with_ubatch
from moetune.jobs.speed import PointSink, launch_points, machine_of, model_of, override_rules
from moetune.jobs.speed_from import machine_points
from moetune.jobs.status import NO_STATUS, StatusSink, probe_reader, sampling
from moetune.jobs.verify import dry_run_corrections, find_tool
from moetune.llamacpp.client import ServerClient, fill_context
from moetune.llamacpp.memprobe import LogProbe, MemoryProbe
from moetune.llamacpp.process import RunningServer
from moetune.record import record
from moetune.records.results import DepthResult, RecordedOverhead, RunResult
from moetune.store.tuned import (
    ProfileStore,
    TunedFigures,
    TunedProfile,
    TuneKey,
    TuneSettings,
    build_identity,
    device_identity,
    model_identity,
    new_profile,
)
from moetune.units import MIB, Sizes, format_bytes, tokens_arg

if TYPE_CHECKING:
    from moetune.core.goal import Goal
    from moetune.records.speed import SpeedPoint

MAX_LAUNCHES = 12
Event = Callable[[str], None]


@record(frozen=True)
class Fill:
    """What each trial asks of the server: a fill of the context, then (where it fits) timed
    requests of a short prompt, each generating ``speed_tokens``."""

    tokens: int | None = None  # default: the whole context
    n_predict: int = 32
    repeats: Repeats = field(default_factory=Repeats)  # the timed requests, as bench's
    speed_tokens: int = 64
    speed_depth: int = 64  # prompt tokens of the timed requests


def command_for(spec: LaunchSpec, placement: Placement) -> list[str]:
    """The llama-server command of a tuned placement, as a user would type it."""
    command = ["llama-server", *spec.args(placement)]
    return hf_argv(command, spec.hf, spec.hf_sibling) if spec.hf else command


def placement_for(
    spec: LaunchSpec, n_cpu_moe: int, override_tensor: list[str], tensor_split: list[float]
) -> Placement | None:
    """What a launch (an attempt, a saved profile) places: its ``-ot`` rules (None where one
    names a buffer type none of the devices has), else ``--n-cpu-moe``; at its ``-ts``
    split."""
    split = tuple(tensor_split)
    if not override_tensor:
        return Placement.with_n_cpu_moe(n_cpu_moe, tensor_split=split)
    rules = override_rules(override_tensor, spec.devices)
    return None if rules is None else Placement(overrides=rules, tensor_split=split)


def attempt_placement(spec: LaunchSpec, attempt: Attempt) -> Placement | None:
    """What ``attempt`` launched (``placement_for``)."""
    return placement_for(spec, attempt.n_cpu_moe, attempt.override_tensor, attempt.tensor_split)


def form(n_cpu_moe: int, override_tensor: list[str]) -> str:
    """How a launch is named: ``N=3``, or ``-ot (beside N=3)`` (the ``-ot`` form)."""
    return f"-ot (beside N={n_cpu_moe})" if override_tensor else f"N={n_cpu_moe}"


# --- one trial ---------------------------------------------------------------------------------


def _measure(server: RunningServer, probe: MemoryProbe, overhead: int) -> int | None:
    figure = probe.device_bytes(server)
    if figure is None or probe.includes_overhead:
        return figure
    return figure + overhead


def measured_overhead(
    server: RunningServer, probe: MemoryProbe, device: DeviceSpec, measured: int | None
) -> int | None:
    """The device's runtime overhead, where ``probe`` saw the process's whole use of it
    (``measured``, NVML): that minus llama.cpp's own buffers there (model, KV, recurrent
    state, compute: its log's lines for the device). None where the probe sees the buffers
    alone, or either figure is missing."""
    if measured is None or not probe.includes_overhead:
        return None
    buffers = LogProbe(device.name, device.buft).device_bytes(server)
    return None if buffers is None or buffers > measured else measured - buffers


def _status(
    measured: list[int | None], predicted: tuple[int, ...], budgets: tuple[int, ...]
) -> str:
    """ok when every device is within its budget (a device given no layers and no figure
    counts as empty), else over."""
    for figure, guess, budget in zip(measured, predicted, budgets, strict=True):
        if figure is None and guess > 0:
            return "over"
        if figure is not None and figure > budget:
            return "over"
    return "ok"


def _oom(
    n: int,
    predicted: tuple[int, ...],
    server: RunningServer,
    message: str,
    *,
    split: list[float],
    rules: list[str],
) -> Attempt:
    return Attempt(
        n_cpu_moe=n,
        override_tensor=rules,
        predicted_bytes=sum(predicted),
        measured_bytes=None,
        status="oom",
        log_path=str(server.log_path),
        message=message,
        tensor_split=split,
        device_predicted=list(predicted),
        device_measured=[None] * len(predicted),
    )


def run_trial(
    spec: LaunchSpec,
    setup: DeviceSetup,
    n: int,
    *,
    predicted: tuple[int, ...],
    fill: Fill,
    on_event: Event,
    counts: tuple[int, ...] = (),
    live: StatusSink = NO_STATUS,
    keep: PointSink = lambda points: None,
    placement: Placement | None = None,
) -> Attempt:
    """Launch at ``--n-cpu-moe n`` (and ``-ts counts`` on several devices), or at
    ``placement`` (the ``-ot`` form planned beside N), fill the context, measure each
    device, stop the server; each phase and the devices' memory (sampled while the server
    runs) told to ``live``, the speeds measured to ``keep``."""
    guesses = predicted
    if placement is None:
        placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    split = list(placement.tensor_split)
    rules = (
        []
        if placement.n_cpu_moe is not None
        else [o.arg(bufts(spec.devices)) for o in placement.overrides]
    )
    label = form(n, rules)
    on_event(f"{label}: starting llama-server")
    args = spec.args(placement)
    server = spec.start(args)
    live.phase("loading", subject=label)
    names = [device.name for device in setup.devices]
    with server, sampling(probe_reader(setup.probes, names, server), live):
        try:
            with ServerClient(server.url) as client:
                client.wait_ready(spec.ready_timeout_s, server.check_alive)
                live.phase("warming up")
                client.complete("Hello", 4, stream=False)  # warm-up: first-call costs
                live.phase("filling")
                done = fill_context(
                    client,
                    fill.tokens or spec.settings.n_ctx,
                    fill.n_predict,
                    on_progress=live.progress,
                )
                measured = [
                    _measure(server, probe, device.overhead_bytes)
                    for probe, device in zip(setup.probes, setup.devices, strict=True)
                ]
                overheads = [
                    measured_overhead(server, probe, device, figure)
                    for probe, device, figure in zip(
                        setup.probes, setup.devices, measured, strict=True
                    )
                ]
                status = _status(measured, guesses, setup.budgets)
                speed = _speed(client, fill, live) if status == "ok" else None
        except OutOfMemoryError as exc:
            return _oom(n, guesses, server, exc.message.splitlines()[0], split=split, rules=rules)
        except ServerFailedError:
            if (line := server.failure()) is not None:
                return _oom(n, guesses, server, line, split=split, rules=rules)
            raise
    keep(
        launch_points(
            spec.model, args, setup, fill=done, speed=speed, env=command_env(spec.settings)
        )
    )
    total = None if any(m is None for m in measured) else sum(m or 0 for m in measured)
    attempt = Attempt(
        n_cpu_moe=n,
        predicted_bytes=sum(guesses),
        measured_bytes=total,
        status=status,
        ttft_s=done.ttft_s,
        prompt_tps=done.prompt_per_second,
        decode_tps=done.predicted_per_second,  # the server's timings, as bench's figures
        log_path=str(server.log_path),
        tensor_split=split,
        device_predicted=list(guesses),
        device_measured=measured,
        device_overhead=overheads if any(o is not None for o in overheads) else [],
        override_tensor=rules,
    )
    if speed is None:
        return attempt
    decode = speed.decode_tps  # the server's timings: bench's decode tok/s
    return replace(
        attempt,
        decode_tps=decode.median,
        decode_tps_min=decode.min,
        decode_tps_max=decode.max,
        repeats=len(speed.samples),
    )


def _speed(client: ServerClient, fill: Fill, live: StatusSink) -> DepthResult:
    """Decode speed of the configuration: timed requests repeated as bench repeats them
    (median, range)."""
    workload = BenchRequests((fill.speed_depth,), fill.repeats, fill.speed_tokens, "completion")
    results: list[DepthResult] = []
    measure_depths(
        client,
        workload,
        Prompts("completion"),
        config="run",
        probe=lambda: None,
        into=results,
        live=live,
    )
    return results[0]


# --- tuning ------------------------------------------------------------------------------------


@record(frozen=True)
class Progress:
    """Where a run reports what it does: steps (``on_event``), each attempt, notes to keep,
    and the live status of each launch (phases, fill progress, device memory)."""

    on_event: Event = lambda text: None
    on_attempt: Callable[[Attempt], None] = lambda attempt: None
    on_note: Event = lambda text: None
    live: StatusSink = NO_STATUS
    keep: PointSink = lambda points: None  # each launch's measured speeds (jobs/speed.py)


def _limiting(best: Attempt | None, setup: DeviceSetup) -> str | None:
    """The device with the least room left at the best attempt (what stopped the tuning)."""
    if best is None or not setup.multi:
        return None
    figures = zip(best.device_measured, best.device_predicted, setup.budgets, strict=True)
    rooms = [budget - (m if m is not None else p) for m, p, budget in figures]
    return setup.devices[rooms.index(min(rooms))].name


def _result(
    spec: LaunchSpec,
    setup: DeviceSetup,
    planned: int,
    attempts: list[Attempt],
    *,
    reused: bool = False,
    override_gain: int = 0,
) -> RunResult:
    best = best_attempt(attempts)
    placement = None if best is None else attempt_placement(spec, best)
    names = [d.name for d in setup.devices] if setup.multi else []
    return RunResult(
        model=spec.model,
        device=", ".join(names) or setup.device.name,
        probe="; ".join(p.name for p in setup.probes),
        target_bytes=sum(setup.budgets),
        settings=spec.settings,
        planned_n_cpu_moe=planned,
        attempts=attempts,
        best=best,
        reused_profile=reused and best is not None,
        command=command_for(spec, placement) if placement is not None else [],
        device_names=names,
        device_budgets=list(setup.budgets) if names else [],
        limiting_device=_limiting(best, setup),
        override_gain_bytes=override_gain,
    )


def tune_model(
    facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup, *, fill: Fill, progress: Progress
) -> RunResult:
    """Plan, then launch llama-server until the smallest N whose split keeps every device
    within its budget is confirmed by N-1 (at its best split) being over."""
    if not facts.is_moe:
        raise BadValueError("a dense model has no experts to tune: use `moetune plan`")
    splits = _Splits(facts, setup, spec)
    try:
        start = plan_n_cpu_moe(facts, setup.device_budgets, spec.settings, extras=spec.extras)
        seen = _checked_start(facts, spec, setup, start.placement, progress)
        if any(seen):  # start from llama.cpp's own figures where they differ
            budgets = tuple(b - c for b, c in zip(setup.budgets, seen, strict=True))
            corrected = setup.device_budgets.with_budgets(budgets)
            start = plan_n_cpu_moe(facts, corrected, spec.settings, extras=spec.extras)
        planned = start.placement.n_cpu_moe or 0
    except DoesNotFitError:  # the prediction may be pessimistic: let a measurement decide
        planned = facts.n_layers
    probes = "; ".join(p.name for p in setup.probes)
    label = "device" if len(setup.devices) == 1 else "devices"
    progress.on_event(
        f"{label} {', '.join(d.name for d in setup.devices)}, memory probe: {probes}, "
        f"plan: --n-cpu-moe {planned}"
    )
    search = Search(facts.n_layers, setup.budgets, splits.plan, splits.place)

    def measure(n: int, split: Split, placement: Placement | None = None) -> Attempt:
        attempt = run_trial(
            spec,
            setup,
            n,
            predicted=split[1],
            counts=split[0],
            fill=fill,
            on_event=progress.on_event,
            live=progress.live,
            keep=progress.keep,
            placement=placement,
        )
        progress.on_attempt(attempt)
        return attempt

    attempts = tune(search, planned, measure, MAX_LAUNCHES)
    best = best_attempt(attempts)
    beside = None if best is None else override_of(facts, spec, setup, best)
    if best is None or beside is None:
        return _result(spec, setup, planned, attempts)
    alt, gain = beside
    where = "the devices" if setup.multi else "the device"
    progress.on_event(
        f"the -ot form keeps {format_bytes(gain)} more on {where} than --n-cpu-moe "
        f"{best.n_cpu_moe}: one launch to measure it"
    )
    counts = tuple(int(c) for c in alt.placement.tensor_split)
    attempts.append(measure(best.n_cpu_moe, (counts, _peaks(alt.memory)), alt.placement))
    return _result(spec, setup, planned, attempts, override_gain=gain)


def override_of(
    facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup, best: Attempt
) -> tuple[OffloadPlan, int] | None:
    """The ``-ot`` form beside the converged ``best`` (``--n-cpu-moe N`` at its split) and
    the weights it keeps on the devices beyond it, planned within each device's budget less
    what N's launch measured beyond its prediction; None where it keeps nothing more
    (``core.planner.override_beside``, as a plan decides which form it prints first)."""
    placement = Placement.with_n_cpu_moe(best.n_cpu_moe, tensor_split=tuple(best.tensor_split))
    memory = estimate(facts, placement, spec.settings, setup.devices, extras=spec.extras)
    main = OffloadPlan(placement, memory, tuple(moved_blocks(facts, best.n_cpu_moe)))
    figures = zip(best.device_predicted, best.device_measured, strict=True)
    errors = [0 if m is None else m - p for p, m in figures]
    budgets = tuple(b - e for b, e in zip(setup.budgets, errors, strict=True))
    target = setup.device_budgets.with_budgets(budgets)
    alt = override_beside(facts, target, spec.settings, main, extras=spec.extras)
    if alt is None:
        return None
    return alt, alt.memory.gpu_weights_bytes - memory.gpu_weights_bytes


class _Splits:
    """The split of each N over the devices, with each device's measured error counted."""

    def __init__(self, facts: ModelFacts, setup: DeviceSetup, spec: LaunchSpec) -> None:
        self.facts, self.setup, self.settings = facts, setup, spec.settings
        self.extras = spec.extras
        self._searches: dict[tuple[int, ...], _Search] = {}

    def _search(self, errors: tuple[int, ...]) -> _Search:
        found = self._searches.get(errors)
        if found is None:
            budgets = tuple(b - e for b, e in zip(self.setup.budgets, errors, strict=True))
            found = _Search(
                self.facts,
                self.setup.device_budgets.with_budgets(budgets),
                self.settings,
                extras=self.extras,
            )
            self._searches[errors] = found
        return found

    def plan(self, n: int, errors: tuple[int, ...]) -> Split | None:
        blocks = moved_blocks(self.facts, n)
        found = distribute(self._search(errors), blocks, overridden=n > 0)
        return None if found is None else (found[0], _peaks(found[1]))

    def place(self, n: int, errors: tuple[int, ...]) -> Split:
        blocks = moved_blocks(self.facts, n)
        found = distribute(self._search(errors), blocks, overridden=n > 0, best_effort=True)
        assert found is not None
        return found[0], _peaks(found[1])


def _checked_start(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    placement: Placement,
    progress: Progress,
) -> tuple[int, ...]:
    """llama.cpp's dry run (llama-fit-params, where it is installed) of the planned start:
    what it finds on each device beyond the prediction (0 where they agree or there is no
    tool); the tuning starts from the checked plan."""
    zeros = (0,) * len(setup.devices)
    tool = find_tool(spec.binary)
    if tool is None:
        return zeros
    try:
        found = dry_run_corrections(
            facts, spec.settings, placement, setup.devices, tool=tool, args=spec.args(placement)
        )
    except MoetuneError as exc:  # a bonus: the launches measure anyway (and tell the cause)
        progress.on_event(f"llama.cpp's dry run of the plan failed: {exc.message}")
        return zeros
    for device, delta in zip(setup.devices, found, strict=True):
        if delta:
            progress.on_note(
                f"llama.cpp's dry run finds {delta / MIB:+.0f} MiB on {device.name}: "
                "the tuning starts from its figure"
            )
    return found


def _peaks(memory: MemoryEstimate) -> tuple[int, ...]:
    return tuple(d.total_bytes for d in memory.devices)


def describe(attempt: Attempt) -> str:
    """One line per attempt, for progress output."""
    measured = "-" if attempt.measured_bytes is None else f"{attempt.measured_bytes / MIB:.1f}"
    return (
        f"{form(attempt.n_cpu_moe, attempt.override_tensor)}: {attempt.status}, "
        f"measured {measured} MiB, "
        f"predicted {attempt.predicted_bytes / MIB:.1f} MiB"
    )


# --- tuned profiles: reuse a saved winner, save a new one --------------------------------------


def tune_command(spec: LaunchSpec, setup: DeviceSetup) -> list[str]:
    """The ``moetune run`` that tunes this again, as typed: the server, the target, the
    context and cache types, the overhead, and the arguments after ``--``."""
    s = spec.settings
    command = [
        "moetune",
        "run",
        spec.hf or spec.model,
        "--server",
        str(spec.binary),
        "--target-vram",
        Sizes(setup.budgets).arg,
        "--ctx",
        tokens_arg(s.n_ctx),
        "--cache-type",
        s.type_k,
    ]
    costs = tuple(d.overhead_bytes for d in setup.devices)
    if any(c != default_overhead(d.kind) for c, d in zip(costs, setup.devices, strict=True)):
        command += ["--overhead", Sizes(costs).arg]
    if s.streams is not None:
        command += ["--parallel", str(s.streams)]
    pass_through = (
        hf_argv(spec.pass_through, spec.hf, spec.hf_sibling) if spec.hf else list(spec.pass_through)
    )
    # the RPC servers as moetune's own --rpc (how they were typed; run puts them after --)
    rest: list[str] = []
    for pair in pairs(pass_through):
        if pair.is_("--rpc") and pair.value and not pair.missing:
            command += ["--rpc", pair.value]
        else:
            rest += pair.words()
    return [*command, "--", *rest] if rest else command


def run_key(spec: LaunchSpec, setup: DeviceSetup, goal: Goal | None = None) -> TuneKey:
    """What this run's result depends on: model file, device, llama.cpp build, settings, and
    the objective it was tuned for."""
    s = spec.settings
    settings = TuneSettings(
        n_ctx=s.n_ctx,
        type_k=s.type_k,
        type_v=s.type_v,
        target_bytes=setup.budgets[0],
        extra_args=list(spec.pass_through),
        command=tune_command(spec, setup),
        device_targets=list(setup.budgets) if setup.multi else [],
        objective=goal.name if goal is not None else None,
        op_offload_min_batch=s.op_offload_min_batch,
        parallel=s.streams,
    )
    devices = tuple(device_identity(d) for d in setup.listed) if setup.multi else ()
    return TuneKey(
        model=model_identity(spec.model),
        gpu=device_identity(setup.device),
        llama_cpp=build_identity(setup.info),
        settings=settings,
        devices=devices,
    )


def confirm_n(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    n: int,
    *,
    fill: Fill,
    progress: Progress,
    counts: tuple[int, ...] = (),
    placement: Placement | None = None,
) -> RunResult:
    """One launch at ``--n-cpu-moe n`` (and ``-ts counts``: a saved profile's), or at
    ``placement`` (a saved ``-ot`` form, beside ``n``), measured like a tuning attempt."""
    if placement is None:
        placement = Placement.with_n_cpu_moe(n, tensor_split=counts_split(counts))
    memory = estimate(facts, placement, spec.settings, setup.devices, extras=spec.extras)
    predicted = _peaks(memory)
    attempt = run_trial(
        spec,
        setup,
        n,
        predicted=predicted,
        fill=fill,
        on_event=progress.on_event,
        live=progress.live,
        keep=progress.keep,
        placement=placement,
    )
    progress.on_attempt(attempt)
    return _result(spec, setup, n, [attempt], reused=True)


def save_winner(
    store: ProfileStore,
    key: TuneKey,
    result: RunResult,
    previous: TunedProfile | None,
    on_note: Callable[[str], None],
    *,
    name: str | None = None,
) -> RunResult:
    """Save the best attempt as a tuned profile (under ``name``: the one the store matched,
    default profile_name's); the result, naming it. A profile that cannot be written (its
    name taken by a folder, a full disk) is said in a note, and the result is reported all
    the same: the launches are not lost with it."""
    best = result.best
    if best is None:
        return result
    measured = TunedFigures(
        vram_bytes=best.measured_bytes,
        ttft_s=best.ttft_s,
        decode_tps=best.decode_tps,
        decode_tps_min=best.decode_tps_min,
        decode_tps_max=best.decode_tps_max,
        repeats=best.repeats,
        prompt_tps=best.prompt_tps,
    )
    command = [key.llama_cpp.binary, *result.command[1:]]
    profile = new_profile(
        key,
        best.n_cpu_moe,
        measured,
        command,
        previous,
        tensor_split=best.tensor_split,
        n_ubatch=best.n_ubatch,
        name=name,
        override_tensor=best.override_tensor,
    )
    try:
        path = store.save(profile)
    except BadValueError as exc:
        on_note(f"the tuned profile was not saved: {exc.message}")
        return result
    return result.model_copy(update={"profile_name": profile.name, "profile_path": str(path)})


def record_overheads(
    spec: LaunchSpec, setup: DeviceSetup, result: RunResult, on_note: Event
) -> RunResult:
    """Each CUDA device's runtime overhead measured at the best attempt (NVML's figure for
    the server minus llama.cpp's buffers, after the context was filled), recorded in the
    user's own hardware profile of the card (store/hardware.py keeps the largest), so that
    the next plan for the card counts it; said in a note. A card without a profile, or a
    profile that cannot be written, is said and changes nothing."""
    best = result.best
    if best is None or not best.device_overhead:
        return result
    import datetime
    from math import ceil

    from moetune.llamacpp.memprobe import ProcessProbe
    from moetune.store.hardware import (
        match_detected,
        record_runtime_overhead,
        scan_hardware_profiles,
    )
    from moetune.store.paths import user_hardware_dir

    profiles, _ = scan_hardware_profiles()
    recorded: list[RecordedOverhead] = []
    for i, (device, probe) in enumerate(zip(setup.devices, setup.probes, strict=True)):
        overhead = best.device_overhead[i]
        if overhead is None or not isinstance(probe, ProcessProbe):
            continue
        gpu = next((g for g in probe.gpus.gpus() if g.index == probe.gpu_index), None)
        if gpu is None:
            continue
        found = RecordedOverhead(device=device.name, gpu=gpu.name, measured_bytes=overhead)
        mib = ceil(overhead / MIB)
        used = best.device_measured[i] or 0
        profile = match_detected(gpu.name, gpu.vram_total_bytes, profiles)
        if profile is None:
            on_note(
                f"{device.name} ({gpu.name}): runtime overhead measured {mib} MiB; no hardware "
                f"profile of this card to record it in (add one as "
                f"{user_hardware_dir() / 'ID.toml'}, see profiles/README.md)"
            )
            recorded.append(found)
            continue
        how = (
            f"moetune run on {datetime.date.today().isoformat()}: llama-server used "
            f"{used / MIB:.0f} MiB of {device.name} ({gpu.name}, NVML), its buffers "
            f"{(used - overhead) / MIB:.0f} MiB, after filling {spec.settings.n_ctx} tokens of "
            f"{Path(spec.model).name}; llama.cpp {_build(setup)}"
        )
        try:
            path, kept, written = record_runtime_overhead(profile, mib, how)
        except BadValueError as exc:
            on_note(f"the measured runtime overhead was not recorded: {exc.message}")
            recorded.append(found)
            continue
        on_note(
            f"{device.name} ({gpu.name}): runtime overhead measured {mib} MiB"
            + (
                f", recorded in {path}: the next plan for this card counts it"
                if written
                else f"; {path} keeps the larger {kept} MiB measured before"
            )
        )
        recorded.append(
            found.model_copy(
                update={
                    "profile": profile.id,
                    "path": str(path),
                    "kept_mib": kept,
                    "recorded": written,
                }
            )
        )
    return result.model_copy(update={"overheads": recorded})


def _build(setup: DeviceSetup) -> str:
    """The llama.cpp build a run used: ``build 11434 (0.6.0-dev)``, or what is known."""
    info = setup.info
    if info.build_number:
        return f"build {info.build_number}" + (f" ({info.version})" if info.version else "")
    return info.version or "of an unknown build"


def tune_with_profiles(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    *,
    retune: bool,
    save: bool,
    fill: Fill,
    progress: Progress,
    goal: Goal | None = None,
    store: ProfileStore | None = None,
) -> RunResult:
    """Launch a matching saved profile once to confirm it, else tune (and with ``goal``,
    measure the forecast's best candidates for it); save the winner (in ``store``, default
    the user's tuned profiles). A ``goal`` whose workload does not fit the context is
    refused before any launch."""
    if goal is not None:
        from moetune.core.goal import check_workload

        check_workload(goal.workload, spec.settings)
    if store is None:
        from moetune.store.tuned import ProfileStore

        store = ProfileStore()
    key = run_key(spec, setup, goal)
    match = store.match(key)
    for note in match.notes:
        progress.on_note(note)
    result: RunResult | None = None
    if match.profile is not None and retune:
        progress.on_note(f"--retune: tuning again (replaces tuned profile {match.name})")
    elif match.profile is not None:
        result = _confirm_saved(
            facts, spec, setup, match.profile, match.name, fill=fill, progress=progress
        )
    if result is None and goal is None:
        result = tune_model(facts, spec, setup, fill=fill, progress=progress)
    elif result is None:
        assert goal is not None
        result = _tune_for(facts, spec, setup, goal, fill=fill, progress=progress)
    if not save:
        return result
    result = record_overheads(spec, setup, result, progress.on_note)
    previous = match.profile if result.reused_profile else None
    return save_winner(store, key, result, previous, progress.on_note, name=match.name)


def _confirm_saved(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    profile: TunedProfile,
    name: str | None,
    *,
    fill: Fill,
    progress: Progress,
) -> RunResult | None:
    """One launch of a matching saved profile's placement (its -ot rules, or --n-cpu-moe N;
    its -ts and -ub); None where it no longer fits (or names a device not here): tune again."""
    saved = profile.placement
    n = saved.n_cpu_moe or 0
    n_ubatch = saved.n_ubatch
    at = spec if n_ubatch is None else with_ubatch(spec, n_ubatch)
    shown = (
        "-ot " + ",".join(saved.override_tensor) if saved.override_tensor else f"--n-cpu-moe {n}"
    ) + ("" if n_ubatch is None else f" -ub {n_ubatch}")
    placement = placement_for(spec, n, saved.override_tensor, saved.tensor_split)
    if placement is None:
        progress.on_note(f"tuned profile {name}'s -ot rules name a device not here: tuning again")
        return None
    progress.on_note(f"tuned profile {name} matches: {shown}, one launch to confirm")
    result = confirm_n(facts, at, setup, n, fill=fill, progress=progress, placement=placement)
    if result.best is None:
        progress.on_note(f"{shown} no longer fits ({result.attempts[0].status}): tuning again")
        return None
    if n_ubatch is not None:
        return result.model_copy(update={"best": replace(result.best, n_ubatch=n_ubatch)})
    return result


def _tune_for(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    goal: Goal,
    *,
    fill: Fill,
    progress: Progress,
) -> RunResult:
    """Tune as run does, then measure the forecast's best candidates for ``goal`` (on the
    points the tuning kept and those kept on this machine, of every model)."""
    measured: list[SpeedPoint] = []

    def keep(points: list[SpeedPoint]) -> None:
        measured.extend(points)
        progress.keep(points)

    tuned = tune_model(facts, spec, setup, fill=fill, progress=replace(progress, keep=keep))
    if tuned.best is None:
        return tuned
    known = model_of(spec.model)
    kept = machine_points(machine_of(setup), known, progress.on_note)
    zeros = (0,) * len(setup.devices)

    def measure_at(at: LaunchSpec, n: int) -> tuple[RunResult, list[SpeedPoint]]:
        added: list[SpeedPoint] = []

        def keep_added(points: list[SpeedPoint]) -> None:
            added.extend(points)
            progress.keep(points)

        counts = _Splits(facts, setup, at).place(n, zeros)[0] if setup.multi else ()
        one = confirm_n(
            facts,
            at,
            setup,
            n,
            fill=fill,
            progress=replace(progress, keep=keep_added),
            counts=counts,
        )
        return one, added

    progress.on_event(f"--objective {goal.name}: measuring the forecast's best candidates")
    return tune_for_goal(
        facts,
        spec,
        setup,
        tuned,
        goal,
        points=merged(kept, measured),
        n_prompt=fill.tokens or spec.settings.n_ctx,
        measure_at=measure_at,
    )


def keep_serving(
    spec: LaunchSpec,
    best: Attempt,
    *,
    loading: Callable[[], AbstractContextManager[object]],
    on_ready: Event,
    on_stop: Event,
) -> None:
    """``run --keep``: the best configuration (its ``-ot`` form or ``--n-cpu-moe``, at its
    split), in the foreground until Ctrl-C."""
    placement = attempt_placement(spec, best)
    assert placement is not None  # the run launched it on these devices
    shown = "the -ot form" if best.override_tensor else f"--n-cpu-moe {best.n_cpu_moe}"
    with spec.start(spec.args(placement)) as running:
        with ServerClient(running.url) as client, loading():
            client.wait_ready(spec.ready_timeout_s, running.check_alive)
        on_ready(f"serving at {running.url} ({shown}); Ctrl-C to stop")
        try:
            while running.check_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            on_stop("stopping llama-server")
