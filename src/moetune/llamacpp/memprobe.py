"""How much device memory a running llama-server uses, behind one Protocol.

- ``ProcessProbe`` wraps an NVML or nvidia-smi ``GpuProbe``: the server process's own use on
  one GPU, which includes the CUDA context and pools (what the card really loses);
- ``LogProbe`` sums llama.cpp's own buffer lines for a device (model + KV + RS + compute):
  works for CUDA, ROCm, Vulkan, Metal and RPC devices alike, but leaves out the runtime
  overhead, which moetune then adds from its documented default (``--overhead``).

Tests have a fake of the same Protocol (tests/fakes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from moetune.hardware.base import GpuProbe
from moetune.llamacpp.log import total_mib
from moetune.llamacpp.process import RunningServer
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

    def device_bytes(self, server: RunningServer) -> int | None: ...


@dataclass(frozen=True)
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

    def device_bytes(self, server: RunningServer) -> int | None:
        return self.gpus.process_used_bytes(server.pid).get(self.gpu_index)


@dataclass(frozen=True)
class LogProbe:
    """llama.cpp's buffer lines for one device (name prefix, e.g. ``CUDA0`` or ``RPC0``)."""

    device_prefix: str

    @property
    def name(self) -> str:
        return f"llama.cpp log ({self.device_prefix} buffers)"

    @property
    def includes_overhead(self) -> bool:
        return False

    def device_bytes(self, server: RunningServer) -> int | None:
        lines = server.buffers()
        if not any(b.device.startswith(self.device_prefix) for b in lines):
            return None
        mib = sum(total_mib(lines, kind, self.device_prefix) for kind in LOG_KINDS)
        return round(mib * MIB)


def device_prefix(device_name: str) -> str:
    """``RPC0[127.0.0.1:50052]`` -> ``RPC0``; ``CUDA0`` -> ``CUDA0``."""
    return device_name.split("[", 1)[0]


def choose_probe(device_name: str, gpus: GpuProbe | None) -> MemoryProbe:
    """NVML/nvidia-smi process memory for a CUDA device when available, else the log."""
    prefix = device_prefix(device_name)
    if prefix.startswith("CUDA") and gpus is not None and gpus.gpus():
        return ProcessProbe(gpus, int(prefix.removeprefix("CUDA") or 0))
    return LogProbe(prefix)
