"""What the probes report, the Protocols they implement, and the errors they raise.

Kept apart from ``__init__.py`` so the probe modules can import it without a cycle; everything
here is re-exported from ``moetune.hardware``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from moetune.errors import ExitCode, MoetuneError, NoGpuError
from moetune.record import record

VRAM_HINT = "pass --vram to plan for a GPU without detecting one"


@record(frozen=True, kw_only=True)
class GpuInfo:
    """One NVIDIA GPU as the driver reports it. Sizes in bytes; ``None`` = not reported.

    ``index`` is the driver's (NVML / nvidia-smi) index, which follows the PCI bus order; CUDA
    numbers devices fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so match devices by
    ``pci_bus_id`` or ``uuid`` rather than by index when it matters.

    The ``vram_*`` fields are ``None`` on unified-memory GPUs (GB10, Grace Hopper, Jetson),
    where the driver answers "Not Supported": the caller must then ask for ``--vram``.
    ``pcie_gen_current`` is often below the maximum at idle (power saving), not a fault.
    ``pcie_gen_max``/``pcie_width_max`` are the most the card and its slot allow together;
    ``pcie_gen_card_max`` is the card's own maximum generation (the slot aside).
    """

    index: int
    name: str
    uuid: str | None = None
    vram_total_bytes: int | None
    vram_free_bytes: int | None
    vram_used_bytes: int | None
    driver_version: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_gen_card_max: int | None = None
    pci_bus_id: str | None = None
    memory_bandwidth_bytes_per_s: int | None = None


@record(frozen=True, kw_only=True)
class HostInfo:
    """The machine's RAM, swap and CPU cores. Sizes in bytes.

    ``ram_limit_bytes`` is the cgroup memory limit (a container or a systemd slice) when one is
    set below the machine's RAM; ``None`` when there is none or it cannot be read.
    """

    ram_total_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    physical_cores: int | None
    logical_cores: int
    is_wsl: bool
    ram_limit_bytes: int | None = None
    cpu_model: str | None = None  # "AMD Ryzen 9 7950X 16-Core Processor"; None: not reported


@record(frozen=True, kw_only=True)
class RamBandwidth:
    """A read-only streaming figure of RAM: ``threads`` threads each summing its share of a
    ``buffer_bytes`` buffer (larger than the last-level cache), the median of ``passes``
    passes. ``by_threads``: each thread count tried and its median, bytes per second."""

    bytes_per_s: int
    threads: int
    buffer_bytes: int
    passes: int
    by_threads: dict[int, int]
    seconds: float  # the whole measurement, the buffer's fill included

    @property
    def single_thread_bytes_per_s(self) -> int | None:
        return self.by_threads.get(1)


@runtime_checkable
class GpuProbe(Protocol):
    """Finds NVIDIA GPUs and measures a process's use of them.

    ``gpus()`` returns ``[]`` when there is no driver or no GPU and never raises for that;
    ``why`` then says what is missing and what to do. A GPU that fails mid-query raises a
    ``GpuQueryError``; a field the GPU does not report is ``None``.
    """

    name: str

    @property
    def why(self) -> str | None:
        """Why ``gpus()`` is empty or incomplete, with what to do; ``None`` when all is well."""
        ...

    def gpus(self) -> list[GpuInfo]:
        """Every GPU the driver sees, in driver index order."""
        ...

    def process_used_bytes(self, pid: int) -> dict[int, int]:
        """GPU index -> bytes used by ``pid`` and its children; ``{}`` when unknown."""
        ...


@runtime_checkable
class HostProbe(Protocol):
    """Reports the host's memory and CPU."""

    def host(self) -> HostInfo:
        """A fresh snapshot of RAM, swap and cores."""
        ...


@runtime_checkable
class RamBandwidthProbe(Protocol):
    """Measures the host's RAM read bandwidth; ``measure`` returns ``None`` (with ``why``)
    when it cannot, and never raises for that."""

    @property
    def why(self) -> str | None:
        """Why the last ``measure()`` returned ``None``."""
        ...

    def measure(self, max_threads: int, available_bytes: int) -> RamBandwidth | None:
        """A fresh figure, using at most ``max_threads`` threads and a buffer well below
        ``available_bytes``."""
        ...


class GpuQueryError(MoetuneError):
    """The driver answered at first, then failed while a GPU was being queried."""

    exit_code = ExitCode.NO_GPU


class GpuLostError(GpuQueryError):
    """The driver reports the GPU as lost (fallen off the bus); only a reset brings it back."""


class NoGpuProbe:
    """The probe used when neither NVML nor nvidia-smi works: no GPUs, and says why."""

    name = "none"

    def __init__(self, why: str) -> None:
        self._why = why

    @property
    def why(self) -> str:
        """What is missing and what to do."""
        return self._why

    def gpus(self) -> list[GpuInfo]:
        """Always empty."""
        return []

    def process_used_bytes(self, pid: int) -> dict[int, int]:
        """Always unknown."""
        return {}


def require_gpus(probe: GpuProbe) -> list[GpuInfo]:
    """The probe's GPUs, or a ``moetune.errors.NoGpuError`` carrying its ``why`` if none."""
    found = probe.gpus()
    if not found:
        raise NoGpuError(probe.why or "no NVIDIA GPU found", hint=VRAM_HINT)
    return found
