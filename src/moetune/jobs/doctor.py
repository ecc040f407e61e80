"""`moetune doctor`: what on this machine helps or hurts expert offload, each with its fix.

Findings are ok / warn / fail. Without a model: GPUs and their memory, each GPU's PCIe link
(current and maximum generation and width, the card's own, its bandwidth per direction), the
driver, CPU cores, RAM and its read bandwidth (measured in about a second and saved for
plan and calibrate, unless ``--no-measure``), swap, WSL2, llama-server and the devices it
lists (an RPC device's link is the network; each ``--rpc`` server must answer, and then no
NVIDIA GPU is needed). With a model: the RAM its CPU-resident experts need against the RAM
available, and a decode-speed ceiling from bandwidths: every token reads the dense weights
and the active experts' share of the experts on each side, so

    seconds per token >= GPU bytes per token / GPU bandwidth + CPU bytes per token / RAM bandwidth

and the larger term names the bottleneck. Prompt processing has a third limit: with experts
on the CPU, llama.cpp copies them to the GPU for every micro-batch of 32 tokens or more
(``offload_op`` in ggml-cuda.cu, ``GGML_OP_OFFLOAD_MIN_BATCH``), so the PCIe link caps it.

Pure apart from the probes and the machine file (the saved RAM figure) it is given; returns
data (report/doctor.py renders it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from moetune.core.backends import kind_of
from moetune.core.devices import DeviceSpec, single_device
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate, Settings, default_n_ctx, estimate
from moetune.core.placement import Placement
from moetune.core.plan import PlanRequest, RamCheck, check_ram, check_targets, make_plan
from moetune.core.planner import DEFAULT_HEADROOM_BYTES
from moetune.errors import (
    BadValueError,
    DoesNotFitError,
    MoetuneError,
    NoGpuError,
    ServerFailedError,
    ServerNotFoundError,
)
from moetune.gguf.roles import Role
from moetune.hardware.base import (
    VRAM_HINT,
    GpuInfo,
    GpuProbe,
    HostInfo,
    HostProbe,
    RamBandwidth,
    RamBandwidthProbe,
)
from moetune.llamacpp.info import INSTALL_HINT
from moetune.record import record
from moetune.records.server import ServerInfo
from moetune.store.hardware import (
    HardwareProfile,
    find_hardware_profile,
    match_detected,
    pcie_bandwidth_bytes_per_s,
    scan_hardware_profiles,
)
from moetune.store.machine import (
    MachineIdentity,
    SavedRamBandwidth,
    save_ram_bandwidth,
    saved_ram_bandwidth,
)
from moetune.units import GIB, Ctx, Sizes, format_bytes, per_device

Status = Literal["ok", "warn", "fail"]
RamBandwidthSource = Literal["given", "measured", "saved", "assumed"]
# Assumed when not given: a dual-channel desktop (DDR4-3200 is 51 GB/s, DDR5-6000 96 GB/s in
# theory; CPU inference reaches a good part of that, not all of it).
DEFAULT_RAM_BANDWIDTH_BYTES_PER_S = 60 * 10**9
MIN_DRIVER = 525  # CUDA 12 (llama.cpp's CUDA releases) needs driver 525.60 or newer on Linux
SLOW_DECODE_TPS = 10.0
WSLCONFIG_FIX = (
    "give WSL more memory in %UserProfile%\\.wslconfig ([wsl2] then memory=48GB, say), run "
    "`wsl --shutdown`, and keep models on the Linux disk (~/), not /mnt/c"
)


class Finding(BaseModel):
    check: str  # gpu pcie driver cpu ram ram-bandwidth swap wsl llama-server device;
    # with a model: model-fit model-ram decode prefill
    status: Status
    message: str
    fix: str | None = None


class SpeedCeiling(BaseModel):
    """Upper bounds on decode and prompt speed from bandwidths (nothing runs faster)."""

    n_cpu_moe: int | None
    gpu_bytes_per_token: int
    cpu_bytes_per_token: int
    gpu_bandwidth_bytes_per_s: int | None  # None: unknown, its term left out
    ram_bandwidth_bytes_per_s: int
    ram_bandwidth_source: RamBandwidthSource  # --ram-bandwidth, measured now, saved, assumed
    decode_tps: float | None  # None: no bandwidth known for what each token reads
    bottleneck: str  # "RAM bandwidth" or "GPU memory bandwidth"
    cpu_expert_bytes: int
    pcie_bytes_per_s: int | None
    n_ubatch: int
    prefill_tps: float | None  # the PCIe limit on prompt processing; None: no copies or unknown


class PcieLink(BaseModel):
    """One GPU's PCIe link as NVML reports it: now (it drops at idle), the most the card and
    its slot allow together, and the card's own generation; bytes per second per direction."""

    gpu_index: int
    gen_current: int | None
    width_current: int | None
    gen_max: int | None
    width_max: int | None
    gen_card_max: int | None
    current_bytes_per_s: int | None
    max_bytes_per_s: int | None


class DeviceLink(BaseModel):
    """How a device llama-server lists reaches this host: a CUDA GPU by PCIe, an RPC device
    by the network (no PCIe link of this machine's)."""

    name: str
    description: str
    link: Literal["pcie", "network"]


class RamRead(BaseModel):
    """This machine's RAM read bandwidth: measured now, or saved by an earlier doctor; the
    file it was saved to or read from."""

    figure: SavedRamBandwidth
    source: Literal["measured", "saved"]
    file: str | None


