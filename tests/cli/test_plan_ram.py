"""`moetune plan`'s RAM read bandwidth: this machine's, whatever the GPU (detected, ``--gpu``
or ``--vram``): given, saved by doctor, else measured once and saved; ``--no-measure``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from moetune.core.figures import TYPICAL_RAM_BYTES_PER_S
from moetune.errors import ExitCode
from moetune.hardware.base import RamBandwidthProbe
from moetune.hardware.host import LiveHostProbe
from moetune.jobs import figures
from moetune.jobs.figures import machine_identity
from moetune.store.machine import SavedRamBandwidth, save_ram_bandwidth, saved_ram_bandwidth

from support.fakes import FakeRamBandwidthProbe
from support.helpers import EXAMPLE_QWEN, cli

QWEN = str(EXAMPLE_QWEN)
PLAN = ("plan", QWEN, "--gpu", "rtx3060", "--ram", "64G")


class NoProbe:
    """A probe a test does not expect to be asked: any measurement fails the test."""

    why = None

    def measure(self, max_threads: int, available_bytes: int) -> None:
        pytest.fail("the RAM bandwidth was measured")


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> FakeRamBandwidthProbe:
    """Measuring allowed (the tests' MOETUNE_NO_MEASURE unset), by a fake probe at 30 GB/s."""
    fake = FakeRamBandwidthProbe.typical(30.0)
    monkeypatch.delenv(figures.NO_MEASURE_ENV)
    monkeypatch.setattr(figures, "streaming_probe", lambda: fake)
    return fake


@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measuring allowed, but a measurement fails the test."""
    monkeypatch.delenv(figures.NO_MEASURE_ENV)
    found: RamBandwidthProbe = NoProbe()
    monkeypatch.setattr(figures, "streaming_probe", lambda: found)


def _plan(*args: str) -> dict[str, Any]:
    """The plan's document: its ``forecast`` and the ``ram_read_bandwidth`` beside it."""
    code, out, err = cli(*PLAN, *args, "--json")
    assert code == 0, out + err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def _save(gb_s: float) -> Path:
    """This machine's RAM read bandwidth, saved as doctor saves it."""
    entry = SavedRamBandwidth(
        machine=machine_identity(LiveHostProbe().host()),
        bytes_per_s=round(gb_s * 1e9),
        threads=2,
        buffer_bytes=512 * 1024**2,
        passes=5,
        measured_at="2026-12-07T10:00:00+00:00",
    )
    return save_ram_bandwidth(entry)


@pytest.mark.usefixtures("no_probe")
def test_the_saved_figure_is_used() -> None:
    """doctor's saved figure: no `RAM bandwidth` missing, its source and date said."""
    file = _save(8.1)
    found = _plan()
    assert "RAM bandwidth" not in found["forecast"]["missing"]
    assert found["ram_read_bandwidth"] == {
        "bytes_per_s": 8_100_000_000,
        "source": "saved",
        "ram": None,
        "measured_at": "2026-12-07T10:00:00+00:00",
        "file": str(file),
    }
    code, out, _ = cli(*PLAN)
    assert code == 0
    text = " ".join(out.split())
    assert "RAM read 8.1 GB/s, measured on this machine 2026-12-07" in text
    assert "missing: RAM bandwidth" not in text
    # --vram sizes a GPU: the same figure
    code, out, _ = cli("plan", QWEN, "--vram", "12G", "--ram", "64G", "--json")
    assert code == 0 and json.loads(out)["ram_read_bandwidth"]["source"] == "saved"


@pytest.mark.usefixtures("no_probe")
def test_no_measure_assumes_the_typical_figure() -> None:
    """--no-measure with nothing saved: not measured, nothing saved, the typical figure
    assumed (core/figures.py), nothing missing."""
    found = _plan("--no-measure")
    assert found["forecast"]["missing"] == []
    ram = next(f for f in found["forecast"]["figures"] if f["figure"] == "RAM bandwidth")
    assert ram["provenance"] == "assumed" and ram["value"] == TYPICAL_RAM_BYTES_PER_S
    assert "DDR5-5600" in ram["basis"]
    assert "ram_read_bandwidth" not in found
    assert saved_ram_bandwidth(machine_identity(LiveHostProbe().host())) is None


def test_measured_once_and_kept(probe: FakeRamBandwidthProbe) -> None:
    """Nothing saved: the first forecast measures (once) and keeps the figure as doctor does;
    the next one reads it."""
    first = _plan()
    assert len(probe.calls) == 1
    figures = {f["figure"]: f for f in first["forecast"]["figures"]}
    assert figures["RAM bandwidth"]["provenance"] == "measured"
    ram = first["ram_read_bandwidth"]
    assert ram["source"] == "measured" and ram["bytes_per_s"] == 30 * 10**9
    kept = saved_ram_bandwidth(machine_identity(LiveHostProbe().host()))
    assert kept is not None and kept.bytes_per_s == 30 * 10**9 and kept.threads == 8
    again = _plan()
    assert len(probe.calls) == 1
    assert again["ram_read_bandwidth"] == {**ram, "source": "saved"}
    assert again["forecast"]["decode_tok_s"] == first["forecast"]["decode_tok_s"]
    assert again["forecast"]["prefill_terms"] == first["forecast"]["prefill_terms"]
    kept_figure = {f["figure"]: f for f in again["forecast"]["figures"]}["RAM bandwidth"]
    assert kept_figure["provenance"] == "saved"


def test_a_probe_that_cannot_measure_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """No figure measured: one warning, the typical figure assumed, nothing saved."""
    monkeypatch.delenv(figures.NO_MEASURE_ENV)
    fake = FakeRamBandwidthProbe(None, why="not measured: too little RAM")
    monkeypatch.setattr(figures, "streaming_probe", lambda: fake)
    code, out, err = cli(*PLAN, "--json")
    assert code == 0, err
    found = json.loads(out)["forecast"]
    assert found["missing"] == []
    assert {"figure": "RAM bandwidth", "provenance": "assumed"}.items() <= next(
        f for f in found["figures"] if f["figure"] == "RAM bandwidth"
    ).items()
    assert "too little RAM" in err and len(err.strip().splitlines()) == 1


@pytest.mark.usefixtures("no_probe")
@pytest.mark.parametrize(
    ("given", "bytes_per_s", "ram", "text"),
    [
        ("60G", 60 * 10**9, None, "RAM read 60.0 GB/s (--ram-bandwidth)"),
        (
            "ddr5-6000x2",
            96 * 10**9,
            "DDR5-6000 x2",
            "RAM read 96.0 GB/s, the peak of DDR5-6000 x2 (--ram-bandwidth)",
        ),
    ],
)
def test_a_given_figure_wins(given: str, bytes_per_s: int, ram: str | None, text: str) -> None:
    """--ram-bandwidth over the saved figure, said as given."""
    _save(8.1)
    found = _plan("--ram-bandwidth", given)
    assert found["ram_read_bandwidth"] == {
        "bytes_per_s": bytes_per_s,
        "source": "given",
        "ram": ram,
        "measured_at": None,
        "file": None,
    }
    code, out, _ = cli(*PLAN, "--ram-bandwidth", given)
    assert code == 0 and text in " ".join(out.split())


@pytest.mark.parametrize("bad", ["60M", "ddr5-6000", "ddr3-1600x2"])
def test_a_bad_bandwidth_is_one_line(bad: str) -> None:
    code, _, err = cli(*PLAN, "--ram-bandwidth", bad)
    assert code == ExitCode.BAD_VALUE
    assert len(err.strip().splitlines()) == 1
