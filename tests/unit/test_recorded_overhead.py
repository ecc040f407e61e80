"""A runtime overhead measured by a run, recorded in the user's own hardware profile of the
card (store/hardware.py ``record_runtime_overhead``) and taken by a plan for the card
(jobs/devices.py ``profile_overhead``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.errors import BadValueError
from moetune.jobs.devices import profile_overhead
from moetune.store.hardware import (
    HardwareProfile,
    find_hardware_profile,
    load_hardware_profiles,
    record_runtime_overhead,
    shipped_hardware_dir,
)
from moetune.units import MIB

MINE = """# my own card
name = "My Card 12G"
vram = "12G"
memory_bandwidth_gb_s = 360  # a comment of mine
pcie_gen = 4
pcie_lanes = 16
"""


def _profile(user: Path, card: str) -> HardwareProfile:
    return next(p for p in load_hardware_profiles(user) if p.id == card)


def test_a_shipped_card_gets_a_copy_that_keeps_the_largest(tmp_path: Path) -> None:
    shipped = shipped_hardware_dir().joinpath("rtx4090.toml").read_text("utf-8")
    profile = find_hardware_profile("rtx4090")
    assert profile.shipped and profile.runtime_overhead_mib is None
    assert profile_overhead(profile) is None
    path, kept, written = record_runtime_overhead(profile, 345, 'run "A" on C:\\x', tmp_path)
    assert (path, kept, written) == (tmp_path / "rtx4090.toml", 345, True)
    text = path.read_text()
    assert text.startswith(shipped.rstrip("\n"))  # the figures keep their sources
    mine = _profile(tmp_path, "rtx4090")
    assert not mine.shipped and mine.runtime_overhead_mib == 345
    assert mine.runtime_overhead_measured == 'run "A" on C:\\x'
    assert mine.fp16_tflops == profile.fp16_tflops and mine.vram == profile.vram
    assert record_runtime_overhead(mine, 300, "smaller", tmp_path) == (path, 345, False)
    assert path.read_text() == text
    assert record_runtime_overhead(mine, 400, "larger", tmp_path) == (path, 400, True)
    again = path.read_text()
    assert again.count("runtime_overhead_mib") == 1 and again.count("# Measured by") == 1
    found = profile_overhead(_profile(tmp_path, "rtx4090"))
    assert found is not None and found[0] == 400 * MIB and "larger" in found[1]
    assert shipped_hardware_dir().joinpath("rtx4090.toml").read_text("utf-8") == shipped


def test_the_users_own_profile_keeps_its_lines(tmp_path: Path) -> None:
    (tmp_path / "mycard.toml").write_text(MINE)
    profile = _profile(tmp_path, "mycard")
    path, kept, written = record_runtime_overhead(profile, 200, "measured", tmp_path)
    assert written and kept == 200
    assert path.read_text().startswith(MINE)
    assert _profile(tmp_path, "mycard").runtime_overhead_bytes == 200 * MIB


def test_a_hardware_folder_that_cannot_be_made_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "hardware"
    blocker.write_text("a file where the folder goes")
    with pytest.raises(BadValueError, match="cannot write"):
        record_runtime_overhead(find_hardware_profile("rtx4090"), 100, "x", blocker)