class DoctorReport(BaseModel):
    findings: list[Finding]
    gpus: list[GpuInfo]
    host: HostInfo
    server: ServerInfo | None
    model: str | None = None
    ceiling: SpeedCeiling | None = None
    pcie: list[PcieLink] = []  # one per GPU in ``gpus``
    device_links: list[DeviceLink] = []
    ram_read: RamRead | None = None

    @property
    def worst(self) -> Status:
        statuses = {f.status for f in self.findings}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


@record(frozen=True)
class DoctorInputs:
    """The probes and options a diagnosis uses (fakes in tests)."""

    gpus: GpuProbe
    host: HostProbe
    server: Callable[[], ServerInfo]  # raises a MoetuneError when missing or broken
    hardware: Sequence[HardwareProfile] = ()
    gpu_profile: HardwareProfile | None = None  # --gpu: for the model checks, not detection
    vram_bytes: int | None = None  # --vram: the GPU the model checks plan for
    ram_bytes: int | None = None  # --ram: the RAM the model checks count on
    ram_bandwidth_bytes_per_s: int | None = None  # --ram-bandwidth: for the ceiling
    ram_probe: RamBandwidthProbe | None = None  # None: --no-measure
    machine_file: Path | None = None  # where the measured figure is kept; None: not kept
    n_ctx: int | None = None
    cache_type: str = "q8_0"
    target_bytes: int | None = None  # --target-vram: the peak allowed
    force: bool = False  # --force: a target above the device's memory is meant
    headroom_bytes: int = DEFAULT_HEADROOM_BYTES
    # several devices (--vram A,B, --rpc): what the model checks plan across, each device's
    # target (None: total - headroom) and headroom, and what selects them for llama-server
    devices: tuple[DeviceSpec, ...] = ()
    device_targets: tuple[int | None, ...] = ()
    device_headrooms: tuple[int, ...] = ()
    device_args: tuple[str, ...] = ()
    # --rpc HOST:PORT,...: the offload devices given; each is checked (llama-server lists it,
    # or at least it answers), and they stand in for a missing NVIDIA GPU
    rpc_endpoints: tuple[str, ...] = ()
    rpc_reachable: Callable[[str], bool] | None = None  # None: not probed (llama-server's list)
    devices_error: str | None = None  # why the devices the model checks plan across are not known


@record(frozen=True)
class GpuTarget:
    """The GPU the model checks plan for."""

    name: str
    vram_bytes: int
    bandwidth_bytes_per_s: int | None
    pcie_bytes_per_s: int | None
    pcie_label: str | None


def _gbps(rate: float) -> str:
    return f"{rate / 1e9:.0f} GB/s" if rate >= 1e11 else f"{rate / 1e9:.1f} GB/s"


# --- GPUs ----------------------------------------------------------------------------------------


def gpu_findings(
    gpus: list[GpuInfo],
    why: str | None,
    described: str | None = None,
    rpc: Sequence[str] = (),
    others: Sequence[str] = (),
) -> list[Finding]:
    """One finding per GPU; without one, a failure, or a warning when ``described`` (the
    ``--vram``/``--gpu`` the model checks use instead) stands in for it; none is needed when
    ``rpc`` servers or ``others`` (devices of other backends llama-server lists: Vulkan0,
    ROCm0) are the offload devices (they are checked on their own)."""
    if not gpus and others and described is None:
        return [
            Finding(
                check="gpu",
                status="ok",
                message="no NVIDIA GPU here; llama-server offloads to "
                f"{', '.join(others)} (its memory from llama.cpp's own list), checked below",
            )
        ]
    if not gpus and rpc:
        return [
            Finding(
                check="gpu",
                status="ok",
                message="no NVIDIA GPU here; the offload devices are the RPC servers given "
                f"(--rpc {','.join(rpc)}), checked below",
            )
        ]
    if not gpus:
        reason = (
            (why or "none found").removesuffix(f", or {VRAM_HINT}").removesuffix(f": {VRAM_HINT}")
        )
        fix = "install the NVIDIA driver (nvidia-smi must list the GPU)"
        # the fix says it once: the probe's own advice of the same words is left out
        reason = re.sub(r"[:,;]? (or )?install the NVIDIA driver$", "", reason)
        if described is not None:
            return [
                Finding(
                    check="gpu",
                    status="warn",
                    message=f"no NVIDIA GPU detected: {reason}; the model checks use {described}",
                    fix=fix,
                )
            ]
        return [
            Finding(
                check="gpu",
                status="fail",
                message=f"no NVIDIA GPU detected: {reason}",
                fix=f"{fix}; to plan for a card elsewhere use `moetune plan MODEL --gpu rtx4090` "
                "or --vram",
            )
        ]
    return [_memory_finding(gpu) for gpu in gpus]


def _memory_finding(gpu: GpuInfo) -> Finding:
    label = f"GPU {gpu.index}: {gpu.name}"
    total, free = gpu.vram_total_bytes, gpu.vram_free_bytes
    if total is None:
        return Finding(
            check="gpu",
            status="warn",
            message=f"{label} does not report its memory (unified memory?)",
            fix="pass --vram to plan and --target-vram to run",
        )
    message = f"{label}, {format_bytes(total)}"
    if free is not None and total - free > GIB:
        return Finding(
            check="gpu",
            status="warn",
            message=f"{message}, only {format_bytes(free)} free: other processes hold "
            f"{format_bytes(total - free)}",
            fix="close them (`nvidia-smi` lists them), or plan with --target-vram for what is left",
        )
    return Finding(check="gpu", status="ok", message=f"{message} ({format_bytes(free)} free)")


