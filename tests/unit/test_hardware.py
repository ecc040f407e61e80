"""Hardware probes, all without a GPU: NVML through a fake module, nvidia-smi through a fake
executable on PATH, the host for real (psutil its oracle) and from files written here, and the
fakes through the same Protocols."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moetune.errors import ExitCode
from moetune.hardware import (
    GpuInfo,
    GpuLostError,
    GpuProbe,
    GpuQueryError,
    HostInfo,
    HostProbe,
    LiveHostProbe,
    NoGpuError,
    NoGpuProbe,
    NvmlProbe,
    SmiProbe,
    detect_gpu_probe,
    require_gpus,
)
from moetune.hardware.host import (
    MemoryFigures,
    cgroup_ram_limit,
    memory_figures,
    physical_cores,
    process_tree,
)
from moetune.units import GIB

from support.fake_pynvml import (
    MIB,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeDevice,
    FakeNvml,
    NVMLError,
    Process,
)
from support.fakes import FakeGpuProbe, FakeHostProbe, fake_gpu

HAVE_DRIVER = bool(ctypes.util.find_library("nvidia-ml") or shutil.which("nvidia-smi"))
no_driver_here = pytest.mark.skipif(HAVE_DRIVER, reason="an NVIDIA driver is installed here")

UUID0 = "GPU-6e5b2f43-1c1a-7d0e-9a53-7f1c7b0e2a11"
UUID1 = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
# Recorded from `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (550 driver).
TWO_GPUS_CSV = (
    f"0, NVIDIA GeForce RTX 4090, {UUID0}, 24564, 1187, 22972, 550.54.14, 1, 4, 16, 16, "
    "00000000:01:00.0\n"
    f"1, NVIDIA GeForce RTX 3090, {UUID1}, 24576, 268, 23944, 550.54.14, 4, 4, 8, 16, "
    "00000000:02:00.0\n"
)
UNIFIED_CSV = (
    "0, NVIDIA GB10, GPU-11111111-2222-3333-4444-555555555555, [N/A], [N/A], [N/A], "
    "580.95.05, [Not Supported], [Not Supported], [N/A], [N/A], 0000000F:01:00.0\n"
)
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


# --- NVML ---------------------------------------------------------------------------------


def two_devices() -> list[FakeDevice]:
    second = FakeDevice(name="NVIDIA GeForce RTX 3090", uuid=UUID1, total=24576 * MIB)
    second.bus_id, second.used, second.pcie = "00000000:02:00.0", 268 * MIB, (4, 4, 8, 16)
    return [FakeDevice(), second]


def test_nvml_lists_gpus_in_bytes() -> None:
    probe = NvmlProbe(FakeNvml(two_devices()))
    gpus = probe.gpus()
    assert [gpu.index for gpu in gpus] == [0, 1]
    first = gpus[0]
    assert first.name == "NVIDIA GeForce RTX 4090"
    assert first.uuid == UUID0
    assert first.vram_total_bytes == 24564 * MIB
    assert first.vram_used_bytes == 1187 * MIB
    assert first.vram_free_bytes == (24564 - 1187) * MIB
    assert first.driver_version == "550.54.14"
    assert (first.pcie_gen_current, first.pcie_gen_max) == (1, 4)
    assert (first.pcie_width_current, first.pcie_width_max) == (16, 16)
    assert first.pci_bus_id == "00000000:01:00.0"
    assert first.memory_bandwidth_bytes_per_s is None
    assert gpus[1].pcie_width_current == 8
    assert probe.why is None


def test_nvml_starts_on_first_use_once() -> None:
    nvml = FakeNvml()
    probe = NvmlProbe(nvml)
    assert nvml.init_calls == 0
    probe.gpus()
    probe.gpus()
    probe.process_used_bytes(os.getpid())
    assert nvml.init_calls == 1
    probe.close()
    assert nvml.shutdown_calls == 1
    probe.close()
    assert nvml.shutdown_calls == 1


def test_nvml_old_bindings_return_bytes() -> None:
    device = FakeDevice(name=b"Tesla T4", uuid=b"GPU-t4")
    probe = NvmlProbe(FakeNvml([device], driver=b"470.256.02"))
    (gpu,) = probe.gpus()
    assert (gpu.name, gpu.uuid, gpu.driver_version) == ("Tesla T4", "GPU-t4", "470.256.02")


def test_nvml_no_driver_is_an_empty_list_with_advice() -> None:
    nvml = FakeNvml(errors={"nvmlInit": NVML_ERROR_LIBRARY_NOT_FOUND})
    probe = NvmlProbe(nvml)
    assert probe.gpus() == []
    assert probe.process_used_bytes(os.getpid()) == {}
    assert not probe.available()
    assert probe.why is not None
    assert "no NVIDIA driver found" in probe.why
    assert "install the NVIDIA driver" in probe.why
    assert "--vram" in probe.why


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (NVML_ERROR_DRIVER_NOT_LOADED, "modprobe nvidia"),
        (NVML_ERROR_NO_PERMISSION, "/dev/nvidia"),
        (NVML_ERROR_LIB_RM_VERSION_MISMATCH, "reboot"),
        (NVML_ERROR_UNKNOWN, "NVML could not start (Unknown Error)"),
    ],
)
def test_nvml_init_failures_say_what_to_do(code: int, says: str) -> None:
    probe = NvmlProbe(FakeNvml(errors={"nvmlInit": code}))
    assert probe.gpus() == []
    assert probe.why is not None
    assert says in probe.why
    assert "--vram" in probe.why


def test_nvml_driver_without_gpu() -> None:
    probe = NvmlProbe(FakeNvml([]))
    assert probe.available()
    assert probe.gpus() == []
    assert probe.why is not None
    assert "sees no GPU" in probe.why
    assert probe.process_used_bytes(os.getpid()) == {}


def test_nvml_count_failure_is_an_empty_list() -> None:
    probe = NvmlProbe(FakeNvml(errors={"nvmlDeviceGetCount": NVML_ERROR_UNKNOWN}))
    assert probe.gpus() == []
    assert probe.why is not None
    assert "could not count" in probe.why


def test_nvml_error_mid_query_is_ours_not_pynvml() -> None:
    devices = two_devices()
    devices[1].errors["nvmlDeviceGetMemoryInfo"] = NVML_ERROR_UNKNOWN
    with pytest.raises(GpuQueryError) as caught:
        NvmlProbe(FakeNvml(devices)).gpus()
    assert not isinstance(caught.value, GpuLostError)
    assert caught.value.exit_code == ExitCode.NO_GPU
    assert "memory of GPU 1" in caught.value.message
    assert "Unknown Error" in caught.value.message
    assert caught.value.hint is not None
    assert "nvidia-smi" in caught.value.hint
    assert isinstance(caught.value.__cause__, NVMLError)


@pytest.mark.parametrize("function", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName"])
def test_nvml_lost_gpu(function: str) -> None:
    devices = two_devices()
    devices[0].errors[function] = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLostError) as caught:
        NvmlProbe(FakeNvml(devices)).gpus()
    assert caught.value.message == "GPU 0 is lost (NVML: GPU is lost)"
    assert caught.value.hint is not None
    assert "reboot" in caught.value.hint


def test_nvml_lost_gpu_while_measuring() -> None:
    device = FakeDevice()
    device.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = NVML_ERROR_GPU_IS_LOST
    with pytest.raises(GpuLostError):
        NvmlProbe(FakeNvml([device])).process_used_bytes(os.getpid())


def test_nvml_unified_memory_not_supported() -> None:
    device = FakeDevice(name="NVIDIA GB10")
    for function in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCurrPcieLinkGeneration"):
        device.errors[function] = NVML_ERROR_NOT_SUPPORTED
    probe = NvmlProbe(FakeNvml([device]))
    (gpu,) = probe.gpus()
    assert gpu.name == "NVIDIA GB10"
    assert (gpu.vram_total_bytes, gpu.vram_free_bytes, gpu.vram_used_bytes) == (None, None, None)
    assert gpu.pcie_gen_current is None
    assert gpu.pcie_gen_max == 4
    assert probe.why is not None
    assert "does not report its memory" in probe.why
    assert "--vram" in probe.why


def test_nvml_optional_fields_fail_quietly() -> None:
    device = FakeDevice()
    for function in ("nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo", "nvmlDeviceGetMaxPcieLinkWidth"):
        device.errors[function] = NVML_ERROR_UNKNOWN
    nvml = FakeNvml([device], errors={"nvmlSystemGetDriverVersion": NVML_ERROR_UNKNOWN})
    (gpu,) = NvmlProbe(nvml).gpus()
    assert (gpu.uuid, gpu.pci_bus_id, gpu.driver_version, gpu.pcie_width_max) == (None,) * 4
    assert gpu.vram_total_bytes == 24564 * MIB


def test_nvml_gpu_without_permission_is_skipped() -> None:
    devices = two_devices()
    devices[0].errors["nvmlDeviceGetHandleByIndex"] = NVML_ERROR_NO_PERMISSION
    probe = NvmlProbe(FakeNvml(devices))
    assert [gpu.index for gpu in probe.gpus()] == [1]
    assert probe.why == "GPU 0 skipped: no permission to use it"


def test_nvml_process_usage_sums_the_tree_and_skips_unknown() -> None:
    devices = two_devices()
    devices[0].processes = [Process(100, 900 * MIB), Process(101, 300 * MIB), Process(7, 5 * MIB)]
    devices[1].processes = [Process(100, None), Process(7, 2 * MIB)]
    probe = NvmlProbe(FakeNvml(devices), pids_of=lambda pid: {pid, pid + 1})
    assert probe.process_used_bytes(100) == {0: 1200 * MIB}
    assert probe.process_used_bytes(555) == {}


def test_nvml_process_usage_falls_back_to_older_functions() -> None:
    device = FakeDevice(processes=[Process(42, 64 * MIB)])
    device.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = NVML_ERROR_FUNCTION_NOT_FOUND
    device.errors["nvmlDeviceGetComputeRunningProcesses"] = NVML_ERROR_FUNCTION_NOT_FOUND
    probe = NvmlProbe(FakeNvml([device]), pids_of=lambda pid: {pid})
    assert probe.process_used_bytes(42) == {0: 64 * MIB}


def test_nvml_process_usage_not_supported_is_unknown() -> None:
    device = FakeDevice(processes=[Process(42, 64 * MIB)])
    device.errors["nvmlDeviceGetComputeRunningProcesses_v3"] = NVML_ERROR_NOT_SUPPORTED
    probe = NvmlProbe(FakeNvml([device]), pids_of=lambda pid: {pid})
    assert probe.process_used_bytes(42) == {}


def test_nvml_default_imports_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert [gpu.name for gpu in NvmlProbe().gpus()] == ["NVIDIA GeForce RTX 4090"]
    assert fake.init_calls == 1


@no_driver_here
def test_nvml_real_pynvml_on_this_machine() -> None:
    probe = NvmlProbe()
    assert probe.gpus() == []
    assert probe.why is not None
    assert "libnvidia-ml.so.1" in probe.why


# --- nvidia-smi ---------------------------------------------------------------------------


def fake_smi(
    bin_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpus: str = TWO_GPUS_CSV,
    apps: str = "",
    status: int = 0,
    hang: bool = False,
) -> Path:
    """Put an ``nvidia-smi`` first on PATH that prints ``gpus`` / ``apps`` per query."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "gpus.csv").write_text(gpus)
    (bin_dir / "apps.csv").write_text(apps)
    hang_line = f'sleep 60 & echo $! > "{bin_dir}/sleep.pid"; wait\n' if hang else ""
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{bin_dir}/calls.log"\n'
        f"{hang_line}"
        'case "$*" in\n'
        f'  *--query-gpu=*) cat "{bin_dir}/gpus.csv" ;;\n'
        f'  *--query-compute-apps=*) cat "{bin_dir}/apps.csv" ;;\n'
        "esac\n"
        f"exit {status}\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def test_smi_parses_recorded_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = fake_smi(tmp_path / "bin", monkeypatch)
    probe = SmiProbe()
    gpus = probe.gpus()
    assert probe.why is None
    assert [gpu.name for gpu in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    first = gpus[0]
    assert (first.index, first.uuid, first.driver_version) == (0, UUID0, "550.54.14")
    assert first.vram_total_bytes == 24564 * MIB
    assert first.vram_used_bytes == 1187 * MIB
    assert first.vram_free_bytes == 22972 * MIB
    assert (first.pcie_gen_current, first.pcie_gen_max) == (1, 4)
    assert (gpus[1].pcie_width_current, gpus[1].pcie_width_max) == (8, 16)
    assert gpus[1].pci_bus_id == "00000000:02:00.0"
    call = (bin_dir / "calls.log").read_text()
    assert "--query-gpu=index,name,uuid,memory.total,memory.used,memory.free," in call
    assert "--format=csv,noheader,nounits" in call


def test_smi_not_available_and_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_smi(tmp_path / "bin", monkeypatch, gpus=UNIFIED_CSV)
    probe = SmiProbe()
    (gpu,) = probe.gpus()
    assert gpu.name == "NVIDIA GB10"
    assert (gpu.vram_total_bytes, gpu.vram_used_bytes, gpu.vram_free_bytes) == (None,) * 3
    assert (gpu.pcie_gen_current, gpu.pcie_width_max) == (None, None)
    assert gpu.driver_version == "580.95.05"
    assert probe.why is not None
    assert "GPU 0 does not report its memory" in probe.why


def test_smi_driver_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", monkeypatch, gpus=DRIVER_FAILED, status=9)
    probe = SmiProbe()
    assert probe.gpus() == []
    assert not probe.available()
    assert probe.why is not None
    assert "couldn't communicate with the NVIDIA driver" in probe.why
    assert "--vram" in probe.why
    assert probe.process_used_bytes(os.getpid()) == {}


def test_smi_no_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", monkeypatch, gpus="No devices were found\n", status=6)
    probe = SmiProbe()
    assert probe.gpus() == []
    assert probe.why is not None
    assert "No devices were found" in probe.why


def test_smi_hang_times_out_and_kills_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_smi(tmp_path / "bin", monkeypatch, hang=True)
    start = time.monotonic()
    probe = SmiProbe(timeout_s=0.5)
    assert probe.gpus() == []
    assert time.monotonic() - start < 5
    assert probe.why is not None
    assert "did not answer within 0.5 s" in probe.why
    sleeper = int((bin_dir / "sleep.pid").read_text())
    assert not running(sleeper)


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan may wait a moment for its reaper)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in "ZX":
            return False
        time.sleep(0.1)
    return True


