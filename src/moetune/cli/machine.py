"""What the commands ask of this machine: RAM, physical cores, the GPU to plan for."""

from __future__ import annotations

from moetune.errors import BadValueError, NoGpuError
from moetune.units import parse_size


def host_ram(ram: str | None) -> tuple[int | None, int | None, int | None]:
    """(total, available, physical cores): ``--ram`` is both total and available."""
    from moetune.hardware.host import PsutilHostProbe

    host = PsutilHostProbe().host()
    if ram is not None:
        size = parse_size(ram)
        return size, size, host.physical_cores
    return host.ram_total_bytes, host.ram_available_bytes, host.physical_cores


def physical_cores() -> int | None:
    """The host's physical cores (llama-server's -t)."""
    return host_ram(None)[2]


def gpu_target(
    vram: str | None, gpu_index: int, gpu_profile: str | None = None
) -> tuple[int, int | None, str]:
    """(total, free, source) of the GPU to plan for: given, a hardware profile, or detected."""
    if vram is not None:
        return parse_size(vram), None, "given (--vram)"
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
