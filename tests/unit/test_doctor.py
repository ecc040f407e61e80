"""`moetune doctor`'s checks on fake machines: no GPU, small RAM, WSL2, PCIe 3.0, a busy GPU,
and a model's RAM needs and speed ceiling."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from moetune.errors import ServerFailedError, ServerNotFoundError
from moetune.jobs.doctor import (
    DEFAULT_RAM_BANDWIDTH_BYTES_PER_S,
    gpu_findings,
)
from moetune.jobs.verify import reachable
from moetune.records.server import Device, ServerInfo
from moetune.store.hardware import find_hardware_profile
from moetune.store.machine import MachineIdentity, saved_ram_bandwidth
from moetune.store.paths import machine_file
from moetune.units import GIB, MIB

from support.doctor import HARDWARE, QWEN, cuda_server, gpu_4090, host, only, run
from support.fakes import FakeHostProbe, FakeRamBandwidthProbe
from support.llama import free_port


def test_healthy_machine() -> None:
    report = run()
    assert report.worst == "ok", [f for f in report.findings if f.status != "ok"]
    assert {f.check for f in report.findings} == {
        "gpu",
        "pcie",
        "driver",
        "cpu",
        "ram",
        "swap",
        "llama-server",
    }
    assert "PCIe 4.0 x16" in only(report, "pcie").message
    assert "-t 8" in only(report, "cpu").message  # 8 physical of 16 logical
    assert "build 6500" in only(report, "llama-server").message
    assert "CUDA0" in only(report, "llama-server").message


def test_no_gpu() -> None:
    report = run([])
    gpu = only(report, "gpu")
    assert gpu.status == "fail" and "no NVIDIA driver found" in gpu.message
    assert gpu.fix is not None and "--gpu" in gpu.fix
    assert report.worst == "fail"
    assert not [f for f in report.findings if f.check in ("pcie", "driver")]


def test_small_ram() -> None:
    report = run(the_host=FakeHostProbe.typical(8 * GIB).host())
    ram = only(report, "ram")
    assert ram.status == "warn" and ram.fix is not None


def test_small_ram_with_a_model_fails_the_ram_check() -> None:
    small = FakeHostProbe.typical(4 * GIB, ram_available_bytes=3 * GIB).host()
    report = run(the_host=small, model=QWEN, gpu_profile=find_hardware_profile("4060 Ti", HARDWARE))
    ram = only(report, "model-ram")
    assert ram.status == "fail" and "--n-cpu-moe" in ram.message and ram.fix
    decode = only(report, "decode")
    assert decode.status == "warn" and "RAM is short" in decode.message


def test_wsl2() -> None:
    report = run(the_host=host(is_wsl=True))
    wsl = only(report, "wsl")
    assert wsl.status == "warn" and "WSL2" in wsl.message
    assert wsl.fix is not None and ".wslconfig" in wsl.fix and "wsl --shutdown" in wsl.fix


def test_cgroup_limit() -> None:
    ram = only(run(the_host=host(ram_limit_bytes=16 * GIB)), "ram")
    assert ram.status == "warn" and "16.00 GiB" in ram.message


def test_pcie3_slot_for_a_pcie4_card() -> None:
    report = run([gpu_4090(pcie_gen_max=3, pcie_gen_current=3)])
    pcie = only(report, "pcie")
    assert pcie.status == "warn"
    assert "PCIe 3.0 x16 max" in pcie.message and "supports PCIe 4.0 x16" in pcie.message
    assert pcie.fix is not None and "slot" in pcie.fix


def test_pcie3_unknown_card() -> None:
    gpu = gpu_4090(name="NVIDIA Some Card", pcie_gen_max=3, pcie_gen_current=3)
    assert "PCIe 3.0 or older" in only(run([gpu]), "pcie").message


def test_pcie_fewer_lanes_now() -> None:
    pcie = only(run([gpu_4090(pcie_width_current=4)]), "pcie")
    assert pcie.status == "warn" and "fewer lanes" in pcie.message


def test_pcie_idle_generation_is_fine() -> None:
    pcie = only(run([gpu_4090(pcie_gen_current=1)]), "pcie")
    assert pcie.status == "ok" and "power saving" in pcie.message


def test_busy_gpu_and_old_driver() -> None:
    busy = gpu_4090(vram_free_bytes=20000 * MIB, driver_version="470.82.01")
    report = run([busy])
    assert only(report, "gpu").status == "warn" and "other processes" in only(report, "gpu").message
    assert only(report, "driver").status == "warn"


def test_swap_in_use() -> None:
    swap = only(run(the_host=host(swap_used_bytes=3 * GIB)), "swap")
    assert swap.status == "warn" and "1 tok/s" in (swap.fix or "")


def test_llama_server_states() -> None:
    def missing() -> ServerInfo:
        raise ServerNotFoundError("llama-server not found", hint="install llama.cpp")

    def broken() -> ServerInfo:
        raise ServerFailedError("`llama-server --version` exited with 1:\nboom")

    def cpu_only() -> ServerInfo:
        return cuda_server().model_copy(update={"devices": ()})

    assert only(run(server=missing), "llama-server").status == "fail"
    failed = only(run(server=broken), "llama-server")
    assert failed.status == "warn" and "\n" not in failed.message
    assert "sees no GPU" in only(run(server=cpu_only), "llama-server").message


def test_model_ceiling_on_a_detected_4090() -> None:
    report = run(model=QWEN, n_ctx=65536)
    c = report.ceiling
    assert c is not None and c.gpu_bandwidth_bytes_per_s == 1008 * 10**9
    expected = 1 / (
        c.gpu_bytes_per_token / c.gpu_bandwidth_bytes_per_s
        + c.cpu_bytes_per_token / c.ram_bandwidth_bytes_per_s
    )
    assert c.decode_tps == pytest.approx(expected)
    assert c.bottleneck == "GPU memory bandwidth" and c.cpu_bytes_per_token == 0
    assert c.ram_bandwidth_source == "assumed"
    assert c.ram_bandwidth_bytes_per_s == DEFAULT_RAM_BANDWIDTH_BYTES_PER_S
    decode = only(report, "decode")
    assert f"{c.decode_tps:.1f} tok/s" in decode.message and c.bottleneck in decode.message
    assert only(report, "model-ram").status == "ok"


def test_model_without_gpu_runs_on_the_cpu() -> None:
    report = run([], model=QWEN)
    c = report.ceiling
    assert c is not None and c.gpu_bytes_per_token == 0 and c.bottleneck == "RAM bandwidth"
    assert "CPU only" in only(report, "model-ram").message
    assert not [f for f in report.findings if f.check == "prefill"]


def test_unknown_card_without_profile() -> None:
    report = run([gpu_4090(name="NVIDIA Mystery GPU")], model=QWEN)
    decode = only(report, "decode")
    assert decode.status == "warn" and "unknown" in decode.message and "--gpu" in (decode.fix or "")
    assert report.ceiling is not None and report.ceiling.decode_tps is None


@pytest.mark.parametrize(("vram", "words"), [("2G", "the GPU needs"), ("512M", "headroom")])
def test_model_that_cannot_fit(tmp_path: Path, vram: str, words: str) -> None:
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(
        f'name = "Tiny"\nvram = "{vram}"\nmemory_bandwidth_gb_s = 100\n'
        "pcie_gen = 4\npcie_lanes = 16\n"
    )
    report = run(model=QWEN, gpu_profile=find_hardware_profile(str(tiny), HARDWARE))
    fit = only(report, "model-fit")
    assert fit.status == "fail" and words in fit.message
    assert report.ceiling is None


def test_no_gpu_with_a_described_one_is_a_warning() -> None:
    found = gpu_findings([], "no NVIDIA driver found", "--vram 24.00 GiB")
    assert [f.status for f in found] == ["warn"] and "--vram 24.00 GiB" in found[0].message
    assert [f.status for f in gpu_findings([], "no NVIDIA driver found")] == ["fail"]


def test_no_driver_says_install_the_driver_once() -> None:
    from moetune.hardware.base import VRAM_HINT

    for why in (  # what NVML's init failure and a missing nvidia-smi say (hardware/)
        "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded): install the NVIDIA "
        f"driver, or {VRAM_HINT}",
        f"nvidia-smi is not on PATH: install the NVIDIA driver, or {VRAM_HINT}",
    ):
        for described in (None, "--vram 24.00 GiB"):
            (found,) = gpu_findings([], why, described)
            said = f"{found.message} {found.fix}"
            assert said.count("install the NVIDIA driver") == 1, said


# --- the RAM read bandwidth and the links ---------------------------------------------------


def test_measured_ram_bandwidth_sets_the_ceiling_and_is_saved() -> None:
    probe = FakeRamBandwidthProbe.typical(40)
    file = machine_file()
    report = run(
        model=QWEN,
        gpu_profile=find_hardware_profile("rtx4060ti-16g", HARDWARE),
        ram_probe=probe,
        machine_file=file,
    )
    assert probe.calls == [(8, 60 * GIB)]  # the physical cores, the RAM available
    c = report.ceiling
    assert c is not None and c.ram_bandwidth_source == "measured"
    assert c.ram_bandwidth_bytes_per_s == 40 * 10**9
    # the RAM term of the ceiling: the bytes a token reads from RAM over the measured figure
    assert c.cpu_bytes_per_token > 0 and c.decode_tps == pytest.approx(
        1 / (c.gpu_bytes_per_token / (288 * 10**9) + c.cpu_bytes_per_token / (40 * 10**9))
    )
    finding = only(report, "ram-bandwidth")
    assert finding.status == "ok" and "RAM read 40.0 GB/s" in finding.message
    assert "read-only streaming" in finding.message and "8 threads" in finding.message
    assert "1 thread: 16.0 GB/s" in finding.message and str(file) in finding.message
    assert report.ram_read is not None and report.ram_read.source == "measured"
    saved = saved_ram_bandwidth(MachineIdentity(cpu_model="Fake CPU", ram_total_bytes=64 * GIB))
    assert saved is not None and saved.bytes_per_s == 40 * 10**9 and saved.threads == 8
    # --no-measure: the saved figure; --ram-bandwidth still wins for the ceiling
    again = run(model=QWEN, machine_file=file)
    assert again.ram_read is not None and again.ram_read.source == "saved"
    assert again.ceiling is not None and again.ceiling.ram_bandwidth_source == "saved"
    assert "measured 2" in only(again, "ram-bandwidth").message
    given = run(model=QWEN, machine_file=file, ram_bandwidth_bytes_per_s=90 * 10**9)
    assert given.ceiling is not None and given.ceiling.ram_bandwidth_source == "given"


def test_ram_bandwidth_not_measured() -> None:
    file = machine_file()
    nothing = run(machine_file=file)  # --no-measure, nothing saved yet
    assert "none saved" in only(nothing, "ram-bandwidth").message
    failed = run(ram_probe=FakeRamBandwidthProbe(None, why="not measured: no RAM"))
    finding = only(failed, "ram-bandwidth")
    assert finding.status == "warn" and "no RAM" in finding.message
    assert "--ram-bandwidth" in (finding.fix or "")
    assert not [f for f in run().findings if f.check == "ram-bandwidth"]


def test_ram_bandwidth_that_cannot_be_saved(tmp_path: Path) -> None:
    folder = tmp_path / "machine.json"
    folder.mkdir()
    report = run(ram_probe=FakeRamBandwidthProbe.typical(), machine_file=folder)
    finding = only(report, "ram-bandwidth")
    assert finding.status == "warn" and "not saved: cannot write" in finding.message
    assert report.ram_read is not None and report.ram_read.file is None


def test_rpc_device_link_is_the_network() -> None:
    rpc = Device(
        name="RPC0", description="10.0.0.2:50052", total_bytes=24 * GIB, free_bytes=23 * GIB
    )

    def with_rpc() -> ServerInfo:
        server = cuda_server()
        return server.model_copy(update={"devices": (rpc, *server.devices)})

    report = run(server=with_rpc)
    device = only(report, "device")
    assert "RPC0" in device.message and "no PCIe link" in device.message
    assert "network" in device.message
    links = {link.name: link.link for link in report.device_links}
    assert links == {"RPC0": "network", "CUDA0": "pcie"}


def _rpc_only(*endpoints: str) -> Callable[[], ServerInfo]:
    """llama-server as a CPU-only build lists RPC servers: each one's device, nothing else."""

    def listed() -> ServerInfo:
        devices = tuple(
            Device(name=f"RPC{i}", description=ep, total_bytes=24 * GIB, free_bytes=23 * GIB)
            for i, ep in enumerate(endpoints)
        )
        return cuda_server().model_copy(update={"devices": devices})

    return listed


