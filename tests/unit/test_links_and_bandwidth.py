"""What the forecast needs from this machine: each PCIe link's bandwidth (the arithmetic per
generation and width, NVML's links through the fake), the RAM read bandwidth (a real, small
and bounded run here), and the figure saved under $MOETUNE_HOME."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from moetune.errors import BadValueError
from moetune.hardware import NvmlProbe, RamBandwidthProbe, StreamingReadProbe
from moetune.hardware.host import cpu_model
from moetune.hardware.membw import (
    MIN_BUFFER_BYTES,
    buffer_bytes_for,
    last_level_cache_bytes,
    measure_read_bandwidth,
    thread_counts,
)
from moetune.jobs.doctor import pcie_link
from moetune.store.hardware import pcie_bandwidth_bytes_per_s
from moetune.store.machine import (
    MachineIdentity,
    SavedRamBandwidth,
    save_ram_bandwidth,
    saved_ram_bandwidth,
)
from moetune.store.paths import machine_file
from moetune.units import GIB, MIB

from support.doctor import only, run
from support.fake_pynvml import FakeDevice, FakeNvml
from support.fakes import FakeRamBandwidthProbe

# --- PCIe ---------------------------------------------------------------------------------------

# One direction, by hand: GT/s x 1e9 x encoding / 8 bits x lanes.
LINKS = [
    (1, 1, 250_000_000),  # 2.5e9 * 8/10 / 8
    (2, 8, 4_000_000_000),  # 5e9 * 8/10 / 8 * 8
    (3, 4, 3_938_461_538),  # 8e9 * 128/130 / 8 * 4 = 3.9385e9
    (3, 16, 15_753_846_154),  # 8e9 * 128/130 / 8 * 16
    (4, 8, 15_753_846_154),  # 16e9 * 128/130 / 8 * 8: a gen4 x8 card is a gen3 x16 one
    (4, 16, 31_507_692_308),  # 16e9 * 128/130 / 8 * 16
    (5, 16, 63_015_384_615),  # 32e9 * 128/130 / 8 * 16
    (6, 16, 121_000_000_000),  # 64e9 * 242/256 / 8 * 16 (FLIT: 242 of 256 bytes)
]


@pytest.mark.parametrize(("gen", "lanes", "expected"), LINKS)
def test_pcie_bandwidth_per_generation_and_width(gen: int, lanes: int, expected: int) -> None:
    assert pcie_bandwidth_bytes_per_s(gen, lanes) == expected


def test_pcie_generation_outside_the_specs_is_refused() -> None:
    with pytest.raises(ValueError, match="generation 7"):
        pcie_bandwidth_bytes_per_s(7, 16)


def test_fake_nvml_x16_gen4_idle_is_fine() -> None:
    """An RTX 4090 at idle: gen 1 now, gen 4 x16 at most; no warning, but it says why."""
    (gpu,) = NvmlProbe(FakeNvml([FakeDevice(pcie=(1, 4, 16, 16), card_gen=4)])).gpus()
    link = pcie_link(gpu)
    assert (link.gen_current, link.gen_max, link.width_max, link.gen_card_max) == (1, 4, 16, 4)
    assert link.max_bytes_per_s == 31_507_692_308
    assert link.current_bytes_per_s == 4_000_000_000  # gen 1 x16
    pcie = only(run([gpu]), "pcie")
    assert pcie.status == "ok" and "power saving" in pcie.message
    assert "31.5 GB/s per direction" in pcie.message


def test_fake_nvml_x4_gen3_is_a_warning() -> None:
    (gpu,) = NvmlProbe(
        FakeNvml([FakeDevice(name="NVIDIA Some Card", pcie=(3, 3, 4, 4), card_gen=3)])
    ).gpus()
    assert pcie_link(gpu).max_bytes_per_s == 3_938_461_538
    pcie = only(run([gpu]), "pcie")
    assert pcie.status == "warn" and "PCIe 3.0 x4 max (3.9 GB/s" in pcie.message


def test_fake_nvml_x4_gen4_link_of_an_unknown_card_is_a_warning() -> None:
    (gpu,) = NvmlProbe(
        FakeNvml([FakeDevice(name="NVIDIA Some Card", pcie=(4, 4, 4, 4), card_gen=4)])
    ).gpus()
    pcie = only(run([gpu]), "pcie")
    assert pcie.status == "warn" and "an x4 link" in pcie.message


def test_fake_nvml_card_faster_than_its_slot() -> None:
    """A gen5 card (NVML's own maximum) in a gen4 slot: the slot limits it."""
    (gpu,) = NvmlProbe(
        FakeNvml([FakeDevice(name="NVIDIA Some Card", pcie=(4, 4, 16, 16), card_gen=5)])
    ).gpus()
    pcie = only(run([gpu]), "pcie")
    assert pcie.status == "warn" and "the card supports PCIe 5.0 x16" in pcie.message


def test_fake_nvml_current_width_below_max() -> None:
    (gpu,) = NvmlProbe(FakeNvml([FakeDevice(pcie=(4, 4, 8, 16))])).gpus()
    link = pcie_link(gpu)
    assert link.current_bytes_per_s == 15_753_846_154 and link.max_bytes_per_s == 31_507_692_308
    pcie = only(run([gpu]), "pcie")
    assert (
        pcie.status == "warn" and "fewer lanes" in pcie.message and "under load" in (pcie.fix or "")
    )


def test_fake_nvml_without_the_card_maximum() -> None:
    """An old driver without nvmlDeviceGetGpuMaxPcieLinkGeneration: unknown, no error."""
    device = FakeDevice(errors={"nvmlDeviceGetGpuMaxPcieLinkGeneration": 13})
    (gpu,) = NvmlProbe(FakeNvml([device])).gpus()
    assert gpu.pcie_gen_card_max is None and pcie_link(gpu).max_bytes_per_s == 31_507_692_308


# --- RAM read bandwidth --------------------------------------------------------------------------


def test_measurement_is_positive_and_bounded() -> None:
    """A real run on this machine, small buffer: each thread count tried gives a positive
    figure, the best is reported with its count, and the budget holds."""
    start = time.perf_counter()
    figure = measure_read_bandwidth(16 * MIB, max_threads=2, seconds=0.2)
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0 and figure.seconds <= elapsed
    assert figure.buffer_bytes == 16 * MIB and 1 <= figure.passes <= 5
    assert set(figure.by_threads) <= {1, 2} and 1 in figure.by_threads
    assert all(rate > 0 for rate in figure.by_threads.values())
    assert figure.bytes_per_s == max(figure.by_threads.values())
    assert figure.by_threads[figure.threads] == figure.bytes_per_s


def test_probe_implements_the_protocol_and_refuses_a_buffer_ram_cannot_hold(
    tmp_path: Path,
) -> None:
    probe = StreamingReadProbe(seconds=0.1, cache_dir=tmp_path)
    assert isinstance(probe, RamBandwidthProbe)
    assert isinstance(FakeRamBandwidthProbe.typical(), RamBandwidthProbe)
    assert probe.measure(2, available_bytes=1 * GIB) is None  # 256 MiB needs 2 GiB free
    assert probe.why is not None and "256 MiB buffer" in probe.why
    small = StreamingReadProbe(seconds=0.1, buffer_bytes=8 * MIB)
    figure = small.measure(1, available_bytes=1 * GIB)
    assert figure is not None and figure.threads == 1 and small.why is None


def test_buffer_larger_than_the_last_level_cache(tmp_path: Path) -> None:
    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "32K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "480M"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(tmp_path) == 480 * MIB
    assert last_level_cache_bytes(tmp_path / "none") is None
    assert buffer_bytes_for(480 * MIB, 64 * GIB) == 960 * MIB
    assert buffer_bytes_for(32 * MIB, 64 * GIB) == MIN_BUFFER_BYTES
    assert buffer_bytes_for(None, 64 * GIB) == MIN_BUFFER_BYTES
    assert buffer_bytes_for(4 * GIB, 512 * GIB) == 2048 * MIB  # at most 2 GiB
    assert buffer_bytes_for(480 * MIB, 4 * GIB) is None  # 960 MiB > 4 GiB / 8


def test_thread_counts() -> None:
    assert thread_counts(1) == [1]
    assert thread_counts(6) == [1, 2, 4, 6]
    assert thread_counts(8) == [1, 2, 4, 8]


def test_cpu_model_from_proc_cpuinfo(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD Ryzen 9  7950X 16-Core Processor\n")
    assert cpu_model(x86) == "AMD Ryzen 9 7950X 16-Core Processor"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nModel\t: Raspberry Pi 5 Model B\n")
    assert cpu_model(arm) == "Raspberry Pi 5 Model B"


# --- the saved figure ----------------------------------------------------------------------------

HERE = MachineIdentity(cpu_model="AMD Ryzen 9 7950X", ram_total_bytes=64 * GIB)


def _figure(machine: MachineIdentity, gb_s: float) -> SavedRamBandwidth:
    return SavedRamBandwidth(
        machine=machine,
        bytes_per_s=round(gb_s * 1e9),
        threads=8,
        buffer_bytes=512 * MIB,
        passes=5,
        by_threads={1: round(gb_s * 4e8), 8: round(gb_s * 1e9)},
        measured_at="2025-06-01T12:00:00+00:00",
    )


def test_saved_figure_is_read_back_per_machine() -> None:
    path = machine_file()  # under this test's own MOETUNE_HOME
    assert saved_ram_bandwidth(HERE) is None
    other = MachineIdentity(cpu_model="Intel Core i9-13900K", ram_total_bytes=32 * GIB)
    save_ram_bandwidth(_figure(HERE, 70))
    save_ram_bandwidth(_figure(other, 80))
    save_ram_bandwidth(_figure(HERE, 75))  # replaces the first
    # the same machine: RAM a little different (kernel reserve), not another size
    again = MachineIdentity(cpu_model=HERE.cpu_model, ram_total_bytes=64 * GIB - 300 * MIB)
    found = saved_ram_bandwidth(again)
    assert found is not None and found.bytes_per_s == 75 * 10**9 and found.by_threads[8] > 0
    assert saved_ram_bandwidth(other) == _figure(other, 80)
    bigger = MachineIdentity(cpu_model=HERE.cpu_model, ram_total_bytes=128 * GIB)
    assert saved_ram_bandwidth(bigger) is None
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and len(data["ram_read_bandwidth"]) == 2
    # written atomically: no temporary file left beside it
    assert sorted(p.name for p in path.parent.iterdir()) == [".machine.json.lock", "machine.json"]


def test_a_broken_saved_file_is_an_error_to_read_and_replaced_by_a_save() -> None:
    path = machine_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"schema_version": 1, "ram_read_bandwidth": [{"bytes_per_s": -1}]}')
    with pytest.raises(BadValueError, match=r"machine\.json"):
        saved_ram_bandwidth(HERE)
    path.write_text("{not json")
    with pytest.raises(BadValueError, match="not JSON"):
        saved_ram_bandwidth(HERE)
    save_ram_bandwidth(_figure(HERE, 70))
    assert saved_ram_bandwidth(HERE) == _figure(HERE, 70)


def test_a_folder_in_place_of_the_file(tmp_path: Path) -> None:
    (tmp_path / "machine.json").mkdir()
    with pytest.raises(BadValueError, match="cannot read"):
        saved_ram_bandwidth(HERE, tmp_path / "machine.json")
    with pytest.raises(BadValueError, match="cannot write"):
        save_ram_bandwidth(_figure(HERE, 70), tmp_path / "machine.json")
