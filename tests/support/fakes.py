"""Test doubles for what this machine lacks (an NVIDIA GPU) or what takes too long here (a
RAM bandwidth measurement), behind the real Protocols: GPU, host and RAM bandwidth probes
(hardware.base) and a memory probe (llamacpp.memprobe)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moetune.hardware.base import GpuInfo, HostInfo, RamBandwidth
from moetune.llamacpp.process import RunningServer
from moetune.units import GIB

RTX_4090 = "NVIDIA GeForce RTX 4090"


class FakeGpuProbe:
    """Reports the GPUs it was given; ``process_bytes`` maps pid -> GPU index -> bytes."""

    name = "fake"

    def __init__(
        self,
        gpus: list[GpuInfo],
        process_bytes: dict[int, dict[int, int]] | None = None,
        why: str | None = None,
    ) -> None:
        self._gpus = list(gpus)
        self.process_bytes = dict(process_bytes or {})
        self._why = why

    @property
    def why(self) -> str | None:
        """The explanation it was given (``None`` by default)."""
        return self._why

    def gpus(self) -> list[GpuInfo]:
        """A copy of the GPUs it was given."""
        return list(self._gpus)

    def process_used_bytes(self, pid: int) -> dict[int, int]:
        """What ``process_bytes`` says about ``pid``; ``{}`` when it says nothing."""
        return dict(self.process_bytes.get(pid, {}))

    @classmethod
    def single(
        cls,
        vram_total_bytes: int = 24 * GIB,
        name: str = RTX_4090,
        vram_used_bytes: int = 0,
    ) -> FakeGpuProbe:
        """One idle GPU (an RTX 4090 by default)."""
        return cls([fake_gpu(0, vram_total_bytes, name, vram_used_bytes)])

    @classmethod
    def several(cls, *vram_total_bytes: int, name: str = RTX_4090) -> FakeGpuProbe:
        """One idle GPU per size given, indexed from 0."""
        return cls([fake_gpu(i, size, name) for i, size in enumerate(vram_total_bytes)])

    @classmethod
    def none(cls, why: str = "no NVIDIA driver found (fake)") -> FakeGpuProbe:
        """No GPU, with an explanation."""
        return cls([], why=why)


def fake_gpu(index: int, vram_total_bytes: int, name: str = RTX_4090, used: int = 0) -> GpuInfo:
    """A plausible GPU with ``used`` bytes taken (PCIe 4.0 x16, a recent driver)."""
    return GpuInfo(
        index=index,
        name=name,
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        vram_total_bytes=vram_total_bytes,
        vram_free_bytes=vram_total_bytes - used,
        vram_used_bytes=used,
        driver_version="550.54.14",
        pcie_gen_current=4,
        pcie_gen_max=4,
        pcie_width_current=16,
        pcie_width_max=16,
        pci_bus_id=f"00000000:{index + 1:02X}:00.0",
    )


class FakeHostProbe:
    """Reports the host it was given."""

    name = "fake"

    def __init__(self, host: HostInfo) -> None:
        self._host = host

    def host(self) -> HostInfo:
        """The host it was given."""
        return self._host

    @classmethod
    def typical(
        cls,
        ram_total_bytes: int = 64 * GIB,
        ram_available_bytes: int | None = None,
        logical_cores: int = 16,
    ) -> FakeHostProbe:
        """A desktop: all RAM but 4 GiB available, 8 GiB swap unused, SMT cores."""
        available = (
            ram_total_bytes - 4 * GIB if ram_available_bytes is None else ram_available_bytes
        )
        return cls(
            HostInfo(
                ram_total_bytes=ram_total_bytes,
                ram_available_bytes=max(available, 0),
                swap_total_bytes=8 * GIB,
                swap_used_bytes=0,
                physical_cores=max(logical_cores // 2, 1),
                logical_cores=logical_cores,
                is_wsl=False,
                cpu_model="Fake CPU",
            )
        )


class FakeRamBandwidthProbe:
    """Returns the figure it was given (``None``: cannot measure, saying ``why``); records
    the ``measure`` calls' arguments."""

    name = "fake"

    def __init__(self, figure: RamBandwidth | None, why: str | None = None) -> None:
        self._figure = figure
        self._why = why
        self.calls: list[tuple[int, int]] = []

    @property
    def why(self) -> str | None:
        return self._why

    def measure(self, max_threads: int, available_bytes: int) -> RamBandwidth | None:
        self.calls.append((max_threads, available_bytes))
        return self._figure

    @classmethod
    def typical(cls, gb_s: float = 80.0) -> FakeRamBandwidthProbe:
        """A dual-channel DDR5 desktop: 8 threads at ``gb_s``, one thread at 40 %."""
        best = round(gb_s * 1e9)
        return cls(
            RamBandwidth(
                bytes_per_s=best,
                threads=8,
                buffer_bytes=512 * 1024**2,
                passes=5,
                by_threads={
                    1: round(best * 0.4),
                    2: round(best * 0.7),
                    4: round(best * 0.95),
                    8: best,
                },
                seconds=0.9,
            )
        )


@dataclass(frozen=True)
class FakeMemoryProbe:
    """Returns ``measure(server)``: a stand-in for tests of the code that reads a probe."""

    measure: Callable[[RunningServer], int | None]
    name: str = "fake"
    includes_overhead: bool = True
    missing: str = "the fake measured nothing"

    def device_bytes(self, server: RunningServer) -> int | None:
        return self.measure(server)
