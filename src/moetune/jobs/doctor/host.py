"""The host doctor runs on: CPU cores, RAM (and a container's limit on it), swap, WSL2."""

from __future__ import annotations

from moetune.hardware.base import HostInfo
from moetune.jobs.doctor.findings import Finding
from moetune.units import GIB, format_bytes

WSLCONFIG_FIX = (
    "give WSL more memory in %UserProfile%\\.wslconfig ([wsl2] then memory=48GB, say), run "
    "`wsl --shutdown`, and keep models on the Linux disk (~/), not /mnt/c"
)


def cpu_finding(host: HostInfo) -> Finding:
    physical, logical = host.physical_cores, host.logical_cores
    if physical is None:
        return Finding(
            check="cpu",
            status="warn",
            message=f"{logical} logical cores, physical count unknown",
            fix="pass -t with your physical core count",
        )
    message = f"{physical} physical cores, {logical} logical"
    if logical > physical:
        message += f": use -t {physical} (hyper-threads only fight over memory bandwidth)"
    return Finding(check="cpu", status="ok", message=message)


def ram_finding(host: HostInfo) -> Finding:
    total, available = host.ram_total_bytes, host.ram_available_bytes
    message = f"RAM {format_bytes(total)}, {format_bytes(available)} available"
    if host.ram_limit_bytes is not None:
        return Finding(
            check="ram",
            status="warn",
            message=f"{message}, but this container/cgroup may use only "
            f"{format_bytes(host.ram_limit_bytes)}",
            fix="raise the memory limit (docker run --memory, systemd MemoryMax)",
        )
    if total < 16 * GIB or available < 8 * GIB:
        return Finding(
            check="ram",
            status="warn",
            message=f"{message}: little room for CPU-resident experts",
            fix="close programs, add RAM, or pick a smaller quant; "
            "`moetune doctor MODEL` says what a model needs",
        )
    return Finding(check="ram", status="ok", message=message)


def swap_finding(host: HostInfo) -> Finding:
    used, total = host.swap_used_bytes, host.swap_total_bytes
    if used > GIB:
        return Finding(
            check="swap",
            status="warn",
            message=f"{format_bytes(used)} of swap in use: RAM has been short",
            fix="free RAM before serving: experts paged to swap or re-read from disk drop "
            "decoding under 1 tok/s",
        )
    return Finding(
        check="swap", status="ok", message=f"swap {format_bytes(total)}, {format_bytes(used)} used"
    )


def wsl_finding(host: HostInfo) -> Finding | None:
    if not host.is_wsl:
        return None
    return Finding(
        check="wsl",
        status="warn",
        message=f"WSL2: Linux sees {format_bytes(host.ram_total_bytes)}, what WSL is given "
        "(by default half of Windows' RAM)",
        fix=WSLCONFIG_FIX,
    )
