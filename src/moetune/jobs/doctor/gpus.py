"""The GPUs doctor finds: each one's memory (and what other processes hold of it), its PCIe
link (now, the most card and slot allow together, the card's own), and the NVIDIA driver."""

from __future__ import annotations

import re
from collections.abc import Sequence

from moetune.hardware.base import VRAM_HINT, GpuInfo
from moetune.jobs.doctor.findings import Finding, PcieLink, gbps
from moetune.store.hardware import HardwareProfile, pcie_bandwidth_bytes_per_s
from moetune.units import GIB, format_bytes

MIN_DRIVER = 525  # CUDA 12 (llama.cpp's CUDA releases) needs driver 525.60 or newer on Linux


def gpu_findings(
    gpus: list[GpuInfo],
    why: str | None,
    described: str | None = None,
    rpc: Sequence[str] = (),
    others: Sequence[str] = (),
) -> list[Finding]:
    """One finding per GPU; without one, a failure, or a warning when ``described`` (the
    ``--vram``/``--gpu`` the model checks use instead) stands in for it; none is needed when
    ``rpc`` servers or ``others`` (devices of other backends llama-server lists: Vulkan0,
    ROCm0) are the offload devices (they are checked on their own)."""
    if not gpus and others and described is None:
        return [
            Finding(
                check="gpu",
                status="ok",
                message="no NVIDIA GPU here; llama-server offloads to "
                f"{', '.join(others)} (its memory from llama.cpp's own list), checked below",
            )
        ]
    if not gpus and rpc:
        return [
            Finding(
                check="gpu",
                status="ok",
                message="no NVIDIA GPU here; the offload devices are the RPC servers given "
                f"(--rpc {','.join(rpc)}), checked below",
            )
        ]
    if not gpus:
        reason = (
            (why or "none found").removesuffix(f", or {VRAM_HINT}").removesuffix(f": {VRAM_HINT}")
        )
        fix = "install the NVIDIA driver (nvidia-smi must list the GPU)"
        # the fix says it once: the probe's own advice of the same words is left out
        reason = re.sub(r"[:,;]? (or )?install the NVIDIA driver$", "", reason)
        if described is not None:
            return [
                Finding(
                    check="gpu",
                    status="warn",
                    message=f"no NVIDIA GPU detected: {reason}; the model checks use {described}",
                    fix=fix,
                )
            ]
        return [
            Finding(
                check="gpu",
                status="fail",
                message=f"no NVIDIA GPU detected: {reason}",
                fix=f"{fix}; to plan for a card elsewhere use `moetune plan MODEL --gpu rtx4090` "
                "or --vram",
            )
        ]
    return [_memory_finding(gpu) for gpu in gpus]


def _memory_finding(gpu: GpuInfo) -> Finding:
    label = f"GPU {gpu.index}: {gpu.name}"
    total, free = gpu.vram_total_bytes, gpu.vram_free_bytes
    if total is None:
        return Finding(
            check="gpu",
            status="warn",
            message=f"{label} does not report its memory (unified memory?)",
            fix="pass --vram to plan and --target-vram to run",
        )
    message = f"{label}, {format_bytes(total)}"
    if free is not None and total - free > GIB:
        return Finding(
            check="gpu",
            status="warn",
            message=f"{message}, only {format_bytes(free)} free: other processes hold "
            f"{format_bytes(total - free)}",
            fix="close them (`nvidia-smi` lists them), or plan with --target-vram for what is left",
        )
    return Finding(check="gpu", status="ok", message=f"{message} ({format_bytes(free)} free)")


def link_label(gen: int | None, width: int | None) -> str:
    """A link as ``PCIe 4.0 x16``, ``?`` for what is unknown."""
    return f"PCIe {gen or '?'}.0 x{width or '?'}"


def link_bytes_per_s(gen: int | None, width: int | None) -> int | None:
    """One direction of a link; ``None`` when its generation or width is unknown."""
    if not gen or not width:
        return None
    try:
        return pcie_bandwidth_bytes_per_s(gen, width)
    except ValueError:
        return None


