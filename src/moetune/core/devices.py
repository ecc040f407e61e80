"""The offload devices a plan is for, in llama.cpp's order, with what each costs beyond
llama.cpp's own buffers.

Order (src/llama.cpp, build 11434): RPC devices first, in ``--rpc`` order, then the GPUs
(CUDA numbers them; NVML's order is the PCI bus's, the same only with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``); ``-dev`` replaces the list, in its order. A device's name
(``CUDA1``, ``RPC0``) is what ``-dev`` takes; its buffer type (``CUDA1``,
``RPC0[10.0.0.2:50052]``, the index being the device's on that server) is what ``-ot`` takes.
The backend decides the runtime overhead and the compute rules (core/backends.py): CUDA's
context, cuBLAS and pools (``--overhead``, 512 MiB by default) are not in llama.cpp's buffers;
an RPC device reports only its buffers and its server's own process lives outside them (0 by
default); Vulkan devices (``Vulkan0``) have no public figure (0 unless ``--overhead``).
"""

from __future__ import annotations

from collections.abc import Sequence

from moetune.core.backends import rules
from moetune.core.settings import DEFAULT_GPU_OVERHEAD_BYTES, Settings
from moetune.record import record


def default_overhead(kind: str) -> int:
    """The runtime overhead counted on a device of ``kind`` when none is given
    (core/backends.py)."""
    return rules(kind).overhead_bytes


@record(frozen=True, kw_only=True)
class DeviceSpec:
    """One offload device as a plan sees it."""

    name: str = "CUDA0"  # llama.cpp's device name (-dev)
    buft: str = "CUDA0"  # its buffer type (-ot targets)
    kind: str = "cuda"  # the backend's rules (core/backends.py): cuda, vulkan, rpc, cpu-like
    overhead_bytes: int = DEFAULT_GPU_OVERHEAD_BYTES
    total_bytes: int | None = None
    free_bytes: int | None = None
    description: str = ""  # "NVIDIA GeForce RTX 4090", "127.0.0.1:50052"
    # what llama.cpp's own dry run found beyond the prediction, counted on the device
    correction_bytes: int = 0
    # where ``overhead_bytes`` came from when it is neither the default nor --overhead: the
    # figure a ``moetune run`` measured on this card, recorded in its hardware profile
    overhead_source: str = ""


def single_device(settings: Settings, total_bytes: int | None = None) -> tuple[DeviceSpec, ...]:
    """The one device (of ``total_bytes``) that ``settings`` describe: its kind, overhead and
    correction."""
    return (
        DeviceSpec(
            kind=settings.device_kind,
            overhead_bytes=settings.gpu_overhead_bytes,
            correction_bytes=settings.device_correction_bytes,
            total_bytes=total_bytes,
        ),
    )


def bufts(devices: Sequence[DeviceSpec]) -> tuple[str, ...]:
    return tuple(device.buft for device in devices)


def rpc_buft(endpoint: str, index: int = 0) -> str:
    """``RPC0[host:port]``: device ``index`` of the RPC server at ``endpoint``."""
    return f"RPC{index}[{endpoint}]"
