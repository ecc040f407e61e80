"""The host's RAM, swap and CPU through psutil (the only module that imports psutil)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from pathlib import Path

import psutil

from moetune.hardware.base import HostInfo

PROC_VERSION = Path("/proc/version")
PROC_CPUINFO = Path("/proc/cpuinfo")
# x86 names its CPU "model name"; some ARM kernels give "Hardware" or "Model" instead
CPUINFO_KEYS = ("model name", "Hardware", "Model")
# cgroup v2 first, then v1; v1 reports "no limit" as a huge page-aligned number.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


class PsutilHostProbe:
    """Reads the live host state with psutil; WSL2 from ``/proc/version`` or the environment."""

    name = "psutil"

    def __init__(
        self,
        proc_version: Path = PROC_VERSION,
        cgroup_limit_files: tuple[Path, ...] = CGROUP_LIMIT_FILES,
        environ: Mapping[str, str] | None = None,
        proc_cpuinfo: Path = PROC_CPUINFO,
    ) -> None:
        self._proc_version = proc_version
        self._proc_cpuinfo = proc_cpuinfo
        self._cgroup_limit_files = cgroup_limit_files
        self._environ = os.environ if environ is None else environ

    def host(self) -> HostInfo:
        """A fresh snapshot of RAM, swap and cores."""
        ram = psutil.virtual_memory()
        swap = psutil.swap_memory()
        return HostInfo(
            ram_total_bytes=ram.total,
            ram_available_bytes=ram.available,
            swap_total_bytes=swap.total,
            swap_used_bytes=swap.used,
            physical_cores=psutil.cpu_count(logical=False),
            logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
            is_wsl=self.is_wsl(),
            ram_limit_bytes=cgroup_ram_limit(self._cgroup_limit_files, ram.total),
            cpu_model=cpu_model(self._proc_cpuinfo),
        )

    def is_wsl(self) -> bool:
        """True under WSL (its kernel says "microsoft"; its shells set ``WSL_DISTRO_NAME``)."""
        if self._environ.get("WSL_DISTRO_NAME"):
            return True
        try:
            return "microsoft" in self._proc_version.read_text(errors="replace").lower()
        except OSError:
            return False


def cpu_model(proc_cpuinfo: Path = PROC_CPUINFO) -> str | None:
    """The CPU's name from ``/proc/cpuinfo``, else ``platform.processor()``; ``None`` if
    neither says."""
    try:
        text = proc_cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip(), " ".join(value.split()))
    for key in CPUINFO_KEYS:
        if key in fields:
            return fields[key]
    return platform.processor().strip() or None


def cgroup_ram_limit(files: tuple[Path, ...], ram_total_bytes: int) -> int | None:
    """The first cgroup memory limit found below ``ram_total_bytes``, else ``None``."""
    for path in files:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < ram_total_bytes:
            return int(text)
        return None  # "max", or a v1 "unlimited" figure: no limit
    return None


def process_tree(pid: int) -> set[int]:
    """``pid`` and all its descendants (just ``{pid}`` if it is gone or cannot be read)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {pid}
    return {pid, *(child.pid for child in children)}