def pcie_link(gpu: GpuInfo) -> PcieLink:
    """``gpu``'s link and its bandwidth, now and at most."""
    return PcieLink(
        gpu_index=gpu.index,
        gen_current=gpu.pcie_gen_current,
        width_current=gpu.pcie_width_current,
        gen_max=gpu.pcie_gen_max,
        width_max=gpu.pcie_width_max,
        gen_card_max=gpu.pcie_gen_card_max,
        current_bytes_per_s=link_bytes_per_s(gpu.pcie_gen_current, gpu.pcie_width_current),
        max_bytes_per_s=link_bytes_per_s(gpu.pcie_gen_max, gpu.pcie_width_max),
    )


NARROW_LANES = 4  # x4 or less: a chipset slot, a riser or a laptop's link


def pcie_finding(link: PcieLink, profile: HardwareProfile | None) -> Finding:
    """The most card and slot allow against the card's own (NVML's, else its profile's), and
    the link now. NVML reports the current link, whose generation drops at idle to save
    power: that alone is no fault."""
    gen, width, index = link.gen_max, link.width_max, link.gpu_index
    if gen is None or width is None or link.max_bytes_per_s is None:
        return Finding(
            check="pcie",
            status="warn",
            message=f"GPU {index}: PCIe link unknown",
            fix="check it with `nvidia-smi -q -d PCIE`",
        )
    now = link_label(link.gen_current, link.width_current)
    if link.current_bytes_per_s is not None:
        now += f" ({gbps(link.current_bytes_per_s)})"
    head = f"GPU {index}: {link_label(gen, width)} max ({gbps(link.max_bytes_per_s)} per direction)"
    message = f"{head}, {now} now"
    slow_fix = (
        "prompt processing with experts on the CPU copies them over this link: use a "
        "CPU-attached slot with the card's full link (check the BIOS link speed); "
        "-ub 2048 -b 2048 makes fewer copies"
    )
    card_gen = link.gen_card_max or (profile.pcie_gen if profile else None)
    card_lanes = profile.pcie_lanes if profile else None
    if (card_gen and gen < card_gen) or (card_lanes and width < card_lanes):
        card = link_label(card_gen or gen, card_lanes or width)
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: the card supports {card}, the slot less",
            fix=slow_fix,
        )
    if gen <= 3:
        return Finding(
            check="pcie", status="warn", message=f"{message}: PCIe 3.0 or older", fix=slow_fix
        )
    if card_lanes is None and width <= NARROW_LANES:
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: an x{width} link (a chipset slot, a riser, or a laptop's)",
            fix=slow_fix,
        )
    if (link.width_current or width) < width:
        return Finding(
            check="pcie",
            status="warn",
            message=f"{message}: running with fewer lanes",
            fix="check it under load (`nvidia-smi -q -d PCIE` while a prompt runs); if it stays "
            "narrow, reseat the card and check the slot's lane sharing (M.2 drives)",
        )
    idle = ""
    if (link.gen_current or gen) < gen:
        idle = (
            f" (a lower generation at idle is power saving: NVML reports the link now, "
            f"which returns to {gen}.0 under load)"
        )
    return Finding(check="pcie", status="ok", message=message + idle)


def driver_finding(gpus: list[GpuInfo]) -> Finding | None:
    if not gpus:
        return None
    version = gpus[0].driver_version
    if version is None:
        return Finding(
            check="driver",
            status="warn",
            message="driver version unknown",
            fix="check `nvidia-smi`",
        )
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < MIN_DRIVER:
        return Finding(
            check="driver",
            status="warn",
            message=f"NVIDIA driver {version}: older than {MIN_DRIVER}",
            fix=f"CUDA 12 builds of llama.cpp need driver {MIN_DRIVER} or newer: update the driver",
        )
    return Finding(check="driver", status="ok", message=f"NVIDIA driver {version}")
