"""core/figures.py: every figure a forecast needs has a value and where it came from; the
GPU class table is what the shipped hardware profiles give (scripts/class-figures.py), and
an assumed figure is named by the forecast and left out of a calibration's efficiencies."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from moetune.core.calibrate import fit_speed
from moetune.core.devices import DeviceSpec
from moetune.core.figures import (
    ASSUMED_CORES,
    GPU_CLASS_TABLE,
    GPU_CLASSES_GIB,
    TYPICAL_RAM_BYTES_PER_S,
    FigureSource,
    ProfileFigures,
    class_figures,
    cpu_flops,
    estimated,
    gpu_class,
    typical_gpu,
    typical_ram,
)
from moetune.core.prior import UNCALIBRATED_ERROR
from moetune.core.speed import forecast
from moetune.errors import BadValueError
from moetune.jobs.figures import machine_figures
from moetune.units import GIB

from support.public_sweeps import PUBLIC, uncalibrated_errors

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "class-figures.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("class_figures_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_class_table_is_what_the_shipped_profiles_give() -> None:
    """A profile added or changed without the table printed again fails here."""
    assert class_figures(_script().shipped()) == GPU_CLASS_TABLE
    assert [c.high_gib for c in GPU_CLASS_TABLE] == [*GPU_CLASSES_GIB, None]


def _profile(id: str, gib: float, gb_s: float, tflops: float | None) -> ProfileFigures:
    return ProfileFigures(
        id=id,
        vram_bytes=round(gib * GIB),
        memory_bytes_per_s=gb_s * 1e9,
        link_bytes_per_s=31.5e9,
        flops_per_s=None if tflops is None else tflops * 1e12,
    )


def test_a_class_figure_is_the_median_of_its_class() -> None:
    """Each class's median over its profiles; a figure none of them has: every size's."""
    profiles = [
        _profile("a", 8, 400, None),
        _profile("b", 7.9, 500, None),
        _profile("c", 8.2, 600, None),  # within 3 % of 8 GiB: the 8 GiB class
        _profile("d", 24, 1000, 200),
        _profile("e", 23.5, 900, 90),
    ]
    table = {c.high_gib: c for c in class_figures(profiles)}
    small, large = table[8], table[24]
    assert small.memory.value == 500e9 and small.memory.profiles == 3
    assert large.memory.value == 950e9
    assert large.flop_per_byte.value == pytest.approx(statistics.median([200, 100]))
    assert not large.flop_per_byte.every_size
    assert small.flop_per_byte.every_size and small.flop_per_byte.profiles == 2
    assert "every size" in small.flop_per_byte.basis("FLOP per byte/s")
    assert table[16].memory.every_size  # no profile of 12-16 GiB: every size's
    with pytest.raises(ValueError, match="no profile"):
        class_figures([_profile("x", 8, 400, None)])


def test_classes_by_size() -> None:
    assert gpu_class(8 * GIB) == 8 and gpu_class(round(8.2 * GIB)) == 8
    assert gpu_class(9 * GIB) == 12 and gpu_class(round(15.9 * GIB)) == 16
    assert gpu_class(200 * GIB) is None
    assert typical_gpu(None) == typical_gpu(16 * GIB)
    assert typical_gpu(24 * GIB).label == "GPUs of 16-24 GiB"
    assert typical_gpu(4 * GIB).label == "GPUs of up to 8 GiB"
    assert typical_gpu(200 * GIB).label == "GPUs above 96 GiB"


def test_cpu_and_ram_typical_figures() -> None:
    """The CPU: cores x 32 FLOP per clock (AVX2 FMA) x 3 GHz; the RAM: DDR5-5600 x2's peak."""
    assert cpu_flops(16).value == 16 * 32 * 3e9 and cpu_flops(16).provenance == "assumed"
    assert cpu_flops(None).value == ASSUMED_CORES * 32 * 3e9
    assert "(assumed)" in cpu_flops(None).basis
    assert typical_ram().value == TYPICAL_RAM_BYTES_PER_S == 89.6e9
    assert typical_ram().provenance == "assumed"
    with pytest.raises(BadValueError, match="positive"):
        FigureSource(figure="x", value=0, provenance="assumed", basis="")


def test_every_figure_has_a_value_and_a_provenance() -> None:
    """A device without a profile: its class's figures, its FLOP/s from its bandwidth, an RPC
    device's link 1 Gbit/s; the RAM typical; each assumed, nothing unknown."""
    devices = (
        DeviceSpec(name="RPC0", buft="RPC0[h:1]", kind="rpc", total_bytes=24 * GIB),
        DeviceSpec(name="CUDA0", total_bytes=12 * GIB),
    )
    machine = machine_figures(devices, (None, None), None, cores=4)
    assert all(
        d.memory_bytes_per_s and d.link_bytes_per_s and d.flops_per_s for d in machine.devices
    )
    assert machine.ram_bytes_per_s == TYPICAL_RAM_BYTES_PER_S
    assert machine.cpu_flops_per_s == 4 * 32 * 3e9
    assert {s.provenance for s in machine.sources} == {"assumed"}
    assert machine.devices[0].link_bytes_per_s == 125e6
    twelve = typical_gpu(12 * GIB)
    assert machine.devices[1].memory_bytes_per_s == twelve.memory.value
    assert machine.devices[1].flops_per_s == pytest.approx(
        twelve.memory.value * twelve.flop_per_byte.value
    )
    assert estimated(machine.sources) == {"assumed": [s.figure for s in machine.sources]}
    blind = machine.without("assumed")
    assert blind.ram_bytes_per_s is None and blind.cpu_flops_per_s is None
    assert all(d.memory_bytes_per_s is None for d in blind.devices) and not blind.sources


def test_a_forecast_names_the_figures_it_used() -> None:
    """Only the figures its terms used (a term that moves or computes something)."""
    sweep = next(s for s in PUBLIC if s.gpu_profile == "quadro-rtx5000")
    m = next(m for m in sweep.points() if m.is_decode)
    found = forecast(m.layout, sweep.filled_figures(), n_prompt=512)
    names = [f.figure for f in found.figures]
    assert "CUDA0 memory bandwidth" in names and "RAM bandwidth" in names
    assert found.missing == []
    assert found.decode_tok_s is not None and found.prefill_tok_s is not None


def test_a_calibration_fits_a_rate_for_an_assumed_figure() -> None:
    """An assumed figure is not a bound: the fit reads an effective rate for its kind (as for
    a missing figure), and an efficiency of a published one."""
    sweep = next(s for s in PUBLIC if s.gpu_profile == "quadro-rtx5000")
    points = sweep.points()
    published = sweep.filled_figures()
    assumed = replace(
        published,
        sources=tuple(
            replace(s, provenance="assumed") if s.figure == "RAM bandwidth" else s
            for s in published.sources
        ),
    )
    assert "ram" in fit_speed(points, assumed).rates
    assert "ram" not in fit_speed(points, published).rates


def test_expected_error_is_what_the_public_sweeps_give() -> None:
    """core/prior.py's UNCALIBRATED_ERROR: the median leave-one-machine-out error over every
    public row, each with a forecast (benchmarks/speed_forecast.py prints it)."""
    errors = [e for _, _, e in uncalibrated_errors()]
    assert all(e is not None for e in errors)  # coverage: every row
    known = [e for e in errors if e is not None]
    assert round(statistics.median(known), 3) == UNCALIBRATED_ERROR