def test_smi_missing_from_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = SmiProbe()
    assert probe.executable() is None
    assert probe.gpus() == []
    assert probe.why is not None
    assert "not on PATH" in probe.why


def test_smi_unreadable_line_is_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    garbled = TWO_GPUS_CSV.splitlines()[0] + "\nUnable to determine the device handle\n"
    fake_smi(tmp_path / "bin", monkeypatch, gpus=garbled)
    probe = SmiProbe()
    assert [gpu.index for gpu in probe.gpus()] == [0]
    assert probe.why is not None
    assert "Unable to determine the device handle" in probe.why


def test_smi_process_usage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apps = (
        f"100, 900, {UUID0}\n101, 300, {UUID0}\n100, [N/A], {UUID1}\n"
        f"7, 5, {UUID1}\n100, 10, GPU-unknown\n"
    )
    fake_smi(tmp_path / "bin", monkeypatch, apps=apps)
    probe = SmiProbe(pids_of=lambda pid: {pid, pid + 1})
    assert probe.process_used_bytes(100) == {0: 1200 * MIB}
    assert probe.process_used_bytes(7) == {1: 5 * MIB}
    assert probe.process_used_bytes(555) == {}


# --- host ---------------------------------------------------------------------------------


def test_the_live_host_is_what_psutil_says() -> None:
    import psutil

    host = LiveHostProbe().host()
    assert host.ram_total_bytes == psutil.virtual_memory().total
    assert 0 < host.ram_available_bytes <= host.ram_total_bytes
    assert abs(host.ram_available_bytes - psutil.virtual_memory().available) < 1 << 30
    assert host.swap_total_bytes == psutil.swap_memory().total
    assert 0 <= host.swap_used_bytes <= host.swap_total_bytes
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    assert host.swap_total_bytes == int(meminfo["SwapTotal"].split()[0]) * 1024
    assert host.logical_cores == psutil.cpu_count(logical=True)
    assert host.physical_cores == psutil.cpu_count(logical=False)
    assert host.physical_cores is None or 1 <= host.physical_cores <= host.logical_cores
    assert host.ram_limit_bytes is None or 0 < host.ram_limit_bytes < host.ram_total_bytes


