"""The shipped hardware profiles as a set: how many, each figure sourced, names and aliases
unambiguous, the cards moetune issue 14 asks for present, memory sizes plausible, the FP16
figure where there is one sourced and the cards that are not NVIDIA's found by llama.cpp's
name for them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from moetune.store.hardware import (
    HardwareProfile,
    find_hardware_profile,
    load_hardware_profiles,
    match_detected,
)
from moetune.units import GIB

from support.helpers import ROOT

SHIPPED = ROOT / "src" / "moetune" / "profiles_data"
FILES = sorted(SHIPPED.glob("*.toml"))
FIGURES = ("name", "vram", "memory_bandwidth_gb_s", "pcie_gen", "pcie_lanes")
SOURCE = re.compile(r"TechPowerUp|NVIDIA|nvidia-smi|datasheet|whitepaper|https://", re.IGNORECASE)

# The cards the issue names, by the name NVML reports for them.
REQUIRED_NAMES = {
    "NVIDIA GeForce RTX 2070",
    "NVIDIA GeForce RTX 2080",
    "NVIDIA GeForce RTX 2080 Ti",
    "NVIDIA GeForce RTX 3060",
    "NVIDIA GeForce RTX 3060 Ti",
    "NVIDIA GeForce RTX 3070",
    "NVIDIA GeForce RTX 3070 Ti",
    "NVIDIA GeForce RTX 3080",
    "NVIDIA GeForce RTX 3080 Ti",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 4060 Ti",
    "NVIDIA GeForce RTX 4070",
    "NVIDIA GeForce RTX 4070 SUPER",
    "NVIDIA GeForce RTX 4070 Ti",
    "NVIDIA GeForce RTX 4070 Ti SUPER",
    "NVIDIA GeForce RTX 4080",
    "NVIDIA GeForce RTX 4080 SUPER",
    "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 5060 Ti",
    "NVIDIA GeForce RTX 5070",
    "NVIDIA GeForce RTX 5070 Ti",
    "NVIDIA GeForce RTX 5080",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA GeForce RTX 4080 Laptop GPU",
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "NVIDIA GeForce RTX 5090 Laptop GPU",
    "NVIDIA RTX A4000",
    "NVIDIA RTX A5000",
    "NVIDIA RTX A6000",
    "NVIDIA RTX 6000 Ada Generation",
    "NVIDIA L4",
    "NVIDIA L40S",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H200",
}

# Nominal memory in GiB (GB as the vendor sells it) of profiles whose id does not say it.
NOMINAL_GIB = {
    "quadro-rtx5000": 16,
    "rtx2070": 8,
    "rtx2080": 8,
    "rtx2080ti": 11,
    "rtx3060ti": 8,
    "rtx3070": 8,
    "rtx3070ti": 8,
    "rtx3080ti": 12,
    "rtx3090": 24,
    "rtx3090ti": 24,
    "rtx4070": 12,
    "rtx4070super": 12,
    "rtx4070ti": 12,
    "rtx4070tisuper": 16,
    "rtx4080": 16,
    "rtx4080super": 16,
    "rtx4080-laptop": 12,
    "rtx4090": 24,
    "rtx4090-laptop": 16,
    "rtx5070": 12,
    "rtx5070ti": 16,
    "rtx5080": 16,
    "rtx5090": 32,
    "rtx5090-laptop": 24,
    "rtx-a4000": 16,
    "rtx-a5000": 24,
    "rtx-a6000": 48,
    "rtx6000-ada": 48,
    "l4": 24,
    "l40s": 48,
    "h100-sxm": 80,
    "h100-pcie": 80,
    "h200": 141,
    "arc-b580": 12,
    "radeon-ai-pro-r9700": 32,
    "radeon-rx7900xt": 20,
    "radeon-rx7900xtx": 24,
    "radeon-rx9070xt": 16,
}

# The cards that are not NVIDIA's, by the name llama.cpp's device list prints for them.
NOT_NVIDIA = {
    "arc-a770-16g": "Intel(R) Arc(TM) A770 Graphics",
    "arc-b580": "Intel(R) Arc(TM) B580 Graphics",
    "radeon-ai-pro-r9700": "AMD Radeon AI PRO R9700",
    "radeon-rx7900xt": "AMD Radeon RX 7900 XT",
    "radeon-rx7900xtx": "AMD Radeon RX 7900 XTX",
    "radeon-rx9070xt": "AMD Radeon RX 9070 XT",
}


def _shipped() -> list[HardwareProfile]:
    return [p for p in load_hardware_profiles() if p.shipped]


def _nominal_gib(profile_id: str) -> int:
    sized = re.search(r"-(\d+)g$", profile_id)
    return int(sized.group(1)) if sized else NOMINAL_GIB[profile_id]


def _comment_above(lines: list[str], key: str) -> str:
    """The comment block right above ``key =``; pcie_lanes shares pcie_gen's."""
    index = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
    if key == "pcie_lanes" and lines[index - 1].startswith("pcie_gen ="):
        index -= 1
    block: list[str] = []
    for line in reversed(lines[:index]):
        if not line.startswith("#"):
            break
        block.insert(0, line)
    return "\n".join(block)


