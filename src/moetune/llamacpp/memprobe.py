"""How much device memory a running llama-server uses, behind one Protocol.

- ``ProcessProbe`` wraps an NVML or nvidia-smi ``GpuProbe``: the server process's own use on
  one GPU, which includes the CUDA context and pools (what the card really loses);
- ``LogProbe`` sums llama.cpp's own buffer lines for a device (model + KV + RS + compute):
  works for CUDA, ROCm, Vulkan, Metal and RPC devices alike, but leaves out the runtime
  overhead, which moetune then adds from its documented default (``--overhead``).

Tests have a fake of the same Protocol (tests/support/fakes.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from moetune.core.devices import DeviceSpec
from moetune.hardware.base import GpuInfo, GpuProbe
from moetune.llamacpp.log import total_mib
from moetune.llamacpp.process import RunningServer
from moetune.record import record
from moetune.units import MIB

LOG_KINDS = ("model", "KV", "RS", "compute")


class MemoryProbe(Protocol):
    """Measures a server's use of the offload device, in bytes (None: no figure)."""

    @property
    def name(self) -> str: ...

    @property
    def includes_overhead(self) -> bool:
        """True when the figure already holds the CUDA context and pools."""
        ...

    @property
    def missing(self) -> str:
        """Why ``device_bytes`` can give no figure for a server that loaded."""
        ...

    def device_bytes(self, server: RunningServer) -> int | None: ...


@record(frozen=True)
class ProcessProbe:
    """The server's own use of one GPU, from NVML or nvidia-smi."""

    gpus: GpuProbe
    gpu_index: int = 0

    @property
    def name(self) -> str:
        return f"{self.gpus.name} (process memory on GPU {self.gpu_index})"

    @property
    def includes_overhead(self) -> bool:
        return True

    @property
    def missing(self) -> str:
        return f"{self.gpus.name} listed no memory of llama-server on GPU {self.gpu_index}"

    def device_bytes(self, server: RunningServer) -> int | None:
        return self.gpus.process_used_bytes(server.pid).get(self.gpu_index)


@record(frozen=True)
class LogProbe:
    """llama.cpp's buffer lines for one device: its buffer type (``CUDA0``,
    ``RPC0[127.0.0.1:50052]``: every RPC server's first device is ``RPC0[...]``, so the whole
    name is matched), shown by its device name."""

    device: str
    buft: str

    @property
    def name(self) -> str:
        return f"llama.cpp log ({self.device} buffers)"

    @property
    def includes_overhead(self) -> bool:
        return False

    @property
    def missing(self) -> str:
        return f"llama-server's log has no buffer on {self.buft} (nothing was placed there)"

    def device_bytes(self, server: RunningServer) -> int | None:
        lines = [b for b in server.buffers() if b.device == self.buft]
        if not lines:
            return None
        mib = sum(total_mib(lines, kind) for kind in LOG_KINDS)
        return round(mib * MIB)


def nvml_index(device: DeviceSpec, gpus: Sequence[GpuInfo]) -> int | None:
    """The NVML index of a CUDA device: the same number when CUDA orders by PCI bus
    (``CUDA_DEVICE_ORDER=PCI_BUS_ID``) or the GPUs are alike, else the GPU of the same name
    and size (None when that is not one GPU)."""
    index = int(device.name.removeprefix("CUDA") or 0)
    alike = len({(g.name, g.vram_total_bytes) for g in gpus}) <= 1
    if os.environ.get("CUDA_DEVICE_ORDER", "").upper() == "PCI_BUS_ID" or alike:
        return index if index < len(gpus) else None
    same = [
        g
        for g in gpus
        if g.name == device.description
        and g.vram_total_bytes is not None
        and abs(g.vram_total_bytes - (device.total_bytes or 0)) < 256 * MIB
    ]
    return same[0].index if len(same) == 1 else None


def choose_probe(device: DeviceSpec, gpus: GpuProbe | None) -> MemoryProbe:
    """NVML/nvidia-smi process memory for a CUDA device when it can be told apart, else the
    log's buffer lines for the device."""
    if device.name.startswith("CUDA") and gpus is not None and (found := gpus.gpus()):
        index = nvml_index(device, found)
        if index is not None:
            return ProcessProbe(gpus, index)
    return LogProbe(device.name, device.buft)