def _link(gen: int | None, width: int | None) -> str:
    return f"PCIe {gen or '?'}.0 x{width or '?'}"


def link_bytes_per_s(gen: int | None, width: int | None) -> int | None:
    """One direction of a link; ``None`` when its generation or width is unknown."""
    if not gen or not width:
        return None
    try:
        return pcie_bandwidth_bytes_per_s(gen, width)
    except ValueError:
        return None


def pcie_link(gpu: GpuInfo) -> PcieLink:
    """``gpu``'s link and its bandwidth, now and at most."""
    return PcieLink(
        gpu_index=gpu.index,
        gen_current=gpu.pcie_gen_current,
        width_current=gpu.pcie_width_current,
        gen_max=gpu.pcie_gen_max,
        width_max=gpu.pcie_width_max,
        gen_card_max=gpu.pcie_gen_card_max,
        current_bytes_per_s=link_bytes_per_s(gpu.pcie_gen_current, gpu.pcie_width_current),
        max_bytes_per_s=link_bytes_per_s(gpu.pcie_gen_max, gpu.pcie_width_max),
    )


NARROW_LANES = 4  # x4 or less: a chipset slot, a riser or a laptop's link


def pcie_finding(link: PcieLink, profile: HardwareProfile | None) -> Finding:
    """The most card and slot allow against the card's own (NVML's, else its profile's), and
    the link now. NVML reports the current link, whose generation drops at idle to save
    power: that alone is no fault."""
    gen, width, index = link.gen_max, link.width_max, link.gpu_index
    if gen is None or width is None or link.max_bytes_per_s is None:
        return Finding(
            check="pcie",
            status="warn",
            message=f"GPU {index}: PCIe link unknown",
            fix="check it with `nvidia-smi -q -d PCIE`",
        )
    now = _link(link.gen_current, link.width_current)
    if link.current_bytes_per_s is not None:
        now += f" ({_gbps(link.current_bytes_per_s)})"
    head = f"GPU {index}: {_link(gen, width)} max ({_gbps(link.max_bytes_per_s)} per direction)"
    message = f"{head}, {now} now"
    slow_fix = (
        "prompt processing with experts on the CPU copies them over this link: use a "
        "CPU-attached slot with the card's full link (check the BIOS link speed); "
        "-ub 2048 -b 2048 makes fewer copies"
    )
    card_gen = link.gen_card_max or (profile.pcie_gen if profile else None)
    card_lanes = profile.pcie_lanes if profile else None
    if (card_gen and gen < card_gen) or (card_lanes and width < card_lanes):
        card = _link(card_gen or gen, card_lanes or width)
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: the card supports {card}, the slot less",
            fix=slow_fix,
        )
    if gen <= 3:
        return Finding(
            check="pcie", status="warn", message=f"{message}: PCIe 3.0 or older", fix=slow_fix
        )
    if card_lanes is None and width <= NARROW_LANES:
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: an x{width} link (a chipset slot, a riser, or a laptop's)",
            fix=slow_fix,
        )
    if (link.width_current or width) < width:
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: running with fewer lanes",
            fix="check it under load (`nvidia-smi -q -d PCIE` while a prompt runs); if it stays "
            "narrow, reseat the card and check the slot's lane sharing (M.2 drives)",
        )
    idle = ""
    if (link.gen_current or gen) < gen:
        idle = (
            f" (a lower generation at idle is power saving: NVML reports the link now, "
            f"which returns to {gen}.0 under load)"
        )
    return Finding(check="pcie", status="ok", message=message + idle)


def driver_finding(gpus: list[GpuInfo]) -> Finding | None:
    if not gpus:
        return None
    version = gpus[0].driver_version
    if version is None:
        return Finding(
            check="driver",
            status="warn",
            message="driver version unknown",
            fix="check `nvidia-smi`",
        )
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < MIN_DRIVER:
        return Finding(
            check="driver",
            status="warn",
            message=f"NVIDIA driver {version}: older than {MIN_DRIVER}",
            fix=f"CUDA 12 builds of llama.cpp need driver {MIN_DRIVER} or newer: update the driver",
        )
    return Finding(check="driver", status="ok", message=f"NVIDIA driver {version}")


# --- the host ------------------------------------------------------------------------------------


def cpu_finding(host: HostInfo) -> Finding:
    physical, logical = host.physical_cores, host.logical_cores
    if physical is None:
        return Finding(
            check="cpu",
            status="warn",
            message=f"{logical} logical cores, physical count unknown",
            fix="pass -t with your physical core count",
        )
    message = f"{physical} physical cores, {logical} logical"
    if logical > physical:
        message += f": use -t {physical} (hyper-threads only fight over memory bandwidth)"
    return Finding(check="cpu", status="ok", message=message)


