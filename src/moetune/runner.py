"""`moetune run` without the terminal: find llama-server and its device, choose the memory
probe, plan, and tune N with real launches. Returns data; cli.py renders it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from moetune.errors import BadValueError, DoesNotFitError, NoGpuError
from moetune.hardware import GpuProbe
from moetune.memory import Settings, estimate_from_split
from moetune.memprobe import MemoryProbe, choose_probe
from moetune.model import ModelFacts
from moetune.placement import Placement, split_weights
from moetune.planner import n_cpu_moe_split, plan_n_cpu_moe
from moetune.profiles import (
    Measured,
    ProfileStore,
    TunedProfile,
    TuneKey,
    TuneSettings,
    build_identity,
    device_identity,
    model_identity,
    new_profile,
)
from moetune.server import Device, ServerInfo, server_info
from moetune.trial import TrialConfig, conflicting_args, run_trial, trial_args
from moetune.tuner import Attempt, Search, best_attempt, tune
from moetune.units import MIB

MAX_LAUNCHES = 12


class RunResult(BaseModel):
    model: str
    device: str
    probe: str
    target_bytes: int
    settings: Settings
    planned_n_cpu_moe: int
    attempts: list[Attempt]
    best: Attempt | None
    command: list[str]
    profile_name: str | None = None  # the tuned profile saved (or confirmed) by this run
    profile_path: str | None = None
    reused_profile: bool = False  # launched from a saved profile instead of tuning


@dataclass(frozen=True)
class RunSetup:
    """What a run learns before its first launch: the server, its device, probe and target."""

    info: ServerInfo
    device: Device
    probe: MemoryProbe
    target_bytes: int


def rpc_endpoints(extra: Sequence[str]) -> list[str]:
    """The ``--rpc host:port,...`` servers among the pass-through arguments."""
    found: list[str] = []
    for index, arg in enumerate(extra):
        if arg == "--rpc" and index + 1 < len(extra):
            found += extra[index + 1].split(",")
        elif arg.startswith("--rpc="):
            found += arg.split("=", 1)[1].split(",")
    return found


def offload_device(binary: Path, extra: Sequence[str]) -> Device:
    """The device llama-server offloads to first (its first non-CPU device)."""
    return first_device(server_info(binary, rpc=rpc_endpoints(extra)))


def first_device(info: ServerInfo) -> Device:
    """The first non-CPU device llama-server lists, or NoGpuError."""
    devices = info.devices
    if not devices:
        raise NoGpuError(
            "llama-server sees no GPU: everything would run on the CPU",
            hint="run on a machine with a GPU, or pass an offload device after --, "
            "e.g. -- --rpc HOST:PORT",
        )
    return devices[0]


def check_extra(extra: Sequence[str]) -> None:
    if clashes := conflicting_args(extra):
        raise BadValueError(
            f"{' '.join(clashes)} after -- conflicts with the placement moetune tunes",
            hint="drop it: moetune sets -ngl, --n-cpu-moe, -ot, -c, -ctk/-ctv, -fa and --fit",
        )


def predictor(facts: ModelFacts, settings: Settings) -> Callable[[int], int]:
    base = split_weights(facts, Placement())
    cache: dict[int, int] = {}

    def predict(n: int) -> int:
        if n not in cache:
            split = n_cpu_moe_split(facts, base, n)
            cache[n] = estimate_from_split(facts, split, settings).gpu_bytes
        return cache[n]

    return predict


def prepare_run(
    config: TrialConfig, *, target_bytes: int | None, headroom_bytes: int, gpus: GpuProbe | None
) -> RunSetup:
    """Check the pass-through arguments, ask llama-server for its device, fix the target."""
    check_extra(config.extra_args)
    info = server_info(config.binary, rpc=rpc_endpoints(config.extra_args))
    device = first_device(info)
    probe: MemoryProbe = choose_probe(device.name, gpus)
    if target_bytes is None:
        if device.total_bytes is None:
            raise BadValueError(f"{device.name} does not report its size: pass --target-vram")
        target_bytes = device.total_bytes - headroom_bytes
    return RunSetup(info=info, device=device, probe=probe, target_bytes=target_bytes)


def tune_model(
    facts: ModelFacts,
    config: TrialConfig,
    *,
    target_bytes: int | None,
    headroom_bytes: int,
    gpus: GpuProbe | None,
    on_event: Callable[[str], None],
    on_attempt: Callable[[Attempt], None] = lambda attempt: None,
    setup: RunSetup | None = None,
) -> RunResult:
    """Plan, then launch llama-server until the smallest N within the target is confirmed.

    ``setup`` (from ``prepare_run``) skips asking llama-server again; the target and headroom
    given here are then ignored in favour of its target.
    """
    if setup is None:
        setup = prepare_run(config, target_bytes=target_bytes, headroom_bytes=headroom_bytes,
                            gpus=gpus)  # fmt: skip
    device, probe, target_bytes = setup.device, setup.probe, setup.target_bytes
    settings = config.settings
    if not facts.is_moe:
        raise BadValueError("a dense model has no experts to tune: use `moetune plan`")
    try:
        planned = plan_n_cpu_moe(facts, target_bytes, settings).placement.n_cpu_moe or 0
    except DoesNotFitError:  # the prediction may be pessimistic: let a measurement decide
        planned = facts.n_layers
    predict = predictor(facts, settings)
    search = Search(n_max=facts.n_layers, target_bytes=target_bytes, predict=predict)
    on_event(f"device {device.name}, memory probe: {probe.name}, plan: --n-cpu-moe {planned}")

    def measure(n: int) -> Attempt:
        attempt = run_trial(
            config,
            n,
            predicted=predict(n),
            target_bytes=target_bytes,
            probe=probe,
            on_event=on_event,
        )
        on_attempt(attempt)
        return attempt

    attempts = tune(search, planned, measure, MAX_LAUNCHES)
    best = best_attempt(attempts)
    command = ["llama-server", *trial_args(config, best.n_cpu_moe)] if best else []
    return RunResult(
        model=config.model, device=device.name, probe=probe.name, target_bytes=target_bytes,
        settings=settings, planned_n_cpu_moe=planned, attempts=attempts, best=best,
        command=command,
    )  # fmt: skip


def describe(attempt: Attempt) -> str:
    """One line per attempt, for progress output."""
    measured = "-" if attempt.measured_bytes is None else f"{attempt.measured_bytes / MIB:.1f}"
    return (
        f"N={attempt.n_cpu_moe}: {attempt.status}, measured {measured} MiB, "
        f"predicted {attempt.predicted_bytes / MIB:.1f} MiB"
    )


# --- tuned profiles: reuse a saved winner, save a new one --------------------------------------

Note = Callable[[str], None]


def run_key(config: TrialConfig, setup: RunSetup) -> TuneKey:
    """What this run's result depends on: model file, device, llama.cpp build, settings."""
    s = config.settings
    settings = TuneSettings(n_ctx=s.n_ctx, type_k=s.type_k, type_v=s.type_v,
                            target_bytes=setup.target_bytes,
                            extra_args=list(config.extra_args))  # fmt: skip
    return TuneKey(model=model_identity(config.model), gpu=device_identity(setup.device),
                   llama_cpp=build_identity(setup.info), settings=settings)  # fmt: skip


