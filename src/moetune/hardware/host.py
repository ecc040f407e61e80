"""The host's RAM, swap and CPU: on Linux read where psutil reads them (``/proc/meminfo``,
the CPU topology in sysfs) without loading psutil, which a plan would pay for at every start;
psutil where those cannot be read (another system) and for process trees. The only module that
imports psutil."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from moetune.hardware.base import HostInfo

PROC_VERSION = Path("/proc/version")
PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
CPU_SYSFS = Path("/sys/devices/system/cpu")
# the CPUs sharing each one's core: core_cpus_list is the newer name of thread_siblings_list
# (kernel docs, admin-guide/cputopology.rst); psutil reads the same files
CORE_LISTS = ("cpu[0-9]*/topology/core_cpus_list", "cpu[0-9]*/topology/thread_siblings_list")
# x86 names its CPU "model name"; some ARM kernels give "Hardware" or "Model" instead
CPUINFO_KEYS = ("model name", "Hardware", "Model")
# cgroup v2 first, then v1; v1 reports "no limit" as a huge page-aligned number.
CGROUP_LIMIT_FILES = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


class LiveHostProbe:
    """Reads the live host state (``memory_figures``, ``physical_cores``); WSL2 from
    ``/proc/version`` or the environment."""

    def __init__(
        self,
        *,
        proc_version: Path = PROC_VERSION,
        cgroup_limit_files: tuple[Path, ...] = CGROUP_LIMIT_FILES,
        environ: Mapping[str, str] | None = None,
        proc_cpuinfo: Path = PROC_CPUINFO,
        proc_meminfo: Path = PROC_MEMINFO,
        cpu_sysfs: Path = CPU_SYSFS,
    ) -> None:
        self._proc_version = proc_version
        self._proc_cpuinfo = proc_cpuinfo
        self._proc_meminfo = proc_meminfo
        self._cpu_sysfs = cpu_sysfs
        self._cgroup_limit_files = cgroup_limit_files
        self._environ = os.environ if environ is None else environ

    def host(self) -> HostInfo:
        """A fresh snapshot of RAM, swap and cores."""
        memory = memory_figures(self._proc_meminfo)
        return HostInfo(
            ram_total_bytes=memory.ram_total,
            ram_available_bytes=memory.ram_available,
            swap_total_bytes=memory.swap_total,
            swap_used_bytes=memory.swap_used,
            physical_cores=physical_cores(self._cpu_sysfs),
            logical_cores=os.cpu_count() or 1,
            is_wsl=self.is_wsl(),
            ram_limit_bytes=cgroup_ram_limit(self._cgroup_limit_files, memory.ram_total),
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


class MemoryFigures(NamedTuple):
    """RAM and swap, bytes."""

    ram_total: int
    ram_available: int
    swap_total: int
    swap_used: int


def _proc_fields(path: Path) -> list[tuple[str, str]]:
    """The ``key: value`` lines of a procfs file (``/proc/meminfo``, ``/proc/cpuinfo``), in
    order, the key stripped; none where the file cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            found.append((key.strip(), value))
    return found


def memory_figures(proc_meminfo: Path = PROC_MEMINFO) -> MemoryFigures:
    """RAM total and available, swap total and used (total less free), from
    ``/proc/meminfo`` as psutil reads them on Linux; psutil's own where that file cannot be
    read or lacks one of them."""
    kib: dict[str, int] = {}
    for key, value in _proc_fields(proc_meminfo):
        fields = value.split()
        if fields and fields[0].isdigit():
            kib[key] = int(fields[0])
    try:
        total, available = kib["MemTotal"] * 1024, kib["MemAvailable"] * 1024
        swap_total, swap_free = kib["SwapTotal"] * 1024, kib["SwapFree"] * 1024
    except KeyError:
        import psutil

        ram, swap = psutil.virtual_memory(), psutil.swap_memory()
        return MemoryFigures(ram.total, ram.available, swap.total, swap.used)
    return MemoryFigures(total, available, swap_total, swap_total - swap_free)


def physical_cores(cpu_sysfs: Path = CPU_SYSFS) -> int | None:
    """The physical cores: the distinct sets of CPUs sharing a core in the sysfs topology, the
    way psutil counts them on Linux; psutil's count where the topology cannot be read (``None``:
    not known)."""
    for pattern in CORE_LISTS:
        try:
            cores = {path.read_bytes().strip() for path in cpu_sysfs.glob(pattern)}
        except OSError:
            break
        if cores:
            return len(cores)
    import psutil

    return psutil.cpu_count(logical=False)


def cpu_model(proc_cpuinfo: Path = PROC_CPUINFO) -> str | None:
    """The CPU's name from ``/proc/cpuinfo``, else ``platform.processor()``; ``None`` if
    neither says."""
    fields: dict[str, str] = {}
    for key, value in _proc_fields(proc_cpuinfo):
        if value.strip():
            fields.setdefault(key, " ".join(value.split()))
    for key in CPUINFO_KEYS:
        if key in fields:
            return fields[key]
    import platform  # the fallback only: a plan's start does not load it

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
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {pid}
    return {pid, *(child.pid for child in children)}