def ram_finding(host: HostInfo) -> Finding:
    total, available = host.ram_total_bytes, host.ram_available_bytes
    message = f"RAM {format_bytes(total)}, {format_bytes(available)} available"
    if host.ram_limit_bytes is not None:
        return Finding(
            check="ram",
            status="warn",
            message=f"{message}, but this container/cgroup may use only "
            f"{format_bytes(host.ram_limit_bytes)}",
            fix="raise the memory limit (docker run --memory, systemd MemoryMax)",
        )
    if total < 16 * GIB or available < 8 * GIB:
        return Finding(
            check="ram",
            status="warn",
            message=f"{message}: little room for CPU-resident experts",
            fix="close programs, add RAM, or pick a smaller quant; "
            "`moetune doctor MODEL` says what a model needs",
        )
    return Finding(check="ram", status="ok", message=message)


def swap_finding(host: HostInfo) -> Finding:
    used, total = host.swap_used_bytes, host.swap_total_bytes
    if used > GIB:
        return Finding(
            check="swap",
            status="warn",
            message=f"{format_bytes(used)} of swap in use: RAM has been short",
            fix="free RAM before serving: experts paged to swap or re-read from disk drop "
            "decoding under 1 tok/s",
        )
    return Finding(
        check="swap", status="ok", message=f"swap {format_bytes(total)}, {format_bytes(used)} used"
    )


def wsl_finding(host: HostInfo) -> Finding | None:
    if not host.is_wsl:
        return None
    return Finding(
        check="wsl",
        status="warn",
        message=f"WSL2: Linux sees {format_bytes(host.ram_total_bytes)}, what WSL is given "
        "(by default half of Windows' RAM)",
        fix=WSLCONFIG_FIX,
    )


def server_finding(lookup: Callable[[], ServerInfo]) -> tuple[Finding, ServerInfo | None]:
    try:
        info = lookup()
    except MoetuneError as exc:
        status: Status = "fail" if isinstance(exc, ServerNotFoundError) else "warn"
        first = exc.message.splitlines()[0]
        return Finding(
            check="llama-server", status=status, message=first, fix=exc.hint or INSTALL_HINT
        ), None
    build = f"build {info.build_number}" if info.build_number else "build not recorded"
    about = f"llama-server {info.version or '?'} ({build}) at {info.path}"
    if not info.devices:
        no_gpu = Finding(
            check="llama-server",
            status="warn",
            message=f"{about} sees no GPU (a CPU-only build?)",
            fix="install a CUDA build of llama.cpp",
        )
        return no_gpu, info
    devices = ", ".join(
        f"{d.name} {d.description} ({format_bytes(d.total_bytes)})" for d in info.devices
    )
    return Finding(check="llama-server", status="ok", message=f"{about}; devices: {devices}"), info


def device_links(info: ServerInfo | None) -> list[DeviceLink]:
    """The link of each CUDA and RPC device llama-server lists."""
    kinds: dict[str, Literal["pcie", "network"]] = {"CUDA": "pcie", "RPC": "network"}
    found = []
    for d in info.devices if info else ():
        kind = next((k for prefix, k in kinds.items() if d.name.startswith(prefix)), None)
        if kind is not None:
            found.append(DeviceLink(name=d.name, description=d.description, link=kind))
    return found


def device_findings(info: ServerInfo | None) -> list[Finding]:
    """Every device llama-server offloads to that NVML does not report (RPC servers, other
    backends), one finding each; an RPC device's link is the network."""
    if info is None:
        return []
    found = []
    for d in info.devices:
        if d.name.startswith("CUDA"):
            continue
        message = (
            f"{d.name} {d.description}: {format_bytes(d.total_bytes)}, "
            f"{format_bytes(d.free_bytes)} free"
        )
        if d.name.startswith("RPC"):
            message += "; no PCIe link here: its link is the network (weights, copies, results)"
        found.append(Finding(check="device", status="ok", message=message))
    return found


def rpc_findings(
    endpoints: Sequence[str], info: ServerInfo | None, reachable: Callable[[str], bool] | None
) -> list[Finding]:
    """Each ``--rpc`` server that llama-server does not list as a device: a failure when it
    does not answer, else a warning (it answers, but no device of it is known); the listed
    ones have their ``device`` finding already (``device_findings``)."""
    listed = {d.description for d in info.devices if d.name.startswith("RPC")} if info else set()
    found = []
    for endpoint in endpoints:
        if endpoint in listed:
            continue
        host, _, port = endpoint.rpartition(":")
        if reachable is not None and reachable(endpoint):
            if info is None:
                message = f"RPC server {endpoint} answers; its devices are not known"
                fix = "llama-server could not list them: see its finding above"
            else:
                message = f"RPC server {endpoint} answers, but llama-server lists no device of it"
                fix = "serve it with ggml-rpc-server of the same llama.cpp build"
            found.append(Finding(check="device", status="warn", message=message, fix=fix))
            continue
        found.append(
            Finding(
                check="device",
                status="fail",
                message=f"RPC server {endpoint} does not answer",
                fix=f"start it on that host: ggml-rpc-server -H {host or 'HOST'} "
                f"-p {port or 'PORT'}, or leave it out of --rpc",
            )
        )
    return found


# --- RAM read bandwidth --------------------------------------------------------------------------


def _machine(host: HostInfo) -> MachineIdentity:
    return MachineIdentity(
        cpu_model=host.cpu_model or "unknown CPU", ram_total_bytes=host.ram_total_bytes
    )