MEMINFO = """MemTotal:       65536000 kB
MemFree:         1000000 kB
MemAvailable:   40000000 kB
Buffers:          123456 kB
SwapTotal:       8388608 kB
SwapFree:        6291456 kB
HugePages_Total:       0
"""


def test_memory_figures_from_meminfo(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert memory_figures(path) == MemoryFigures(
        ram_total=65536000 * 1024,
        ram_available=40000000 * 1024,
        swap_total=8 * GIB,
        swap_used=2 * GIB,
    )


@pytest.mark.parametrize("meminfo", [None, MEMINFO.replace("MemAvailable", "MemAvail")])
def test_memory_figures_from_psutil_without_meminfo(tmp_path: Path, meminfo: str | None) -> None:
    """No such file (another system), or one without a figure: psutil's figures."""
    import psutil

    path = tmp_path / "meminfo"
    if meminfo is not None:
        path.write_text(meminfo)
    figures = memory_figures(path)
    assert figures.ram_total == psutil.virtual_memory().total
    assert figures.swap_total == psutil.swap_memory().total


def _topology(root: Path, name: str, lists: list[str]) -> Path:
    for cpu, cores in enumerate(lists):
        folder = root / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / name).write_text(cores + "\n")
    (root / "cpufreq").mkdir()  # not a CPU
    return root


