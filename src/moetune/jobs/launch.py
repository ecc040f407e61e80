"""The one way `run` and `bench` launch llama-server, and the one device set-up they share.

``LaunchSpec`` holds what every launch of a job has in common (binary, model, settings,
pass-through arguments and the extras they load beside the model, threads, port, log dir,
timeouts) and turns a placement into the argv through the command builder.
``prepare_device`` checks the pass-through arguments, asks llama-server which device it
offloads to, fixes the budget and picks the memory probe; ``prepare_launch`` does that for
the GPUs here and then resolves the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from moetune.core.command import (
    FitMode,
    args_for,
    check_pass_through,
    command_env,
    pass_through_int,
    pass_through_value,
    rpc_endpoints,
    server_argv,
)
from moetune.core.devices import DeviceSpec, bufts
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.placement import Placement
from moetune.core.plan import check_targets
from moetune.core.planner import DeviceBudgets, ctx_max_stop, does_not_fit, max_context
from moetune.core.settings import Settings, default_n_ctx
from moetune.errors import BadValueError, UnsupportedModelError
from moetune.hardware.base import GpuProbe
from moetune.jobs.devices import require_devices, specs_from_listed, split_endpoints
from moetune.jobs.loader import with_extras
from moetune.llamacpp import process
from moetune.llamacpp.memprobe import MemoryProbe, choose_probe
from moetune.llamacpp.process import RunningServer, launch, server_info
from moetune.record import record
from moetune.records.server import Device, ServerInfo
from moetune.units import MIB, Ctx, Sizes, format_bytes, per_device


def install_signal_handlers(acknowledge: bytes = b"") -> None:
    """Ctrl-C, SIGTERM and SIGHUP unwind, so that the llama-server (or llama-bench) a command
    started is stopped; ``acknowledge`` is written to stderr at the first (llamacpp/process.py)."""
    process.install_signal_handlers(acknowledge)


@record(frozen=True)
class LaunchSpec:
    """What every llama-server a job starts has in common."""

    binary: Path
    model: str
    settings: Settings
    pass_through: tuple[str, ...] = ()  # after --, passed through (-ub/-b stay here)
    extras: Extras | None = None  # what ``pass_through`` loads beside the model (jobs/loader.py)
    threads: int | None = None
    port: int | None = None
    log_dir: Path | None = None
    ready_timeout_s: float = 600.0
    devices: tuple[DeviceSpec, ...] = ()  # set by prepare_device: the -ot targets' names
    # the model came by Hugging Face name: the -hf a printed command uses instead of -m, and
    # the mmproj sibling -hf brings (its --mmproj left out of the printed command)
    hf: str | None = None
    hf_sibling: str | None = None

    def args(self, placement: Placement, flags: tuple[str, ...] = ()) -> list[str]:
        """llama-server's arguments (no binary) for ``placement``, ``flags`` before the
        pass-through arguments."""
        return self._argv(placement, flags, None)

    def fit_args(self, margins_mib: tuple[int, ...] | None) -> list[str]:
        """llama-server's arguments for llama.cpp's own ``--fit on`` (no placement flags),
        with a margin of free memory per device (None: llama.cpp's default)."""
        return self._argv(None, (), FitMode(None, margins_mib or ()))

    def _argv(
        self, placement: Placement | None, flags: tuple[str, ...], fit: FitMode | None
    ) -> list[str]:
        args = args_for(
            self.model,
            self.settings,
            placement,
            threads=self.threads,
            pass_through=(*flags, *self.pass_through),
            with_ubatch=False,
            fit=fit,
            bufts=bufts(self.devices),
        )
        return server_argv(args)[1:]

    def start(self, args: list[str], port: int | None = None) -> RunningServer:
        """Launch llama-server with ``args`` and the settings' variables (the op-offload
        threshold); returns once it listens (the model loads on)."""
        return launch(
            self.binary,
            args,
            port=port or self.port,
            log_dir=self.log_dir,
            env=command_env(self.settings),
        )


def settings_from_pass_through(
    settings: Settings, pass_through: tuple[str, ...], facts: ModelFacts | None = None
) -> tuple[Settings, Extras | None]:
    """The micro-batch and batch sizes given after ``--`` (llama-server's defaults else), and
    with ``facts`` (the model) the projector and draft model they load beside it."""
    found = replace(
        settings,
        n_ubatch=pass_through_int(pass_through, "-ub", "--ubatch-size") or 512,
        n_batch=pass_through_int(pass_through, "-b", "--batch-size") or 2048,
    )
    if facts is None:
        return found, None
    return with_extras(found, facts, pass_through)


@record(frozen=True)
class DeviceSetup:
    """What a job learns before its first launch: the server, its devices (llama.cpp's order),
    a memory probe and a budget for each, and --fit's margins for the same budgets."""

    info: ServerInfo
    devices: tuple[DeviceSpec, ...]
    listed: tuple[Device, ...]
    probes: tuple[MemoryProbe, ...]
    budgets: tuple[int, ...]
    fit_targets_mib: tuple[int, ...] | None  # --fit-target per device (None: its default)
    device_args: tuple[str, ...] = ()  # what selects the devices (--rpc given to moetune)

    @property
    def multi(self) -> bool:
        return len(self.devices) > 1

    @property
    def device(self) -> Device:
        """The first device (the one device of a single-device job)."""
        return self.listed[0]

    @property
    def device_budgets(self) -> DeviceBudgets:
        return DeviceBudgets(self.devices, self.budgets)


# llama-server flags that pick another split of the devices than by layer
REFUSED_SPLITS = frozenset({"row", "tensor"})


def split_mode(pass_through: tuple[str, ...]) -> str:
    """``-sm`` among the pass-through arguments (llama.cpp's default: layer); row and tensor
    are refused."""
    mode = pass_through_value(pass_through, "-sm", "--split-mode") or "layer"
    if mode in REFUSED_SPLITS:
        raise BadValueError(
            f"-sm {mode} is not supported: moetune plans a split by layer",
            hint="leave -sm out, or use -sm none for one device",
        )
    return mode


def chosen_devices(listed: tuple[Device, ...], pass_through: tuple[str, ...]) -> tuple[Device, ...]:
    """The devices llama-server will use: ``-dev A,B`` (in that order), ``-sm none`` with
    ``-mg i``, else every device it lists."""
    names = pass_through_value(pass_through, "-dev", "--device")
    chosen = listed
    if names is not None:
        wanted = [n.strip() for n in names.split(",") if n.strip() and n.strip() != "none"]
        by_name = {d.name: d for d in listed}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise BadValueError(
                f"-dev {names}: llama-server has no device {missing[0]}",
                hint="its devices: " + ", ".join(by_name),
            )
        chosen = tuple(by_name[n] for n in wanted)
    if split_mode(pass_through) == "none":
        main = pass_through_int(pass_through, "-mg", "--main-gpu") or 0
        if main >= len(chosen):
            raise BadValueError(f"-mg {main}: there are {len(chosen)} devices")
        chosen = (chosen[main],)
    return chosen


def budgets_for(
    devices: tuple[DeviceSpec, ...], targets: Sizes | None, headrooms: Sizes, force: bool = False
) -> tuple[int, ...]:
    """Each device's budget: its ``--target-vram`` (at most its total and its free memory,
    unless ``force``), else its total - ``--headroom``."""
    n = len(devices)
    per_target = per_device(targets, n, "--target-vram")
    if per_target is not None and not force:
        check_targets(devices, per_target)
    per_headroom = per_device(headrooms, n, "--headroom") or headrooms.values
    found = []
    for i, device in enumerate(devices):
        if per_target is not None:
            found.append(per_target[i])
            continue
        budget = (device.total_bytes or 0) - per_headroom[i]
        if budget <= 0:
            raise BadValueError(
                f"{device.name} has {format_bytes(device.total_bytes)}: nothing is left after "
                f"the {format_bytes(per_headroom[i])} headroom",
                hint="pass --target-vram",
            )
        found.append(budget)
    return tuple(found)


def fit_margins(
    devices: tuple[DeviceSpec, ...], budgets: tuple[int, ...], targeted: bool
) -> tuple[int, ...] | None:
    """``--fit-target`` per device for the same budgets: ``--fit`` keeps a margin of *free*
    memory (common/fit.cpp), so a budget becomes the device's free memory minus it. One
    device without a target: llama.cpp's own default margin (None)."""
    if len(devices) == 1 and not targeted:
        return None
    return tuple(
        max(0, ((d.free_bytes or d.total_bytes or 0) - b) // MIB)
        for d, b in zip(devices, budgets, strict=True)
    )


def prepare_device(
    spec: LaunchSpec,
    *,
    target_bytes: Sizes | None,
    headroom_bytes: Sizes,
    gpus: GpuProbe | None,
    overhead: Sizes | None = None,
    rpc: tuple[str, ...] = (),
    force: bool = False,
) -> tuple[LaunchSpec, DeviceSetup]:
    """Check the pass-through arguments, ask llama-server for its devices, fix each one's
    budget and memory probe; the spec comes back with the first device's compute rules and
    overhead in its settings (and moetune's own ``--rpc`` among its arguments)."""
    check_pass_through(spec.pass_through)
    if rpc:
        spec = replace(spec, pass_through=("--rpc", ",".join(rpc), *spec.pass_through))
    info = server_info(spec.binary, rpc=rpc_endpoints(spec.pass_through))
    listed = chosen_devices(require_devices(info), spec.pass_through)
    devices = specs_from_listed(listed, overhead)
    budgets = budgets_for(devices, target_bytes, headroom_bytes, force)
    probes = tuple(choose_probe(d, gpus) for d in devices)
    first = devices[0]
    settings = replace(
        spec.settings, device_kind=first.kind, gpu_overhead_bytes=first.overhead_bytes
    )
    spec = replace(spec, settings=settings, devices=devices)
    setup = DeviceSetup(
        info=info,
        devices=devices,
        listed=listed,
        probes=probes,
        budgets=budgets,
        fit_targets_mib=fit_margins(devices, budgets, target_bytes is not None),
    )
    return spec, setup


def check_loadable(facts: ModelFacts, made: str = "", needs: str = "run and bench need") -> None:
    """UnsupportedModelError for a header-only file: llama-server cannot load what is not
    there (``made``: what would be made of it, ``an alias``; ``needs``: who needs the
    weights). One check for run, bench, alias and export."""
    if facts.header_only:
        raise UnsupportedModelError(
            f"{Path(facts.paths[0]).name} holds no tensor data (a header-only file): "
            + (
                f"{made} of it would not start llama-server"
                if made
                else "llama-server cannot load it"
            ),
            hint=f"`moetune plan` works on it; {needs} the whole model",
        )


def resolve_context(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    ctx: Ctx | None,
    warn: Callable[[str], None],
) -> LaunchSpec:
    """The spec at the context asked for: ``--ctx N``, the default, or ``max`` (the largest
    that fits the budget with every expert on the CPU)."""
    settings = spec.settings
    if ctx is None or ctx.tokens is not None:
        n_ctx = (
            ctx.tokens if ctx is not None and ctx.tokens else default_n_ctx(facts.context_length)
        )
    else:
        found = max_context(facts, setup.device_budgets, settings, extras=spec.extras)
        if found is None:
            smallest = replace(settings, n_ctx=256)
            raise does_not_fit(facts, setup.device_budgets, smallest, extras=spec.extras)
        n_ctx = found[0]
        if (stopped := ctx_max_stop(facts, n_ctx)) is not None:
            warn(stopped)  # the training context stopped it, not the budget
    if facts.context_length and n_ctx > facts.context_length:
        warn(f"context {n_ctx} is beyond the training context {facts.context_length}")
    return replace(spec, settings=replace(settings, n_ctx=n_ctx))


def moved_env_warning(names: list[str]) -> str:
    """The one warning that names the variables ``process.child_env`` leaves out."""
    them = "it" if len(names) == 1 else "them"
    return (
        f"ignoring {', '.join(names)} from the environment: llama.cpp would apply {them} "
        f"before moetune's flags and load a placement moetune did not plan (set {them} with "
        "moetune's options or after --)"
    )


def prepare_launch(
    facts: ModelFacts,
    spec: LaunchSpec,
    *,
    ctx: Ctx | None,
    target_bytes: Sizes | None,
    headroom_bytes: Sizes,
    overhead: Sizes | None,
    rpc: str | None,
    warn: Callable[[str], None],
    force: bool = False,
) -> tuple[LaunchSpec, DeviceSetup]:
    """What run and bench do before the first launch: the devices set up (the GPUs detected
    here, the ``--rpc`` servers), and the spec at the context asked for. The environment's
    variables that every launch leaves out (they would move the placement) are named in one
    warning."""
    from moetune.hardware import detect_gpu_probe

    if moved := process.moved_env():
        warn(moved_env_warning(moved))
    spec, setup = prepare_device(
        spec,
        target_bytes=target_bytes,
        headroom_bytes=headroom_bytes,
        gpus=detect_gpu_probe(),
        overhead=overhead,
        rpc=split_endpoints(rpc),
        force=force,
    )
    return resolve_context(facts, spec, setup, ctx, warn=warn), setup
