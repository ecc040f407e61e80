"""The one way `run` and `bench` launch llama-server, and the one device set-up they share.

``LaunchSpec`` holds what every launch of a job has in common (binary, model, settings,
pass-through arguments, threads, port, log dir, timeouts) and turns a placement into the
argv through the command builder.  ``prepare_device`` checks the pass-through arguments,
asks llama-server which device it offloads to, fixes the budget and picks the memory probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from moetune.core.command import (
    FitMode,
    args_for,
    conflicting_args,
    extra_int,
    rpc_endpoints,
    server_argv,
)
from moetune.core.facts import ModelFacts
from moetune.core.placement import Placement
from moetune.core.planner import does_not_fit, floor_placement, max_context
from moetune.core.settings import Settings, default_n_ctx
from moetune.errors import BadValueError, NoGpuError, UnsupportedModelError
from moetune.hardware.base import GpuProbe
from moetune.llamacpp.info import Device, ServerInfo
from moetune.llamacpp.memprobe import MemoryProbe, choose_probe, device_prefix
from moetune.llamacpp.process import RunningServer, launch, server_info
from moetune.units import MIB, Ctx, format_bytes


@dataclass(frozen=True)
class LaunchSpec:
    """What every llama-server a job starts has in common."""

    binary: Path
    model: str
    settings: Settings
    extra: tuple[str, ...] = ()  # after --, passed through (-ub/-b stay here)
    threads: int | None = None
    port: int | None = None
    log_dir: Path | None = None
    ready_timeout_s: float = 600.0

    def args(self, placement: Placement, flags: tuple[str, ...] = ()) -> list[str]:
        """llama-server's arguments (no binary) for ``placement``, ``flags`` before ``extra``."""
        return self._argv(placement, flags, None)

    def fit_args(self, target_mib: int | None) -> list[str]:
        """llama-server's arguments for llama.cpp's own ``--fit on`` (no placement flags)."""
        return self._argv(None, (), FitMode(target_mib))

    def _argv(self, placement: Placement | None, flags: tuple[str, ...],
              fit: FitMode | None) -> list[str]:  # fmt: skip
        args = args_for(self.model, self.settings, placement, threads=self.threads,
                        extra=(*flags, *self.extra), with_ubatch=False, fit=fit)  # fmt: skip
        return server_argv(args)[1:]

    def start(self, args: list[str], port: int | None = None) -> RunningServer:
        """Launch llama-server with ``args``; returns once it listens (the model loads on)."""
        return launch(self.binary, args, port=port or self.port, log_dir=self.log_dir)


def settings_from_extra(settings: Settings, extra: tuple[str, ...]) -> Settings:
    """The micro-batch and batch sizes given after ``--`` (llama-server's defaults else)."""
    update = {"n_ubatch": extra_int(extra, "-ub", "--ubatch-size") or 512,
              "n_batch": extra_int(extra, "-b", "--batch-size") or 2048}  # fmt: skip
    return settings.model_copy(update=update)


@dataclass(frozen=True)
class DeviceSetup:
    """What a job learns before its first launch: the server, its device, probe and budget."""

    info: ServerInfo
    device: Device
    probe: MemoryProbe
    target_bytes: int  # the device memory the job may fill
    fit_target_mib: int | None  # --fit-target for llama.cpp's --fit (None: its default)


def check_extra(extra: tuple[str, ...]) -> None:
    """BadValueError for pass-through arguments that fight the placement moetune decides."""
    if clashes := conflicting_args(extra):
        raise BadValueError(
            f"{' '.join(clashes)} after -- conflicts with the placement moetune tunes",
            hint="drop it: moetune sets -ngl, --n-cpu-moe, -ot, -c, -ctk/-ctv, -fa and --fit",
        )


def first_device(info: ServerInfo) -> Device:
    """The first non-CPU device llama-server lists, or NoGpuError."""
    if not info.devices:
        raise NoGpuError(
            "llama-server sees no GPU: everything would run on the CPU",
            hint="run on a machine with a GPU, or pass an offload device after --, "
            "e.g. -- --rpc HOST:PORT",
        )
    return info.devices[0]


def budget_for(device: Device, target_bytes: int | None,
               headroom_bytes: int) -> tuple[int, int | None]:  # fmt: skip
    """(budget, --fit-target MiB or None): ``--target-vram`` or the device's total - headroom.

    ``--fit`` aims at a margin of *free* memory (common/fit.cpp), so a target becomes the
    device's free memory minus it."""
    if target_bytes is not None:
        return target_bytes, max(0, (device.free_bytes - target_bytes) // MIB)
    budget = device.total_bytes - headroom_bytes
    if budget <= 0:
        raise BadValueError(
            f"the device has {format_bytes(device.total_bytes)}: nothing is left after the "
            f"{format_bytes(headroom_bytes)} headroom",
            hint="pass --target-vram",
        )
    return budget, None


def prepare_device(spec: LaunchSpec, *, target_bytes: int | None, headroom_bytes: int,
                   gpus: GpuProbe | None) -> tuple[LaunchSpec, DeviceSetup]:  # fmt: skip
    """Check the pass-through arguments, ask llama-server for its device, fix the budget and
    the memory probe; the spec comes back with the device's compute rules in its settings."""
    check_extra(spec.extra)
    info = server_info(spec.binary, rpc=rpc_endpoints(spec.extra))
    device = first_device(info)
    budget, fit_target = budget_for(device, target_bytes, headroom_bytes)
    kind = "rpc" if device_prefix(device.name).startswith("RPC") else spec.settings.device_kind
    spec = replace(spec, settings=spec.settings.model_copy(update={"device_kind": kind}))
    setup = DeviceSetup(info=info, device=device, probe=choose_probe(device.name, gpus),
                        target_bytes=budget, fit_target_mib=fit_target)  # fmt: skip
    return spec, setup


def check_loadable(facts: ModelFacts) -> None:
    """UnsupportedModelError for a header-only file: llama-server cannot load what is not there."""
    if facts.header_only:
        raise UnsupportedModelError(
            f"{Path(facts.paths[0]).name} holds no tensor data (a header-only file): "
            "llama-server cannot load it",
            hint="`moetune plan` works on it; run and bench need the whole model",
        )


def resolve_context(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup, ctx: Ctx | None,
                    warn: Callable[[str], None]) -> LaunchSpec:  # fmt: skip
    """The spec at the context asked for: ``--ctx N``, the default, or ``max`` (the largest
    that fits the budget with every expert on the CPU)."""
    settings = spec.settings
    if ctx is None or ctx.tokens is not None:
        n_ctx = (
            ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
        )
    else:
        best = max_context(facts, floor_placement(facts), setup.target_bytes, settings)
        if best is None:
            raise does_not_fit(
                facts, setup.target_bytes, settings.model_copy(update={"n_ctx": 256})
            )
        n_ctx = best
    if facts.context_length and n_ctx > facts.context_length:
        warn(f"context {n_ctx} is beyond the training context {facts.context_length}")
    return replace(spec, settings=settings.model_copy(update={"n_ctx": n_ctx}))
