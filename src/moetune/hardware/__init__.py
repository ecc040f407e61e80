"""Hardware probes: NVIDIA GPUs (NVML, else nvidia-smi), the host (procfs and sysfs, else
psutil) and its RAM read bandwidth (numpy).

Use ``detect_gpu_probe()``, ``LiveHostProbe()`` and ``StreamingReadProbe()``. They implement
the ``GpuProbe`` / ``HostProbe`` / ``RamBandwidthProbe`` Protocols of ``hardware.base``; the
tests' fakes (tests/support/fakes.py) implement the same Protocols. ``--vram`` and ``--gpu``
plans use no probe where ``nvidia_driver_here()`` says there is no driver (the check by
llama.cpp needs the devices here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moetune.errors import NoGpuError
from moetune.hardware.base import (
    VRAM_HINT,
    GpuInfo,
    GpuLostError,
    GpuProbe,
    GpuQueryError,
    HostInfo,
    HostProbe,
    NoGpuProbe,
    RamBandwidth,
    RamBandwidthProbe,
    require_gpus,
)

if TYPE_CHECKING:
    from moetune.hardware.host import LiveHostProbe
    from moetune.hardware.membw import StreamingReadProbe
    from moetune.hardware.nvml import NvmlProbe
    from moetune.hardware.smi import SmiProbe

_LAZY = {
    "LiveHostProbe": "host",
    "NvmlProbe": "nvml",
    "SmiProbe": "smi",
    "StreamingReadProbe": "membw",
}


_NVIDIA_NODES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")  # Linux, WSL2


def nvidia_driver_here() -> bool:
    """Whether an NVIDIA driver may be loaded (its device nodes exist): a check without a
    probe, so that a ``--vram`` plan on a machine without one starts nothing."""
    import sys
    from pathlib import Path

    if not sys.platform.startswith("linux"):
        return True  # elsewhere, only a probe can tell
    return any(Path(node).exists() for node in _NVIDIA_NODES)


def __getattr__(name: str) -> Any:
    """The probes load on first use (``moetune plan --vram`` needs neither NVML nor nvidia-smi)."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"moetune.hardware.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'moetune.hardware' has no attribute {name!r}")


__all__ = [
    "VRAM_HINT",
    "GpuInfo",
    "GpuLostError",
    "GpuProbe",
    "GpuQueryError",
    "HostInfo",
    "HostProbe",
    "LiveHostProbe",
    "NoGpuError",
    "NoGpuProbe",
    "NvmlProbe",
    "RamBandwidth",
    "RamBandwidthProbe",
    "SmiProbe",
    "StreamingReadProbe",
    "detect_gpu_probe",
    "nvidia_driver_here",
    "require_gpus",
]


def detect_gpu_probe(nvml: Any = None, smi_executable: str | None = None) -> GpuProbe:
    """NVML if it starts, else nvidia-smi if it lists GPUs, else a ``NoGpuProbe`` saying why.

    ``nvml`` and ``smi_executable`` replace the ``pynvml`` module and the nvidia-smi on PATH
    (for tests). When NVML starts but sees no GPU, the NVML probe is returned all the same:
    its ``gpus()`` is ``[]`` and its ``why`` says so.
    """
    from moetune.hardware.nvml import NvmlProbe
    from moetune.hardware.smi import SmiProbe

    nvml_probe = NvmlProbe(nvml)
    if nvml_probe.available():
        return nvml_probe
    smi_probe = SmiProbe(smi_executable)
    if smi_probe.available():
        return smi_probe
    smi_why = smi_probe.why if smi_probe.executable() else None  # absent: NVML said enough
    reasons = [why for why in (nvml_probe.why, smi_why) if why]
    return NoGpuProbe(_merge(reasons))


def _merge(reasons: list[str]) -> str:
    """One message from the probes' reasons, the shared "pass --vram" advice said once."""
    tail = f", or {VRAM_HINT}"
    trimmed = [why.removesuffix(tail).removesuffix(f": {VRAM_HINT}") for why in reasons]
    return "; ".join(trimmed or ["no NVIDIA GPU found"]) + tail