def confirm_n(facts: ModelFacts, config: TrialConfig, setup: RunSetup, n: int, *,
              on_event: Note, on_attempt: Callable[[Attempt], None]) -> RunResult:  # fmt: skip
    """One launch at ``--n-cpu-moe n`` (a saved profile's), measured like a tuning attempt."""
    predicted = predictor(facts, config.settings)(n)
    attempt = run_trial(config, n, predicted=predicted, target_bytes=setup.target_bytes,
                        probe=setup.probe, on_event=on_event)  # fmt: skip
    on_attempt(attempt)
    best = attempt if attempt.fits else None
    return RunResult(
        model=config.model, device=setup.device.name, probe=setup.probe.name,
        target_bytes=setup.target_bytes, settings=config.settings, planned_n_cpu_moe=n,
        attempts=[attempt], best=best, reused_profile=best is not None,
        command=["llama-server", *trial_args(config, n)] if best else [],
    )  # fmt: skip


def save_winner(store: ProfileStore, key: TuneKey, result: RunResult,
                previous: TunedProfile | None) -> RunResult:  # fmt: skip
    """Save the best attempt as a tuned profile; the result, naming it."""
    best = result.best
    if best is None:
        return result
    measured = Measured(vram_bytes=best.measured_bytes, ttft_s=best.ttft_s,
                        decode_tps=best.decode_tps, prompt_tps=best.prompt_tps)  # fmt: skip
    command = [key.llama_cpp.binary, *result.command[1:]]
    profile = new_profile(key, best.n_cpu_moe, measured, command, previous)
    path = store.save(profile)
    return result.model_copy(update={"profile_name": profile.name, "profile_path": str(path)})


def tune_with_profiles(
    facts: ModelFacts, config: TrialConfig, setup: RunSetup, *, store: ProfileStore,
    retune: bool, save: bool, on_event: Note, on_attempt: Callable[[Attempt], None],
    on_note: Note,
) -> RunResult:  # fmt: skip
    """Launch a matching saved profile once to confirm it, else tune; save the winner."""
    key = run_key(config, setup)
    match = store.match(key)
    for note in match.notes:
        on_note(note)
    result: RunResult | None = None
    if match.profile is not None and retune:
        on_note(f"--retune: tuning again (replaces tuned profile {match.name})")
    elif match.profile is not None:
        n = match.profile.placement.n_cpu_moe or 0
        on_note(f"tuned profile {match.name} matches: --n-cpu-moe {n}, one launch to confirm")
        result = confirm_n(facts, config, setup, n, on_event=on_event, on_attempt=on_attempt)
        if result.best is None:
            on_note(f"--n-cpu-moe {n} no longer fits ({result.attempts[0].status}): tuning again")
            result = None
    if result is None:
        result = tune_model(facts, config, target_bytes=None, headroom_bytes=0, gpus=None,
                            on_event=on_event, on_attempt=on_attempt, setup=setup)  # fmt: skip
    if not save:
        return result
    return save_winner(store, key, result, match.profile if result.reused_profile else None)
