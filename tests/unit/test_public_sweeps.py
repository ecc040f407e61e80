"""The public llama-bench sweeps under benchmarks/data/public_sweeps: every file parses, names
its source, holds rows with a speed, and where it gives a RAM peak, the peak is the formula
on the figures the source states (channels x 8 bytes x MT/s / 1000)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

SWEEPS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "public_sweeps"
FILES = sorted(SWEEPS.glob("*.json"))
URL = re.compile(r"https?://\S+")


def _load(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _machine(path: Path) -> dict[str, object]:
    machine = _load(path)["machine"]
    assert isinstance(machine, dict)
    return machine


def test_there_are_sweeps() -> None:
    assert len(FILES) >= 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_sweep_file(path: Path) -> None:
    data = _load(path)
    source = data["source"]
    assert isinstance(source, str) and URL.match(source), source
    for key in ("machine", "model", "settings", "unknown", "notes"):
        assert key in data, key
    rows = data["rows"]
    assert isinstance(rows, list) and rows
    for row in rows:
        assert isinstance(row, dict)
        ts = row["ts"]
        assert isinstance(ts, (int, float)) and ts > 0, row
        # the parsed speed is the posted text's number
        posted = row.get("ts_posted")
        if isinstance(posted, str):
            assert float(re.findall(r"[\d.]+", posted)[0]) == ts, row


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_sweep_indexed_in_readme(path: Path) -> None:
    assert path.name in (SWEEPS / "README.md").read_text()


RAM_PEAK = [p for p in FILES if _machine(p).get("ram_peak_gb_s") is not None]


def test_some_sweeps_state_their_ram() -> None:
    assert len(RAM_PEAK) >= 3


@pytest.mark.parametrize("path", RAM_PEAK, ids=lambda p: p.name)
def test_ram_peak_is_the_formula_on_the_stated_figures(path: Path) -> None:
    machine = _machine(path)
    channels, mt_s, peak = machine["ram_channels"], machine["ram_mt_s"], machine["ram_peak_gb_s"]
    assert isinstance(channels, int) and isinstance(mt_s, int)
    assert isinstance(peak, (int, float))
    assert math.isclose(peak, channels * 8 * mt_s / 1000), (channels, mt_s, peak)
    assert machine["ram_type"] in ("DDR4", "DDR5")
    for key in ("ram_config", "ram_source", "ram_peak_note"):
        assert isinstance(machine[key], str) and machine[key], key
    source = machine["ram_source"]
    assert isinstance(source, str) and URL.search(source)
    note = machine["ram_peak_note"]
    assert isinstance(note, str) and f"{channels} x 8 x {mt_s}" in note


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_figures_name_their_source(path: Path) -> None:
    """A stated figure of the machine comes with the URL it was read from."""
    machine = _machine(path)
    for figure, source in (
        ("ram_config", "ram_source"),
        ("pcie_gen", "pcie_source"),
        ("gpu_memory_bandwidth_gb_s", "gpu_memory_bandwidth_source"),
        ("ram_theoretical_gb_s_posted", "ram_source"),
    ):
        if machine.get(figure) is not None:
            text = machine.get(source)
            assert isinstance(text, str) and URL.search(text), (figure, source)
