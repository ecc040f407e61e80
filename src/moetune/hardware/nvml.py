"""GPUs through NVML (package nvidia-ml-py); the only module that imports ``pynvml``.

NVML starts on first use, not at import. A missing library or driver, or no GPU, makes
``gpus()`` return ``[]`` with ``why`` set. After a successful start, a failure while querying a
GPU raises ``GpuQueryError`` (``GpuLostError`` for a lost GPU); a value the GPU does not report
("Not Supported", e.g. memory on unified-memory GPUs) becomes ``None``. No ``pynvml`` exception
leaves this module.

NVML ignores ``CUDA_VISIBLE_DEVICES``: it always lists every GPU in PCI bus order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from moetune.hardware.base import VRAM_HINT, GpuInfo, GpuLostError, GpuQueryError
from moetune.hardware.host import process_tree

# Newest first: the unversioned name is v3 in current nvidia-ml-py, older in old ones.
PROCESS_FUNCTIONS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
PCIE_FUNCTIONS = {
    "pcie_gen_current": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_gen_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_width_current": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_width_max": "nvmlDeviceGetMaxPcieLinkWidth",
    "pcie_gen_card_max": "nvmlDeviceGetGpuMaxPcieLinkGeneration",  # the card's, slot aside
}
QUERY_HINT = f"run `nvidia-smi` to see the GPU's state, or {VRAM_HINT}"
LOST_HINT = "see `dmesg` for Xid errors; reset the GPU (nvidia-smi -r) or reboot"


class _Never(Exception):
    """Stands in for an exception class an older nvidia-ml-py does not define."""


def _code(err: BaseException) -> int | None:
    """The NVML error code carried by a ``pynvml.NVMLError``."""
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def _text(value: object) -> str:
    """NVML strings come back as ``str`` or, from old nvidia-ml-py, as ``bytes``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


def init_failure(lib: Any, err: BaseException) -> str:
    """What a failed ``nvmlInit`` means for the user, and what to do about it."""
    code = _code(err)
    problems = {
        lib.NVML_ERROR_LIBRARY_NOT_FOUND: (
            "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)",
            "install the NVIDIA driver",
        ),
        lib.NVML_ERROR_DRIVER_NOT_LOADED: (
            "the NVIDIA driver is not loaded",
            "load it (sudo modprobe nvidia) or reboot",
        ),
        lib.NVML_ERROR_NO_PERMISSION: (
            "no permission to use the NVIDIA driver",
            "check access to /dev/nvidia* (e.g. join the video group)",
        ),
        lib.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
            "the NVIDIA driver and its library have different versions",
            "reboot after the driver update",
        ),
    }
    problem, fix = problems.get(code, (f"NVML could not start ({err})", "check `nvidia-smi`"))
    return f"{problem}: {fix}, or {VRAM_HINT}"