@pytest.mark.parametrize("name", ["core_cpus_list", "thread_siblings_list"])
def test_physical_cores_from_the_topology(tmp_path: Path, name: str) -> None:
    """Eight CPUs, two threads on each of the first two cores: six cores."""
    lists = ["0,4", "1,5", "2", "3", "0,4", "1,5", "6", "7"]
    assert physical_cores(_topology(tmp_path, name, lists)) == 6


def test_physical_cores_from_psutil_without_the_topology(tmp_path: Path) -> None:
    import psutil

    assert physical_cores(tmp_path) == psutil.cpu_count(logical=False)


@pytest.mark.parametrize(
    ("proc_version", "environ", "wsl"),
    [
        ("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@1c602f52c2e4)", {}, True),
        ("Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com)", {}, True),
        ("Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)", {}, False),
        ("Linux version 6.8.0-45-generic", {"WSL_DISTRO_NAME": "Ubuntu"}, True),
        (None, {}, False),
    ],
)
def test_wsl_detection(
    tmp_path: Path, proc_version: str | None, environ: dict[str, str], wsl: bool
) -> None:
    path = tmp_path / "version"
    if proc_version is not None:
        path.write_text(proc_version + "\n")
    assert LiveHostProbe(proc_version=path, environ=environ).is_wsl() is wsl


