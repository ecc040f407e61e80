"""What the commands ask of this machine: RAM, physical cores, the GPU to plan for."""

from __future__ import annotations

from moetune.errors import BadValueError, NoGpuError


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


def one_gpu(vram: int | None, gpu_profile: str | None) -> None:
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