def test_at_least_25_shipped_profiles() -> None:
    assert len(FILES) >= 25
    assert len(_shipped()) == len(FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_figure_has_a_sourced_comment(path: Path) -> None:
    lines = path.read_text("utf-8").splitlines()
    for key in FIGURES:
        comment = _comment_above(lines, key)
        assert comment, f"{path.name}: no comment above {key}"
        if key != "name":
            assert SOURCE.search(comment), f"{path.name}: the comment above {key} names no source"
    vram = next(line for line in lines if line.startswith("vram ="))
    if not vram.rstrip().endswith('MiB"'):  # a nominal size, not nvidia-smi's figure
        assert "nominal" in _comment_above(lines, "vram"), f"{path.name}: say the size is nominal"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_an_fp16_figure_has_a_sourced_comment(path: Path) -> None:
    """Where a profile has fp16_tflops, the comment above it names its source and says the
    figure is the dense one (one definition for every card: profiles/README.md); where it has
    none, the file says so."""
    text = path.read_text("utf-8")
    lines = text.splitlines()
    if not any(line.startswith("fp16_tflops =") for line in lines):
        assert "fp16_tflops: not given" in text, f"{path.name}: say why there is no FP16 figure"
        return
    comment = _comment_above(lines, "fp16_tflops")
    assert SOURCE.search(comment), f"{path.name}: the comment above fp16_tflops names no source"
    assert "dense" in comment, f"{path.name}: say the FP16 figure is the dense one"
    profile = next(p for p in _shipped() if p.id == path.stem)
    assert profile.fp16_tflops is not None
    assert f"{profile.fp16_tflops:g}" in comment  # the figure is the one the source gives


def test_most_nvidia_data_centre_and_flagship_cards_have_the_fp16_figure() -> None:
    with_figure = {p.id for p in _shipped() if p.fp16_tflops is not None}
    assert with_figure >= {"rtx4090", "rtx3090", "rtx5090", "a100-sxm4-80g", "h100-sxm", "l40s"}


def test_cards_not_nvidia_are_found_by_llama_cpp_s_name() -> None:
    """The bench forecast looks a device's profile up by the name llama.cpp lists it by
    (match_detected without a memory size); --gpu finds it by id, name or alias."""
    profiles = _shipped()
    for profile_id, name in NOT_NVIDIA.items():
        found = match_detected(name, None, profiles)
        assert found is not None and found.id == profile_id
        assert find_hardware_profile(name, profiles).id == profile_id
        assert not found.name.startswith("NVIDIA")


def test_aliases_are_lower_case_unique_and_find_their_profile() -> None:
    profiles = _shipped()
    seen: dict[str, str] = {}
    for profile in profiles:
        for alias in profile.aliases:
            assert alias == alias.lower(), f"{profile.id}: alias {alias!r} is not lower-case"
            key = re.sub(r"[^a-z0-9]", "", alias)
            assert seen.setdefault(key, profile.id) == profile.id, f"{alias!r}: two profiles"
            assert find_hardware_profile(alias, profiles).id == profile.id, alias
        assert find_hardware_profile(profile.id, profiles).id == profile.id


def test_names_unique_or_told_apart_by_memory() -> None:
    """One NVML name is one profile, except a card sold in two memory sizes (RTX 3080 10/12 GB):
    then the sizes are more than 10 % apart, so that match_detected picks the right one."""
    profiles = _shipped()
    by_name: dict[str, list[HardwareProfile]] = {}
    for profile in profiles:
        by_name.setdefault(profile.name, []).append(profile)
    for name, same in by_name.items():
        assert len(same) <= 2, name
        for profile in same:
            assert match_detected(name, profile.vram_bytes, profiles) == profile
    assert len(by_name) >= len(profiles) - 1


def test_the_issues_cards_are_there() -> None:
    assert {p.name for p in _shipped()} >= REQUIRED_NAMES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_vram_is_close_to_the_nominal_size(path: Path) -> None:
    profile = next(p for p in _shipped() if p.id == path.stem)
    nominal = _nominal_gib(profile.id) * GIB
    # nvidia-smi reports up to ~6.5 % less than nominal where ECC reserves memory (L4, L40S).
    assert 0.92 * nominal <= profile.vram_bytes <= nominal, (profile.id, profile.vram)


def test_the_readme_table_lists_every_profile_and_its_fp16_figure() -> None:
    text = (ROOT / "profiles" / "README.md").read_text("utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    table = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0].strip("`")] = cells
    profiles = {p.id: p for p in _shipped()}
    assert set(table) == set(profiles)
    for profile_id, cells in table.items():
        profile = profiles[profile_id]
        assert cells[1] == profile.name
        figure = "-" if profile.fp16_tflops is None else f"{profile.fp16_tflops:g}"
        assert cells[5] == figure, profile_id
    assert f"({len(profiles)} cards;" in text
