"""The devices a command plans or runs for, in llama.cpp's order, with their memory.

- RPC servers (``--rpc HOST:PORT,...``) come first; each may hold several devices, named
  RPC0, RPC1, ... across servers, whose buffer type is ``RPC<index on its server>[HOST:PORT]``.
  Their memory is given (``--vram``) or asked of llama.cpp (``llama-server --list-devices``).
- Then the GPUs: detected (NVML), all of them unless ``--gpu-index`` picks one, in CUDA's
  order; or described by ``--vram`` (the sizes after the RPC devices' are CUDA0, CUDA1, ...)
  or a hardware profile (``--gpu``). CUDA numbers GPUs fastest first unless
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, NVML by PCI bus: when they may differ, llama-server's own
  list decides the order.

``plan_devices`` is what plan, doctor, alias and export plan for (given, a hardware profile,
detected, or asked of llama-server); jobs.launch.prepare_device takes what run and bench launch
on from llama-server's own list through ``require_devices`` and ``specs_from_listed`` here.
``host_ram``: this machine's RAM and cores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from moetune.core.backends import kind_of
from moetune.core.devices import DeviceSpec, default_overhead, rpc_buft
from moetune.core.flags import RPC_ENV
from moetune.errors import BadValueError, NoGpuError
from moetune.units import Sizes, format_bytes, per_device

if TYPE_CHECKING:  # plan imports this module without starting anything
    from moetune.hardware.base import GpuInfo, GpuProbe
    from moetune.records.server import Device, ServerInfo
    from moetune.store.hardware import HardwareProfile


class DeviceSet(NamedTuple):
    """What a plan is for: the devices, how they were found, and what selects them."""

    devices: tuple[DeviceSpec, ...]
    source: str  # "given (--vram)", "NVIDIA GeForce RTX 4090 (NVML)", ...
    device_args: tuple[str, ...] = ()  # llama-server's flags for them: --rpc A,B
    here: bool = False  # every device is on this machine or reachable (llama.cpp can check)
    gpu_free_bytes: int | None = None  # one detected GPU: its free memory
    # each device's hardware profile where it is known (--gpu, --vram SIZE:ID, the one
    # detected GPU's match); empty or None: found by its name, else its class's figures
    profiles: tuple[HardwareProfile | None, ...] = ()


def split_endpoints(rpc: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (rpc or "").split(",") if part.strip())


def _overhead(kind: str, overheads: tuple[int, ...] | None, index: int) -> int:
    return overheads[index] if overheads is not None else default_overhead(kind)


def rpc_devices(listed: Sequence[Device]) -> list[Device]:
    """The RPC devices among those llama-server lists (their description is the endpoint)."""
    return [d for d in listed if d.name.startswith("RPC")]


def specs_from_listed(
    listed: Sequence[Device], overheads: Sizes | None, gpus: Sequence[GpuInfo] = ()
) -> tuple[DeviceSpec, ...]:
    """DeviceSpecs for llama-server's own list (its order), with their buffer types; a CUDA
    device takes the free memory NVML reports for it (matched by name and size)."""
    per_server: dict[str, int] = {}
    specs: list[DeviceSpec] = []
    costs = per_device(overheads, len(listed), "--overhead")
    for index, device in enumerate(listed):
        if device.name.startswith("RPC"):
            on_server = per_server.get(device.description, 0)
            per_server[device.description] = on_server + 1
            kind, buft = "rpc", rpc_buft(device.description, on_server)
        else:
            kind, buft = kind_of(device.name), device.name
        specs.append(
            DeviceSpec(
                name=device.name,
                buft=buft,
                kind=kind,
                overhead_bytes=_overhead(kind, costs, index),
                total_bytes=device.total_bytes,
                free_bytes=device.free_bytes,
                description=device.description,
            )
        )
    return tuple(specs)


def cuda_order_is_nvml(gpus: Sequence[GpuInfo]) -> bool:
    """Whether CUDA numbers these GPUs as NVML does: with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
    or when they are all alike (then the order does not matter)."""
    if os.environ.get("CUDA_DEVICE_ORDER", "").upper() == "PCI_BUS_ID":
        return True
    return len({(g.name, g.vram_total_bytes) for g in gpus}) <= 1


def gpu_specs(gpus: Sequence[GpuInfo], overheads: Sizes | None) -> list[DeviceSpec]:
    """CUDA0, CUDA1, ... for detected GPUs in the order given; without --overhead, a card
    whose hardware profile holds a runtime overhead measured on it counts that."""
    from moetune.store.hardware import match_detected, scan_hardware_profiles

    costs = per_device(overheads, len(gpus), "--overhead")
    profiles = scan_hardware_profiles()[0] if costs is None else []
    specs = []
    for i, gpu in enumerate(gpus):
        cost, why = _overhead("cuda", costs, i), ""
        if costs is None:
            found = match_detected(gpu.name, gpu.vram_total_bytes, profiles)
            if (measured := profile_overhead(found)) is not None:
                cost, why = measured
        specs.append(
            DeviceSpec(
                name=f"CUDA{i}",
                buft=f"CUDA{i}",
                kind="cuda",
                overhead_bytes=cost,
                total_bytes=gpu.vram_total_bytes,
                free_bytes=gpu.vram_free_bytes,
                description=gpu.name,
                overhead_source=why,
            )
        )
    return specs


def described(
    sizes: Sizes, endpoints: tuple[str, ...], overheads: Sizes | None
) -> tuple[tuple[DeviceSpec, ...], tuple[HardwareProfile | None, ...]]:
    """Devices given by ``--vram``: one size per RPC server first, then CUDA0, CUDA1, ...;
    and the hardware profile each names (``16G:rtx4080``; None: none)."""
    if len(sizes) < len(endpoints):
        raise BadValueError(
            f"--vram gives {len(sizes)} sizes for {len(endpoints)} RPC servers",
            hint="give one size per device: the RPC servers first, then the GPUs",
        )
    costs = per_device(overheads, len(sizes), "--overhead")
    specs = [
        DeviceSpec(
            name=f"RPC{i}",
            buft=rpc_buft(ep),
            kind="rpc",
            overhead_bytes=_overhead("rpc", costs, i),
            total_bytes=sizes[i],
            description=ep,
        )
        for i, ep in enumerate(endpoints)
    ]
    for j, size in enumerate(sizes.values[len(endpoints) :]):
        index = len(endpoints) + j
        specs.append(
            DeviceSpec(
                name=f"CUDA{j}",
                buft=f"CUDA{j}",
                kind="cuda",
                overhead_bytes=_overhead("cuda", costs, index),
                total_bytes=size,
            )
        )
    profiles: list[HardwareProfile | None] = [None] * len(specs)
    if sizes.cards:
        from moetune.store.hardware import find_hardware_profile

        for index, card in enumerate(sizes.cards):
            if card is not None:
                profiles[index] = find_hardware_profile(card)
    return tuple(specs), tuple(profiles)


def describe(devices: Sequence[DeviceSpec]) -> str:
    return ", ".join(f"{d.name} {format_bytes(d.total_bytes)}" for d in devices)


def require_devices(info: ServerInfo) -> tuple[Device, ...]:
    """The devices llama-server offloads to, or NoGpuError."""
    if not info.devices:
        raise NoGpuError(
            "llama-server sees no GPU: everything would run on the CPU",
            hint="run on a machine with a GPU, or name an offload device, e.g. --rpc HOST:PORT",
        )
    return info.devices


def detected_gpus(probe: GpuProbe, gpu_index: int | None) -> list[GpuInfo]:
    """The GPUs to plan for: all detected (or the one ``gpu_index`` picks); NoGpuError."""
    gpus = probe.gpus()
    if not gpus:
        why = probe.why or "no NVIDIA GPU found: pass --vram, e.g. --vram 24G"
        raise NoGpuError(f"no GPU detected: {why}")
    if gpu_index is not None:
        gpus = [g for g in gpus if g.index == gpu_index]
        if not gpus:
            found = ", ".join(str(g.index) for g in probe.gpus())
            raise BadValueError(f"no GPU with index {gpu_index} (found: {found})")
    for gpu in gpus:
        if gpu.vram_total_bytes is None:
            raise NoGpuError(
                f"{gpu.name} does not report its memory size (unified memory?)",
                hint="pass --vram with the memory llama.cpp may use",
            )
    return gpus


# --- what a command plans for: this machine, the devices given or detected ----------------------


def host_ram(ram: int | None) -> tuple[int | None, int | None, int | None]:
    """(total, available, physical cores): ``--ram`` is both total and available."""
    from moetune.hardware.host import LiveHostProbe

    host = LiveHostProbe().host()
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


def _single_gpu(
    vram: int | None, gpu_index: int, gpu_profile: str | None = None, card: str | None = None
) -> tuple[int, int | None, str, str, HardwareProfile | None]:
    """(total, free, source, name, hardware profile) of the GPU to plan for: given (with the
    profile ``card`` names, ``--vram 16G:rtx4080``), a hardware profile, or detected (with
    the profile of the card, where one matches)."""
    one_gpu(vram, gpu_profile)
    if vram is not None and card is None:
        return vram, None, "given (--vram)", "", None
    from moetune.store.hardware import find_hardware_profile, match_detected, scan_hardware_profiles

    if vram is not None and card is not None:
        profile = find_hardware_profile(card)
        source = f"given (--vram), {profile.name} (hardware profile {profile.id})"
        return vram, None, source, profile.name, profile
    if gpu_profile is not None:
        profile = find_hardware_profile(gpu_profile)
        source = f"{profile.name} (hardware profile {profile.id})"
        return profile.vram_bytes, None, source, profile.name, profile
    from moetune.hardware import detect_gpu_probe

    probe = detect_gpu_probe()
    gpu = detected_gpus(probe, gpu_index)[0]
    assert gpu.vram_total_bytes is not None  # detected_gpus refuses a GPU without a size
    found = match_detected(gpu.name, gpu.vram_total_bytes, scan_hardware_profiles()[0])
    source = f"{gpu.name} ({probe.name})"
    return gpu.vram_total_bytes, gpu.vram_free_bytes, source, gpu.name, found


def profile_overhead(profile: HardwareProfile | None) -> tuple[int, str] | None:
    """The runtime overhead a ``moetune run`` measured on this card and recorded in its
    hardware profile, with where it came from; None where it has none."""
    if profile is None or profile.runtime_overhead_bytes is None:
        return None
    how = profile.runtime_overhead_measured or "no details recorded"
    return profile.runtime_overhead_bytes, f"measured on this card ({how}; {profile.source})"


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

    one_gpu(vram, gpu_profile)
    if (vram is not None or gpu_profile is not None) and rpc == os.environ.get(RPC_ENV):
        rpc = None  # the shell's servers, --rpc's default: --vram and --gpu name the devices
    endpoints = split_endpoints(rpc)
    if gpu_profile is not None and endpoints:
        raise BadValueError(
            "--gpu plans for one GPU", hint="for RPC devices give each one's memory with --vram"
        )
    if vram is not None and (len(vram) > 1 or endpoints):
        specs, profiles = described(vram, endpoints, overhead)
        return DeviceSet(specs, "given (--vram)", _rpc_args(endpoints), profiles=profiles)
    if (
        vram is not None
        or gpu_profile is not None
        or (not endpoints and _one_gpu_here(gpu_index, server))
    ):
        total, free, source, name, profile = _single_gpu(
            vram[0] if vram else None, gpu_index or 0, gpu_profile, vram.card(0) if vram else None
        )
        cost, why = overhead[0] if overhead else default_overhead("cuda"), ""
        if overhead is None and (measured := profile_overhead(profile)) is not None:
            cost, why = measured
        detected = vram is None and gpu_profile is None
        spec = DeviceSpec(
            total_bytes=total,
            free_bytes=free,
            overhead_bytes=cost,
            description=name,
            overhead_source=why,
        )
        return DeviceSet((spec,), source, gpu_free_bytes=free, here=detected, profiles=(profile,))
    return _detected_devices(endpoints, gpu_index, overhead, server)


def _rpc_args(endpoints: tuple[str, ...]) -> tuple[str, ...]:
    return ("--rpc", ",".join(endpoints)) if endpoints else ()


def _one_gpu_here(gpu_index: int | None, server: str | None) -> bool:
    """Plan for one NVIDIA GPU: one is picked or detected, or none is and there is no
    llama-server here to list the devices of its other backends (Vulkan, ROCm, ...)."""
    if gpu_index is not None:
        return True
    from moetune.hardware import detect_gpu_probe

    found = len(detect_gpu_probe().gpus())
    return found == 1 or (found == 0 and not _server_here(server))


def _server_here(server: str | None) -> bool:
    from moetune.errors import MoetuneError
    from moetune.llamacpp.process import find_server

    try:
        find_server(server)
    except MoetuneError:
        return False
    return True


def _detected_devices(
    endpoints: tuple[str, ...], gpu_index: int | None, overhead: Sizes | None, server: str | None
) -> DeviceSet:
    """RPC servers (their memory from llama-server) and the detected GPUs, in llama.cpp's
    order; llama-server's list decides the GPUs' order where CUDA's may differ from NVML's,
    and lists the devices NVML does not see (Vulkan, ROCm, ...) where it sees none."""
    from moetune.hardware import detect_gpu_probe
    from moetune.llamacpp.process import find_server, server_info

    probe = detect_gpu_probe()
    gpus = detected_gpus(probe, gpu_index) if probe.gpus() else []
    if not endpoints and gpus and cuda_order_is_nvml(gpus):
        specs = tuple(gpu_specs(gpus, overhead))
        return DeviceSet(specs, f"{len(specs)} GPUs ({probe.name})", here=True)
    info = server_info(find_server(server), rpc=endpoints)
    listed = [
        d
        for d in info.devices
        if d.name.startswith("RPC") or gpu_index is None or _is_picked(d, gpus)
    ]
    if not listed and not endpoints and not gpus:
        detected_gpus(probe, gpu_index)  # NoGpuError: no GPU, and llama-server lists none
    if not listed:
        raise NoGpuError(
            "llama-server lists no device to plan for",
            hint="check the --rpc servers, or pass --vram",
        )
    specs = specs_from_listed(listed, overhead, gpus)
    source = "llama-server --list-devices"
    if len(specs) == 1 and not endpoints:
        source = f"{specs[0].name} {specs[0].description} ({source})"
    return DeviceSet(specs, source, _rpc_args(endpoints), here=True)


def _is_picked(device: Device, gpus: Sequence[GpuInfo]) -> bool:
    return any(
        device.description == g.name
        and abs(device.total_bytes - (g.vram_total_bytes or 0)) < 256 * 1024**2
        for g in gpus
    )