@pytest.mark.parametrize(
    ("contents", "limit"),
    [("max\n", None), (f"{8 * GIB}\n", 8 * GIB), ("9223372036854771712\n", None), (None, None)],
)
def test_cgroup_ram_limit(tmp_path: Path, contents: str | None, limit: int | None) -> None:
    path = tmp_path / "memory.max"
    if contents is not None:
        path.write_text(contents)
    assert cgroup_ram_limit((tmp_path / "absent", path), 64 * GIB) == limit


def test_process_tree_includes_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_tree(os.getpid()) >= {os.getpid(), child.pid}
    finally:
        child.kill()
        child.wait()
    assert process_tree(child.pid) == {child.pid}


# --- fakes, protocols, detection ----------------------------------------------------------


def test_every_probe_implements_its_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Typed as the Protocols (mypy checks the signatures), and each answers like one."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: the probe says so, empty
    gpu_probes: list[GpuProbe] = [
        NvmlProbe(FakeNvml()),
        SmiProbe(),
        NoGpuProbe("none"),
        FakeGpuProbe.single(),
    ]
    for probe in gpu_probes:
        assert isinstance(probe.name, str) and probe.name
        gpus = probe.gpus()
        assert all(isinstance(gpu, GpuInfo) for gpu in gpus)
        assert (probe.why is None) == bool(gpus) or isinstance(probe, FakeGpuProbe)
        used = probe.process_used_bytes(os.getpid())
        assert all(isinstance(k, int) and isinstance(v, int) for k, v in used.items())
    host_probes: list[HostProbe] = [LiveHostProbe(), FakeHostProbe.typical()]
    assert all(isinstance(probe.host(), HostInfo) for probe in host_probes)


