"""What every doctor check returns and reads: a ``Finding`` (ok / warn / fail, with its fix),
the report that gathers them with what was probed (GPUs, host, llama-server, PCIe links, the
RAM read figure, a model's speed ceiling), and the probes and options a diagnosis uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from moetune.core.devices import DeviceSpec
from moetune.core.planner import DEFAULT_HEADROOM_BYTES
from moetune.hardware.base import GpuInfo, GpuProbe, HostInfo, HostProbe, RamBandwidthProbe
from moetune.record import record
from moetune.records.server import ServerInfo
from moetune.store.hardware import HardwareProfile
from moetune.store.machine import SavedRamBandwidth

Status = Literal["ok", "warn", "fail"]
RamBandwidthSource = Literal["given", "measured", "saved", "assumed"]


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


def gbps(rate: float) -> str:
    """A rate in GB/s: whole from 100 GB/s, else to one decimal."""
    from moetune.units import format_rate

    return format_rate(rate)
