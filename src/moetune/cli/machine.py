"""What the commands ask of this machine: RAM, physical cores, the GPU to plan for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from moetune.errors import BadValueError, NoGpuError

if TYPE_CHECKING:
    from moetune.hardware.base import GpuInfo
    from moetune.jobs.devices import DeviceSet
    from moetune.records.server import Device
    from moetune.units import Sizes


def host_ram(ram: int | None) -> tuple[int | None, int | None, int | None]:
    """(total, available, physical cores): ``--ram`` is both total and available."""
    from moetune.hardware.host import PsutilHostProbe

    host = PsutilHostProbe().host()
    if ram is not None:
        return ram, ram, host.physical_cores
    return host.ram_total_bytes, host.ram_available_bytes, host.physical_cores


def physical_cores() -> int | None:
    """The host's physical cores (llama-server's -t)."""
    return host_ram(None)[2]


def one_gpu(vram: object, gpu_profile: str | None) -> None:
    """``--vram`` and ``--gpu`` both name the GPU to plan for: one of them."""
    if vram is not None and gpu_profile is not None:
        raise BadValueError(
            "--vram and --gpu both say which GPU to plan for",
            hint="give one: --gpu for a known card, --vram for any size",
        )


def gpu_target(
    vram: int | None, gpu_index: int, gpu_profile: str | None = None
) -> tuple[int, int | None, str]:
    """(total, free, source) of the GPU to plan for: given, a hardware profile, or detected."""
    one_gpu(vram, gpu_profile)
    if vram is not None:
        return vram, None, "given (--vram)"
    if gpu_profile is not None:
        from moetune.store.hardware import find_hardware_profile, load_hardware_profiles

        profile = find_hardware_profile(gpu_profile, load_hardware_profiles())
        return profile.vram_bytes, None, f"{profile.name} (hardware profile {profile.id})"
    from moetune.hardware import detect_gpu_probe

    probe = detect_gpu_probe()
    gpus = probe.gpus()
    if not gpus:
        why = probe.why or "no NVIDIA GPU found: pass --vram, e.g. --vram 24G"
        raise NoGpuError(f"no GPU detected: {why}")
    gpu = next((g for g in gpus if g.index == gpu_index), None)
    if gpu is None:
        found = ", ".join(str(g.index) for g in gpus)
        raise BadValueError(f"no GPU with index {gpu_index} (found: {found})")
    if gpu.vram_total_bytes is None:
        raise NoGpuError(
            f"{gpu.name} does not report its memory size (unified memory?)",
            hint="pass --vram with the memory llama.cpp may use",
        )
    return gpu.vram_total_bytes, gpu.vram_free_bytes, f"{gpu.name} ({probe.name})"


def plan_devices(
    *,
    vram: Sizes | None,
    rpc: str | None,
    gpu_index: int | None,
    gpu_profile: str | None,
    overhead: Sizes | None,
    server: str | None,
) -> DeviceSet:
    """The devices to plan for: one GPU as before (given, a hardware profile, detected), or
    several: ``--vram`` with more than one size, RPC servers, or several detected GPUs."""
    from moetune.core.devices import DeviceSpec, default_overhead
    from moetune.jobs.devices import DeviceSet, described, split_endpoints

    one_gpu(vram, gpu_profile)
    endpoints = split_endpoints(rpc)
    if gpu_profile is not None and endpoints:
        raise BadValueError(
            "--gpu plans for one GPU", hint="for RPC devices give each one's memory with --vram"
        )
    if vram is not None and (len(vram) > 1 or endpoints):
        return DeviceSet(
            described(vram, endpoints, overhead), "given (--vram)", _rpc_args(endpoints)
        )
    if vram is not None or gpu_profile is not None or (not endpoints and _one_gpu_here(gpu_index)):
        total, free, source = gpu_target(vram[0] if vram else None, gpu_index or 0, gpu_profile)
        cost = overhead[0] if overhead else default_overhead("cuda")
        detected = vram is None and gpu_profile is None
        return DeviceSet(
            (DeviceSpec(total_bytes=total, free_bytes=free, overhead_bytes=cost),),
            source,
            gpu_free_bytes=free,
            here=detected,
        )
    return _detected_devices(endpoints, gpu_index, overhead, server)


def _rpc_args(endpoints: tuple[str, ...]) -> tuple[str, ...]:
    return ("--rpc", ",".join(endpoints)) if endpoints else ()


def _one_gpu_here(gpu_index: int | None) -> bool:
    """Plan for one GPU: one is picked, or at most one is detected."""
    if gpu_index is not None:
        return True
    from moetune.hardware import detect_gpu_probe

    return len(detect_gpu_probe().gpus()) <= 1


def _detected_devices(
    endpoints: tuple[str, ...], gpu_index: int | None, overhead: Sizes | None, server: str | None
) -> DeviceSet:
    """RPC servers (their memory from llama-server) and the detected GPUs, in llama.cpp's
    order; llama-server's list decides the GPUs' order where CUDA's may differ from NVML's."""
    from moetune.hardware import detect_gpu_probe
    from moetune.jobs.devices import (
        DeviceSet,
        cuda_order_is_nvml,
        detected_gpus,
        gpu_specs,
        specs_from_listed,
    )
    from moetune.llamacpp.process import find_server, server_info

    probe = detect_gpu_probe()
    gpus = detected_gpus(probe, gpu_index) if probe.gpus() or not endpoints else []
    if not endpoints and cuda_order_is_nvml(gpus):
        specs = tuple(gpu_specs(gpus, overhead))
        return DeviceSet(specs, f"{len(specs)} GPUs ({probe.name})", here=True)
    info = server_info(find_server(server), rpc=endpoints)
    listed = [
        d
        for d in info.devices
        if d.name.startswith("RPC") or gpu_index is None or _is_picked(d, gpus)
    ]
    if not listed:
        raise NoGpuError(
            "llama-server lists no device to plan for",
            hint="check the --rpc servers, or pass --vram",
        )
    specs = specs_from_listed(listed, overhead, gpus)
    return DeviceSet(specs, "llama-server --list-devices", _rpc_args(endpoints), here=True)


def _is_picked(device: Device, gpus: Sequence[GpuInfo]) -> bool:
    return any(
        device.description == g.name
        and abs(device.total_bytes - (g.vram_total_bytes or 0)) < 256 * 1024**2
        for g in gpus
    )