class NvmlProbe:
    """GPUs and per-process GPU memory through NVML.

    ``nvml`` is the ``pynvml`` module (imported on first use when ``None``) or, in tests, a
    stand-in with the same names. ``pids_of`` expands a pid to itself and its children.
    """

    name = "nvml"

    def __init__(self, nvml: Any = None, pids_of: Callable[[int], set[int]] = process_tree) -> None:
        self._lib: Any = nvml
        self._pids_of = pids_of
        self._started = False
        self._failed = False
        self._why: str | None = None

    @property
    def why(self) -> str | None:
        """Why the last ``gpus()`` was empty or incomplete; ``None`` when all is well."""
        return self._why

    def available(self) -> bool:
        """Start NVML if not yet started; ``False`` (with ``why`` set) when it cannot."""
        if self._started or self._failed:
            return self._started
        lib = self._load()
        if lib is not None:
            mismatch = getattr(lib, "NVMLLibraryMismatchError", _Never)
            try:
                lib.nvmlInit()
                self._started = True
            except (lib.NVMLError, mismatch, OSError) as err:
                self._why = init_failure(lib, err)
        self._failed = not self._started
        return self._started

    def close(self) -> None:
        """Shut NVML down if this probe started it; the next call starts it again."""
        if self._started:
            self._started = False
            with contextlib.suppress(self._lib.NVMLError):
                self._lib.nvmlShutdown()

    def gpus(self) -> list[GpuInfo]:
        """Every GPU NVML sees; ``[]`` with ``why`` when there is no driver or no GPU."""
        count = self._count()
        if not count:
            return []
        notes: list[str] = []
        driver = self._optional("nvmlSystemGetDriverVersion")
        found = [self._gpu(index, driver, notes) for index in range(count)]
        self._why = "; ".join(notes) or None
        return [gpu for gpu in found if gpu is not None]

    def process_used_bytes(self, pid: int) -> dict[int, int]:
        """GPU index -> bytes used by ``pid`` and its children, where NVML reports it.

        A GPU is left out when the process is not on it or its use is not reported (Windows
        WDDM, or a container whose pid namespace hides the host pids NVML returns).
        """
        count = self._count()
        if not count:
            return {}
        pids = self._pids_of(pid)
        used: dict[int, int] = {}
        for index in range(count):
            total = self._process_bytes(index, pids)
            if total is not None:
                used[index] = total
        return used

    def _load(self) -> Any:
        """The NVML module, importing ``pynvml`` the first time; ``None`` if not installed."""
        if self._lib is None:
            try:
                import pynvml
            except ImportError:
                self._why = f"the nvidia-ml-py package is missing: pip install it, or {VRAM_HINT}"
                return None
            self._lib = pynvml
        return self._lib

    def _count(self) -> int:
        """How many GPUs NVML sees; 0 (with ``why`` set) when none or NVML cannot start."""
        if not self.available():
            return 0
        try:
            count = int(self._lib.nvmlDeviceGetCount())
        except self._lib.NVMLError as err:
            self._why = f"NVML could not count the GPUs ({err}): check `nvidia-smi`, or {VRAM_HINT}"
            return 0
        if count == 0:
            self._why = f"the NVIDIA driver sees no GPU: check `nvidia-smi`, or {VRAM_HINT}"
        return count

    def _gpu(self, index: int, driver: str | None, notes: list[str]) -> GpuInfo | None:
        """One GPU's facts; ``None`` (with a note) when the user may not access it."""
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except lib.NVMLError as err:
            if _code(err) != lib.NVML_ERROR_NO_PERMISSION:
                raise self._query_error(index, "handle", err) from err
            notes.append(f"GPU {index} skipped: no permission to use it")
            return None
        name = self._required(index, "name", lib.nvmlDeviceGetName, handle)
        memory = self._required(index, "memory", lib.nvmlDeviceGetMemoryInfo, handle)
        if memory is None:
            notes.append(f"GPU {index} does not report its memory (unified memory?): {VRAM_HINT}")
        return GpuInfo(
            index=index,
            name=_text(name) if name is not None else "unknown NVIDIA GPU",
            uuid=self._optional("nvmlDeviceGetUUID", handle),
            vram_total_bytes=None if memory is None else int(memory.total),
            vram_free_bytes=None if memory is None else int(memory.free),
            vram_used_bytes=None if memory is None else int(memory.used),
            driver_version=driver,
            pci_bus_id=self._bus_id(handle),
            **{field: self._optional_int(fn, handle) for field, fn in PCIE_FUNCTIONS.items()},
        )

    def _required(self, index: int, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; ``None`` if not supported; any other NVML error raises ours."""
        try:
            return fn(*args)
        except self._lib.NVMLError as err:
            if _code(err) == self._lib.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise self._query_error(index, what, err) from err

    def _optional(self, function: str, *args: Any) -> str | None:
        """A nice-to-have string: ``None`` on any NVML error or in an nvidia-ml-py without it."""
        value = self._optional_value(function, *args)
        return None if value is None else _text(value)

    def _optional_int(self, function: str, *args: Any) -> int | None:
        """A nice-to-have number: ``None`` on any NVML error or in an nvidia-ml-py without it."""
        value = self._optional_value(function, *args)
        return None if value is None else int(value)

    def _optional_value(self, function: str, *args: Any) -> Any:
        fn = getattr(self._lib, function, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._lib.NVMLError:
            return None

    def _bus_id(self, handle: Any) -> str | None:
        """The PCI bus id (``00000000:01:00.0``), or ``None``."""
        info = self._optional_value("nvmlDeviceGetPciInfo", handle)
        bus_id = getattr(info, "busId", None)
        return None if bus_id is None else _text(bus_id)

    def _process_bytes(self, index: int, pids: set[int]) -> int | None:
        """Bytes the ``pids`` use on GPU ``index``; ``None`` when not there or not reported."""
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            processes = self._running_processes(handle)
        except lib.NVMLError as err:
            if _code(err) in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_RESET_REQUIRED):
                raise self._query_error(index, "processes", err) from err
            return None
        sizes = [p.usedGpuMemory for p in processes or [] if p.pid in pids]
        known = [int(size) for size in sizes if size is not None]
        return sum(known) if known else None

    def _running_processes(self, handle: Any) -> list[Any] | None:
        """Compute processes on a GPU, trying the newest NVML function the driver has."""
        lib = self._lib
        mismatch = getattr(lib, "NVMLLibraryMismatchError", _Never)
        for function in PROCESS_FUNCTIONS:
            fn = getattr(lib, function, None)
            if fn is None:
                continue
            try:
                return list(fn(handle))
            except mismatch:
                continue
            except lib.NVMLError as err:
                if _code(err) != lib.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
        return None

    def _query_error(self, index: int, what: str, err: BaseException) -> GpuQueryError:
        """Our error for an NVML failure while reading ``what`` of GPU ``index``."""
        if _code(err) in (self._lib.NVML_ERROR_GPU_IS_LOST, self._lib.NVML_ERROR_RESET_REQUIRED):
            return GpuLostError(f"GPU {index} is lost (NVML: {err})", hint=LOST_HINT)
        return GpuQueryError(f"NVML failed reading the {what} of GPU {index}: {err}", QUERY_HINT)