def _saved(figure: RamBandwidth, host: HostInfo) -> SavedRamBandwidth:
    return SavedRamBandwidth(
        machine=_machine(host),
        bytes_per_s=figure.bytes_per_s,
        threads=figure.threads,
        buffer_bytes=figure.buffer_bytes,
        passes=figure.passes,
        by_threads=figure.by_threads,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _describe(figure: SavedRamBandwidth) -> str:
    """What a figure is: how it was measured."""
    threads = "1 thread" if figure.threads == 1 else f"{figure.threads} threads"
    passes = "1 pass" if figure.passes == 1 else f"the median of {figure.passes} passes"
    text = (
        f"RAM read {_gbps(figure.bytes_per_s)} (a read-only streaming figure: {threads} "
        f"over a {format_bytes(figure.buffer_bytes)} buffer, {passes}"
    )
    single = figure.by_threads.get(1)
    if figure.threads > 1 and single:
        text += f"; 1 thread: {_gbps(single)}"
    return text + ")"


def ram_read_bandwidth(
    inputs: DoctorInputs, host: HostInfo
) -> tuple[RamRead | None, Finding | None]:
    """Measure the RAM read bandwidth and keep it (``inputs.machine_file``), or, with
    ``--no-measure``, read the one kept for this machine; the figure and its finding (none
    when there is neither a probe nor a file)."""
    file = inputs.machine_file
    if inputs.ram_probe is None:
        if file is None:
            return None, None
        try:
            saved = saved_ram_bandwidth(_machine(host), file)
        except MoetuneError as exc:
            return None, Finding(
                check="ram-bandwidth",
                status="warn",
                message=f"no saved RAM read bandwidth: {exc.message}",
                fix="run `moetune doctor` without --no-measure to measure it again",
            )
        if saved is None:
            return None, Finding(
                check="ram-bandwidth",
                status="ok",
                message="RAM read bandwidth not measured (--no-measure) and none saved for "
                "this machine",
            )
        message = f"{_describe(saved)}, measured {saved.measured_at} and saved in {file}"
        found = RamRead(figure=saved, source="saved", file=str(file))
        return found, Finding(check="ram-bandwidth", status="ok", message=message)
    cores = host.physical_cores or host.logical_cores
    measured = inputs.ram_probe.measure(cores, min(host.ram_available_bytes, host.ram_total_bytes))
    if measured is None:
        return None, Finding(
            check="ram-bandwidth",
            status="warn",
            message=f"RAM read bandwidth {inputs.ram_probe.why or 'not measured'}",
            fix="free RAM and run doctor again, or pass --ram-bandwidth GB/s",
        )
    figure = _saved(measured, host)
    message = f"{_describe(figure)} in {measured.seconds:.1f} s"
    if file is None:
        return RamRead(figure=figure, source="measured", file=None), Finding(
            check="ram-bandwidth", status="ok", message=message
        )
    try:
        save_ram_bandwidth(figure, file)
    except MoetuneError as exc:
        return RamRead(figure=figure, source="measured", file=None), Finding(
            check="ram-bandwidth",
            status="warn",
            message=f"{message}; not saved: {exc.message}",
            fix="make $MOETUNE_HOME writable, so that plan and calibrate can use the figure",
        )
    found = RamRead(figure=figure, source="measured", file=str(file))
    return found, Finding(check="ram-bandwidth", status="ok", message=f"{message}; saved in {file}")


# --- a model on this machine ---------------------------------------------------------------------


def gpu_target(inputs: DoctorInputs, gpus: list[GpuInfo]) -> GpuTarget | None:
    """The GPU to plan for: ``--vram``, ``--gpu``, else the first detected (its profile for
    bandwidth)."""
    if inputs.vram_bytes is not None:
        return GpuTarget("given (--vram)", inputs.vram_bytes, None, None, None)
    if (p := inputs.gpu_profile) is not None:
        return GpuTarget(
            p.name,
            p.vram_bytes,
            p.memory_bandwidth_bytes_per_s,
            p.pcie_bytes_per_s,
            _link(p.pcie_gen, p.pcie_lanes),
        )
    gpu = next((g for g in gpus if g.vram_total_bytes is not None), None)
    if gpu is None or gpu.vram_total_bytes is None:
        return None
    profile = match_detected(gpu.name, gpu.vram_total_bytes, list(inputs.hardware))
    bandwidth = gpu.memory_bandwidth_bytes_per_s or (
        profile.memory_bandwidth_bytes_per_s if profile else None
    )
    gen = gpu.pcie_gen_max or (profile.pcie_gen if profile else None)
    width = gpu.pcie_width_max or (profile.pcie_lanes if profile else None)
    pcie = pcie_bandwidth_bytes_per_s(gen, width) if gen and width else None
    return GpuTarget(
        gpu.name, gpu.vram_total_bytes, bandwidth, pcie, _link(gen, width) if pcie else None
    )


def _placement_memory(
    facts: ModelFacts, inputs: DoctorInputs, target: GpuTarget | None, host: HostInfo
) -> tuple[MemoryEstimate, RamCheck, int | None, Settings]:
    """The planned placement's memory (all on the CPU without a GPU) and its RAM check."""
    n_ctx = inputs.n_ctx or default_n_ctx(facts.context_length)
    settings = Settings(n_ctx=n_ctx, type_k=inputs.cache_type, type_v=inputs.cache_type)
    limit = host.ram_limit_bytes
    total = min(host.ram_total_bytes, limit) if limit else host.ram_total_bytes
    available = min(host.ram_available_bytes, total)
    if inputs.ram_bytes is not None:
        total = available = inputs.ram_bytes
    if target is None and not inputs.devices:
        memory = estimate(facts, Placement(n_gpu_layers=0), settings)
        return memory, check_ram(memory, total, available), None, settings
    request = PlanRequest(
        model_path=facts.paths[0],
        devices=inputs.devices or single_device(settings, target.vram_bytes if target else 0),
        target_vram=inputs.device_targets or (inputs.target_bytes,),
        headrooms=inputs.device_headrooms or (inputs.headroom_bytes,),
        settings=settings,
        ram_total_bytes=total,
        ram_available_bytes=available,
        device_args=inputs.device_args,
    )
    if not inputs.force:
        check_targets(request.devices, request.target_vram)
    plan = make_plan(facts, request)
    if plan.fails == "gpu":
        raise DoesNotFitError(plan.reason or "does not fit", hint="; ".join(plan.suggestions))
    rec = plan.recommended
    return rec.memory, plan.ram, rec.n_cpu_moe, plan.settings


def ram_model_finding(memory: MemoryEstimate, ram: RamCheck, n_cpu_moe: int | None) -> Finding:
    where = f"--n-cpu-moe {n_cpu_moe}" if n_cpu_moe is not None else "CPU only"
    message = (
        f"RAM for the CPU side ({where}: {format_bytes(memory.cpu_expert_bytes)} of "
        f"experts, {format_bytes(memory.host_bytes)} in all): {ram.message}"
    )
    if ram.status == "ok":
        return Finding(check="model-ram", status="ok", message=message)
    status: Status = "fail" if ram.status == "fail" else "warn"
    return Finding(
        check="model-ram",
        status=status,
        message=message,
        fix="free RAM, add RAM, use a smaller quant, or a shorter context",
    )


def bytes_per_token(facts: ModelFacts, memory: MemoryEstimate) -> tuple[int, int]:
    """What one generated token reads from the devices' memory and from RAM at a placement:
    the weights outside the routed experts (the token embedding aside: one row of it) and
    the active share ``n_used / n_expert`` of the routed experts on each side (the KV cache
    aside). The speed model (core/speed.py) is to replace this."""
    share = facts.n_experts_used / facts.n_experts if facts.n_experts else 0.0
    embedding = facts.global_bytes_by_role.get(Role.TOKEN_EMBD, 0)
    gpu_dense = memory.gpu_weights_bytes - memory.gpu_expert_bytes
    cpu_dense = max(memory.cpu_weights_bytes - memory.cpu_expert_bytes - embedding, 0)
    return (
        round(gpu_dense + memory.gpu_expert_bytes * share),
        round(cpu_dense + memory.cpu_expert_bytes * share),
    )


def ram_bandwidth(inputs: DoctorInputs, ram_read: RamRead | None) -> tuple[int, RamBandwidthSource]:
    """The RAM bandwidth a ceiling uses: ``--ram-bandwidth``, else this machine's (measured
    now or saved), else the assumed desktop figure."""
    if inputs.ram_bandwidth_bytes_per_s is not None:
        return inputs.ram_bandwidth_bytes_per_s, "given"
    if ram_read is not None:
        return ram_read.figure.bytes_per_s, ram_read.source
    return DEFAULT_RAM_BANDWIDTH_BYTES_PER_S, "assumed"


def speed_ceiling(
    facts: ModelFacts,
    memory: MemoryEstimate,
    n_cpu_moe: int | None,
    *,
    target: GpuTarget | None,
    ram: tuple[int, RamBandwidthSource],
    n_ubatch: int,
) -> SpeedCeiling:
    """Decode and prompt ceilings for the planned placement."""
    gpu_bytes, cpu_bytes = bytes_per_token(facts, memory)
    ram_bw, ram_source = ram
    gpu_bw = target.bandwidth_bytes_per_s if target else None
    gpu_s = gpu_bytes / gpu_bw if gpu_bw else 0.0
    cpu_s = cpu_bytes / ram_bw
    pcie = target.pcie_bytes_per_s if target else None
    copies = memory.cpu_expert_bytes
    prefill = n_ubatch * pcie / copies if pcie and copies else None
    return SpeedCeiling(
        n_cpu_moe=n_cpu_moe,
        gpu_bytes_per_token=gpu_bytes,
        cpu_bytes_per_token=cpu_bytes,
        gpu_bandwidth_bytes_per_s=gpu_bw,
        ram_bandwidth_bytes_per_s=ram_bw,
        ram_bandwidth_source=ram_source,
        decode_tps=1 / (gpu_s + cpu_s) if gpu_s + cpu_s > 0 else None,
        bottleneck="RAM bandwidth" if cpu_s > 0 and cpu_s >= gpu_s else "GPU memory bandwidth",
        cpu_expert_bytes=copies,
        pcie_bytes_per_s=pcie,
        n_ubatch=n_ubatch,
        prefill_tps=prefill,
    )


def _per_token(c: SpeedCeiling, target: GpuTarget | None) -> str:
    """What each token reads from RAM and from VRAM, and how long that takes."""
    parts = []
    if c.cpu_bytes_per_token:
        assumed = {
            "assumed": " (assumed: run doctor without --no-measure, or pass --ram-bandwidth)",
            "given": " (--ram-bandwidth)",
            "measured": " (measured)",
            "saved": " (measured before)",
        }[c.ram_bandwidth_source]
        ms = 1000 * c.cpu_bytes_per_token / c.ram_bandwidth_bytes_per_s
        parts.append(
            f"{format_bytes(c.cpu_bytes_per_token)} from RAM at "
            f"{_gbps(c.ram_bandwidth_bytes_per_s)}{assumed} = {ms:.1f} ms"
        )
    if c.gpu_bytes_per_token and c.gpu_bandwidth_bytes_per_s:
        ms = 1000 * c.gpu_bytes_per_token / c.gpu_bandwidth_bytes_per_s
        parts.append(
            f"{format_bytes(c.gpu_bytes_per_token)} from VRAM at "
            f"{_gbps(c.gpu_bandwidth_bytes_per_s)} = {ms:.1f} ms"
        )
    elif c.gpu_bytes_per_token and target is not None:
        parts.append(
            f"{format_bytes(c.gpu_bytes_per_token)} from VRAM, bandwidth unknown (no "
            f"hardware profile for {target.name}: pass --gpu NAME)"
        )
    return "; ".join(parts)


def decode_finding(ceiling: SpeedCeiling, target: GpuTarget | None, ram: RamCheck) -> Finding:
    c = ceiling
    if c.decode_tps is None:
        return Finding(
            check="decode",
            status="warn",
            message=f"decode ceiling unknown: {_per_token(c, target)}",
            fix="pass --gpu with a hardware profile for this card",
        )
    where = "CPU only" if target is None else "this placement"
    if c.n_cpu_moe is not None:
        where = f"--n-cpu-moe {c.n_cpu_moe}"
    message = (
        f"decode ceiling ~{c.decode_tps:.1f} tok/s at {where}, bottleneck: "
        f"{c.bottleneck}; per token {_per_token(c, target)}"
    )
    if ram.status in ("warn", "fail"):
        return Finding(
            check="decode",
            status="warn",
            message=message + "; but RAM is short, so pages come from disk: far slower",
            fix="make the CPU-resident weights fit in free RAM first",
        )
    if c.decode_tps >= SLOW_DECODE_TPS:
        return Finding(check="decode", status="ok", message=message)
    fix = (
        "keep more experts on the GPU (shorter context or q4_0 cache frees VRAM), populate "
        "every memory channel, use -t = physical cores, or a smaller quant"
    )
    if c.bottleneck != "RAM bandwidth":
        fix = "a smaller quant: the GPU's own memory bandwidth is the limit"
    return Finding(check="decode", status="warn", message=message, fix=fix)


def prefill_finding(ceiling: SpeedCeiling, target: GpuTarget | None) -> Finding | None:
    c = ceiling
    if c.prefill_tps is None or c.pcie_bytes_per_s is None or target is None:
        return None
    message = (
        f"prompt ceiling ~{c.prefill_tps:.0f} tok/s at -ub {c.n_ubatch}: each micro-batch "
        f"copies {format_bytes(c.cpu_expert_bytes)} of CPU experts to the GPU over "
        f"{target.pcie_label} ({_gbps(c.pcie_bytes_per_s)})"
    )
    if c.n_ubatch < 2048:
        message += f"; ~{c.prefill_tps * 2048 / c.n_ubatch:.0f} tok/s with -ub 2048 -b 2048"
    if c.pcie_bytes_per_s >= 20 * 10**9:
        return Finding(check="prefill", status="ok", message=message)
    return Finding(
        check="prefill",
        status="warn",
        message=message + ": a slow link",
        fix="-ub 2048 -b 2048 copies four times less often; a PCIe 4.0 x16 slot doubles the link",
    )


def model_findings(
    facts: ModelFacts,
    inputs: DoctorInputs,
    gpus: list[GpuInfo],
    host: HostInfo,
    ram_read: RamRead | None = None,
) -> tuple[list[Finding], SpeedCeiling | None]:
    if inputs.devices_error is not None:
        return [
            Finding(
                check="model-fit",
                status="fail",
                message=f"not checked: {inputs.devices_error}",
                fix="fix the device findings above, or give each device's memory with --vram",
            )
        ], None
    target = gpu_target(inputs, gpus)
    try:
        memory, ram, n_cpu_moe, settings = _placement_memory(facts, inputs, target, host)
    except (DoesNotFitError, BadValueError) as exc:
        return [Finding(check="model-fit", status="fail", message=exc.message, fix=exc.hint)], None
    bandwidth = ram_bandwidth(inputs, ram_read)
    if len(inputs.devices) > 1:  # several devices: fit, RAM, and the RAM side's ceiling
        peaks = ", ".join(f"{d.name} {format_bytes(d.total_bytes)}" for d in memory.devices)
        fit = Finding(
            check="model-fit", status="ok", message=f"fits {len(inputs.devices)} devices: {peaks}"
        )
        ceiling = speed_ceiling(
            facts, memory, n_cpu_moe, target=None, ram=bandwidth, n_ubatch=settings.n_ubatch
        )
        found = [fit, ram_model_finding(memory, ram, n_cpu_moe)]
        if ceiling.decode_tps is None:
            return found, None
        decode = decode_finding(ceiling, None, ram)
        decode.message += " (the devices' own reads left out)"
        return [*found, decode], ceiling
    ceiling = speed_ceiling(
        facts, memory, n_cpu_moe, target=target, ram=bandwidth, n_ubatch=settings.n_ubatch
    )
    found = [ram_model_finding(memory, ram, n_cpu_moe), decode_finding(ceiling, target, ram)]
    if (prefill := prefill_finding(ceiling, target)) is not None:
        found.append(prefill)
    return found, ceiling


def diagnose(inputs: DoctorInputs, facts: ModelFacts | None = None) -> DoctorReport:
    """Every finding for this machine, and for ``facts`` on it when given."""
    gpus, host = inputs.gpus.gpus(), inputs.host.host()
    hardware = list(inputs.hardware)
    described = None
    if inputs.gpu_profile is not None:
        described = f"--gpu {inputs.gpu_profile.id}"
    elif inputs.vram_bytes is not None:
        described = f"--vram {format_bytes(inputs.vram_bytes)}"
    server, info = server_finding(inputs.server)
    # devices NVML does not see: another backend's (Vulkan0, ROCm0), not RPC's or CUDA's
    others = [
        d.name
        for d in (info.devices if info else ())
        if kind_of(d.name) != "rpc" and not d.name.startswith("CUDA")
    ]
    findings = gpu_findings(gpus, inputs.gpus.why, described, inputs.rpc_endpoints, others)
    links = [pcie_link(gpu) for gpu in gpus]
    for gpu, link in zip(gpus, links, strict=True):
        profile = match_detected(gpu.name, gpu.vram_total_bytes, hardware)
        findings.append(pcie_finding(link, profile))
    ram_read, bandwidth = ram_read_bandwidth(inputs, host)
    optional = [
        driver_finding(gpus),
        cpu_finding(host),
        ram_finding(host),
        bandwidth,
        swap_finding(host),
        wsl_finding(host),
    ]
    findings += [f for f in optional if f is not None]
    findings.append(server)
    findings += device_findings(info)
    findings += rpc_findings(inputs.rpc_endpoints, info, inputs.rpc_reachable)
    ceiling = None
    if facts is not None:
        more, ceiling = model_findings(facts, inputs, gpus, host, ram_read)
        findings += more
    model = facts.paths[0] if facts is not None else None
    return DoctorReport(
        findings=findings,
        gpus=gpus,
        host=host,
        server=info,
        model=model,
        ceiling=ceiling,
        pcie=links,
        device_links=device_links(info),
        ram_read=ram_read,
    )


def doctor_report(
    model: Path | None,
    *,
    vram: Sizes | None,
    gpu: str | None,
    rpc: str | None,
    ram: int | None,
    ram_bandwidth: int | None,
    ctx: Ctx | None,
    cache_type: str,
    target_vram: Sizes | None,
    headroom: Sizes,
    server: str | None,
    measure: bool = True,
    force: bool = False,
) -> DoctorReport:
    """``moetune doctor``: this machine as found here (GPUs, host, its RAM read bandwidth,
    llama-server), what the options describe instead (``--vram``, ``--gpu``, ``--ram``...),
    and ``model`` on it. ``measure=False`` (``--no-measure``): the saved RAM figure."""
    from moetune.hardware import detect_gpu_probe
    from moetune.hardware.host import LiveHostProbe
    from moetune.hardware.membw import StreamingReadProbe
    from moetune.jobs.devices import plan_devices, split_endpoints
    from moetune.jobs.loader import load_model_facts
    from moetune.jobs.verify import reachable
    from moetune.llamacpp.process import find_server, server_info
    from moetune.store.paths import machine_file

    hardware, _ = scan_hardware_profiles()  # `profiles list` names the broken ones
    endpoints = split_endpoints(rpc)

    def lookup() -> ServerInfo:
        path = find_server(server)
        return server_info(path, rpc=endpoints) if endpoints else server_info(path)

    several = model is not None and ((vram is not None and len(vram) > 1) or bool(endpoints))
    devices, devices_error = None, None
    if several:
        try:
            devices = plan_devices(
                vram=vram, rpc=rpc, gpu_index=None, gpu_profile=gpu, overhead=None, server=server
            )
        except (NoGpuError, ServerFailedError, ServerNotFoundError) as exc:  # found below
            devices_error = f"the devices are not known ({exc.message.splitlines()[0]})"
    n = len(devices.devices) if devices else 1
    targets = per_device(target_vram, n, "--target-vram")
    headrooms = per_device(headroom, n, "--headroom") or headroom.values
    inputs = DoctorInputs(
        gpus=detect_gpu_probe(),
        host=LiveHostProbe(),
        server=lookup,
        hardware=hardware,
        gpu_profile=find_hardware_profile(gpu) if gpu else None,
        vram_bytes=vram[0] if vram is not None and not devices else None,
        ram_bytes=ram,
        ram_bandwidth_bytes_per_s=ram_bandwidth,
        ram_probe=StreamingReadProbe() if measure else None,
        machine_file=machine_file(),
        n_ctx=ctx.tokens if ctx is not None else None,
        cache_type=cache_type,
        target_bytes=targets[0] if targets else None,
        force=force,
        headroom_bytes=headrooms[0],
        devices=devices.devices if devices else (),
        device_targets=tuple(targets or ()),
        device_headrooms=headrooms,
        device_args=devices.device_args if devices else (),
        rpc_endpoints=endpoints,
        rpc_reachable=reachable,
        devices_error=devices_error,
    )
    return diagnose(inputs, load_model_facts(model) if model is not None else None)