def test_rpc_servers_stand_in_for_a_missing_gpu() -> None:
    """No NVIDIA GPU, but the --rpc servers given are listed: the gpu check passes (it says
    the RPC servers are the devices), and each server is a device finding."""
    endpoints = ("10.0.0.2:50052", "10.0.0.3:50052")
    report = run([], server=_rpc_only(*endpoints), rpc_endpoints=endpoints)
    gpu = only(report, "gpu")
    assert gpu.status == "ok" and "--rpc 10.0.0.2:50052,10.0.0.3:50052" in gpu.message
    assert report.worst == "ok", [f for f in report.findings if f.status != "ok"]
    devices = [f.message for f in report.findings if f.check == "device"]
    assert [m.split()[1].rstrip(":") for m in devices] == list(endpoints)
    assert only(run([]), "gpu").status == "fail"  # without --rpc the missing GPU still fails


def test_rpc_server_that_does_not_answer_fails() -> None:
    """A --rpc server llama-server cannot list: a failure naming it when nothing listens on its
    port (a real socket probe), a warning when something answers there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        alive = f"127.0.0.1:{listening.getsockname()[1]}"
        dead = f"127.0.0.1:{free_port()}"
        report = run(
            [],
            server=_rpc_only(alive),
            rpc_endpoints=(alive, dead),
            rpc_reachable=reachable,
        )
        assert only(report, "gpu").status == "ok"
        failed = [f for f in report.findings if f.status == "fail"]
        assert [f.check for f in failed] == ["device"]
        assert dead in failed[0].message and "does not answer" in failed[0].message
        assert failed[0].fix is not None and "ggml-rpc-server" in failed[0].fix
        assert f"-p {dead.rsplit(':', 1)[1]}" in failed[0].fix

        def broken() -> ServerInfo:
            raise ServerFailedError("llama-server --list-devices failed")

        unlisted = run([], server=broken, rpc_endpoints=(alive,), rpc_reachable=reachable)
        device = only(unlisted, "device")
        assert device.status == "warn" and alive in device.message


def test_model_fit_not_checked_when_the_devices_are_not_known() -> None:
    report = run([], model=QWEN, rpc_endpoints=("10.0.0.2:50052",), devices_error="no answer")
    fit = only(report, "model-fit")
    assert fit.status == "fail" and "not checked: no answer" in fit.message and fit.fix
    assert report.ceiling is None
