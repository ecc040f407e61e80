"""A stand-in for the ``pynvml`` module: the names NvmlProbe uses, with scripted failures.

Error codes and the error's ``value`` attribute match nvidia-ml-py's; any fake function can be
made to raise by putting its pynvml name in ``FakeDevice.errors`` (per GPU) or
``FakeNvml.errors`` (library-wide) with an ``NVML_ERROR_*`` code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

MESSAGES = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
MIB = 1024**2


class NVMLError(Exception):
    """Like ``pynvml.NVMLError``: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return MESSAGES.get(self.value, f"NVML Error with code {self.value}")


class NVMLLibraryMismatchError(Exception):
    """Like pynvml's: an unversioned function the driver's library lacks."""


@dataclass
class Memory:
    total: int
    free: int
    used: int


@dataclass
class Process:
    pid: int
    usedGpuMemory: int | None


@dataclass
class PciInfo:
    busId: str


@dataclass
class FakeDevice:
    """One GPU; ``errors`` maps a pynvml function name to the NVML code it raises."""

    name: str | bytes = "NVIDIA GeForce RTX 4090"
    uuid: str | bytes = "GPU-6e5b2f43-1c1a-7d0e-9a53-7f1c7b0e2a11"
    total: int = 24564 * MIB
    used: int = 1187 * MIB
    # current gen, max gen, current width, max width (the max: what card and slot allow)
    pcie: tuple[int, int, int, int] = (1, 4, 16, 16)
    card_gen: int = 4  # the card's own maximum generation, whatever the slot
    bus_id: str = "00000000:01:00.0"
    processes: list[Process] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def answer(self, function: str, value: object) -> object:
        """``value``, unless this function is scripted to fail."""
        if function in self.errors:
            raise NVMLError(self.errors[function])
        return value


class FakeNvml:
    """The module stand-in. Counts ``nvmlInit`` / ``nvmlShutdown`` calls."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_RESET_REQUIRED = NVML_ERROR_RESET_REQUIRED
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = NVML_ERROR_LIB_RM_VERSION_MISMATCH
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN

    def __init__(
        self,
        devices: list[FakeDevice] | None = None,
        errors: dict[str, int] | None = None,
        driver: str | bytes = "550.54.14",
    ) -> None:
        self.devices = [FakeDevice()] if devices is None else devices
        self.errors = dict(errors or {})
        self.driver = driver
        self.init_calls = 0
        self.shutdown_calls = 0

    def _check(self, function: str) -> None:
        if function in self.errors:
            raise NVMLError(self.errors[function])

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        device = self.devices[index]
        device.answer("nvmlDeviceGetHandleByIndex", None)
        return device

    def nvmlDeviceGetName(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetName", handle.name)

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetUUID", handle.uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> object:
        memory = Memory(handle.total, handle.total - handle.used, handle.used)
        return handle.answer("nvmlDeviceGetMemoryInfo", memory)

    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetPciInfo", PciInfo(handle.bus_id))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetCurrPcieLinkGeneration", handle.pcie[0])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetMaxPcieLinkGeneration", handle.pcie[1])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetCurrPcieLinkWidth", handle.pcie[2])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetMaxPcieLinkWidth", handle.pcie[3])

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle.card_gen)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses_v3", list(handle.processes))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses", list(handle.processes))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses_v2", list(handle.processes))
