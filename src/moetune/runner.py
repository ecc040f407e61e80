"""`moetune run` without the terminal: find llama-server and its device, choose the memory
probe, plan, and tune N with real launches. Returns data; cli.py renders it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from moetune.errors import BadValueError, DoesNotFitError, NoGpuError
from moetune.hardware import GpuProbe
from moetune.memory import Settings, estimate_from_split
from moetune.memprobe import MemoryProbe, choose_probe
from moetune.model import ModelFacts
from moetune.placement import Placement, split_weights
from moetune.planner import n_cpu_moe_split, plan_n_cpu_moe
from moetune.server import Device, server_info
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
    devices = server_info(binary, rpc=rpc_endpoints(extra)).devices
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


def tune_model(
    facts: ModelFacts,
    config: TrialConfig,
    *,
    target_bytes: int | None,
    headroom_bytes: int,
    gpus: GpuProbe | None,
    on_event: Callable[[str], None],
    on_attempt: Callable[[Attempt], None] = lambda attempt: None,
) -> RunResult:
    """Plan, then launch llama-server until the smallest N within the target is confirmed."""
    check_extra(config.extra_args)
    device = offload_device(config.binary, config.extra_args)
    probe: MemoryProbe = choose_probe(device.name, gpus)
    if target_bytes is None:
        if device.total_bytes is None:
            raise BadValueError(f"{device.name} does not report its size: pass --target-vram")
        target_bytes = device.total_bytes - headroom_bytes
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