def test_fake_gpu_probe() -> None:
    probe = FakeGpuProbe.single(vram_total_bytes=16 * GIB, vram_used_bytes=GIB)
    (gpu,) = probe.gpus()
    assert (gpu.name, gpu.vram_total_bytes, gpu.vram_free_bytes) == (
        "NVIDIA GeForce RTX 4090",
        16 * GIB,
        15 * GIB,
    )
    assert [g.vram_total_bytes for g in FakeGpuProbe.several(24 * GIB, 12 * GIB).gpus()] == [
        24 * GIB,
        12 * GIB,
    ]
    measured = FakeGpuProbe([fake_gpu(0, 8 * GIB)], process_bytes={42: {0: GIB}})
    assert measured.process_used_bytes(42) == {0: GIB}
    assert measured.process_used_bytes(43) == {}
    assert FakeGpuProbe.none().gpus() == []


def test_fake_host_probe() -> None:
    info = HostInfo(
        ram_total_bytes=32 * GIB,
        ram_available_bytes=20 * GIB,
        swap_total_bytes=0,
        swap_used_bytes=0,
        physical_cores=None,
        logical_cores=4,
        is_wsl=True,
    )
    assert FakeHostProbe(info).host() == info
    typical = FakeHostProbe.typical(ram_total_bytes=128 * GIB).host()
    assert typical.ram_available_bytes == 124 * GIB


def test_require_gpus() -> None:
    gpus = require_gpus(FakeGpuProbe.single())
    assert isinstance(gpus[0], GpuInfo)
    with pytest.raises(NoGpuError) as caught:
        require_gpus(NoGpuProbe("no NVIDIA driver found"))
    assert caught.value.exit_code == ExitCode.NO_GPU
    assert caught.value.message == "no NVIDIA driver found"
    assert caught.value.hint is not None
    assert "--vram" in caught.value.hint


@no_driver_here
def test_detect_on_this_machine() -> None:
    probe = detect_gpu_probe()
    assert isinstance(probe, NoGpuProbe)
    assert probe.gpus() == []
    assert probe.process_used_bytes(os.getpid()) == {}
    assert probe.why is not None
    assert probe.why.startswith("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)")
    assert probe.why.endswith("or pass --vram to plan for a GPU without detecting one")
    assert probe.why.count("--vram") == 1


def test_detect_prefers_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", monkeypatch)
    probe = detect_gpu_probe(FakeNvml())
    assert probe.name == "nvml"


def test_detect_keeps_nvml_without_gpus() -> None:
    probe = detect_gpu_probe(FakeNvml([]))
    assert probe.name == "nvml"
    assert probe.gpus() == []
    assert probe.why is not None


def test_detect_falls_back_to_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", monkeypatch)
    probe = detect_gpu_probe(FakeNvml(errors={"nvmlInit": NVML_ERROR_LIBRARY_NOT_FOUND}))
    assert probe.name == "nvidia-smi"
    assert len(probe.gpus()) == 2


def test_detect_neither_explains_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path / "bin", monkeypatch, gpus=DRIVER_FAILED, status=9)
    probe = detect_gpu_probe(FakeNvml(errors={"nvmlInit": NVML_ERROR_DRIVER_NOT_LOADED}))
    assert isinstance(probe, NoGpuProbe)
    assert probe.why.startswith("the NVIDIA driver is not loaded: load it (sudo modprobe nvidia)")
    assert "couldn't communicate with the NVIDIA driver" in probe.why
    assert probe.why.count("--vram") == 1
