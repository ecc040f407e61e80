"""The shipped hardware profiles as a set: how many, every figure the forecast needs given and
sourced (a derived one with its product of published specifications), names and aliases
unambiguous, the cards moetune issue 14 asks for present, memory sizes plausible and the cards
that are not NVIDIA's found by llama.cpp's name for them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from moetune.errors import ProfileError
from moetune.store.hardware import (
    FIGURE_FIELDS,
    HardwareProfile,
    find_hardware_profile,
    load_hardware_profiles,
    match_detected,
    parse_hardware_profile,
)
from moetune.units import GIB

from support.helpers import ROOT

SHIPPED = ROOT / "src" / "moetune" / "profiles_data"
FILES = sorted(SHIPPED.glob("*.toml"))
FIGURES = ("name", "vram", "memory_bandwidth_gb_s", "pcie_gen", "pcie_lanes")
SOURCE = re.compile(r"TechPowerUp|NVIDIA|nvidia-smi|datasheet|whitepaper|https://", re.IGNORECASE)
# the words a figure's comment says it is derived with (profiles/README.md), and the product
# of a derived FP16 figure: units x boost clock x FLOPs per clock and unit = the figure
DERIVED = "derived from published specifications"
TIMES = "\N{MULTIPLICATION SIGN}"
FP16_PRODUCT = re.compile(
    rf"(\d+) (?:SMs|CUs|Xe-cores|Xe2-cores) {TIMES} ([\d.]+) GHz {TIMES} (\d+) "
    r"FLOPs/clock/[\w-]+ = ([\d.]+) TFLOPS"
)
PRODUCT = re.compile(rf"\d(?:\.\d+)?(?: ?[A-Za-z/-]+)? [{TIMES}x] \d")  # "28 SMs x 1.7", "4 x 8"

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
    """The comment block right above ``key =``; pcie_lanes shares pcie_gen's; "" where the
    file has no such line."""
    index = next((i for i, line in enumerate(lines) if line.startswith(f"{key} =")), None)
    if index is None:
        return ""
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


def figure_problems(text: str, source: str) -> list[str]:
    """What a profile's text lacks of the figures the forecast needs (FIGURE_FIELDS): each
    given, each with a comment above it naming its source; one derived from published
    specifications listed in ``derived`` and shown as a product (the FP16 figure as units x
    boost clock x FLOPs per clock and unit, whose arithmetic gives the figure), and one
    listed in ``derived`` saying so."""
    try:
        profile = parse_hardware_profile(text, Path(source).stem, source)
    except ProfileError as exc:
        return [exc.message]
    lines = text.splitlines()
    problems: list[str] = []
    for key in FIGURE_FIELDS:
        value = getattr(profile, key)
        comment = _comment_above(lines, key)
        if value is None:
            problems.append(f"{source}: no {key}")
            continue
        if not SOURCE.search(comment):
            problems.append(f"{source}: the comment above {key} names no source")
        says_derived = DERIVED in " ".join(comment.replace("#", " ").split())
        if says_derived != (key in profile.derived):
            problems.append(f"{source}: {key}: the comment and `derived` disagree")
        if key not in profile.derived:
            continue
        if not PRODUCT.search(comment):
            problems.append(f"{source}: {key} is derived but its comment shows no product")
        if key == "fp16_tflops":
            problems += _fp16_product_problems(comment, float(value), source)
    return problems


def _fp16_product_problems(comment: str, value: float, source: str) -> list[str]:
    found = FP16_PRODUCT.search(comment)
    if found is None:
        return [f"{source}: the derived FP16 figure has no 'units x GHz x FLOPs = TFLOPS' line"]
    units, ghz, rate, total = (float(group) for group in found.groups())
    problems = []
    if abs(units * ghz * rate / 1000 - total) > 0.05 + 1e-9:
        problems.append(f"{source}: {found.group(0)!r} does not add up")
    if total != value:
        problems.append(f"{source}: the product gives {total:g}, the profile {value:g}")
    return problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_figure_the_forecast_needs_is_given_with_its_source(path: Path) -> None:
    """Every shipped profile has every figure the forecast needs (the FP16 one included),
    each with its source; a derived one with its derivation (profiles/README.md)."""
    assert figure_problems(path.read_text("utf-8"), path.name) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_fp16_figure_is_the_dense_one(path: Path) -> None:
    """One definition for every card (profiles/README.md): the comment says dense and
    quotes the figure."""
    lines = path.read_text("utf-8").splitlines()
    comment = _comment_above(lines, "fp16_tflops")
    profile = next(p for p in _shipped() if p.id == path.stem)
    assert profile.fp16_tflops is not None, f"{path.name}: no FP16 figure"
    assert "dense" in comment, f"{path.name}: say the FP16 figure is the dense one"
    assert f"{profile.fp16_tflops:g}" in comment  # the figure is the one the source gives


def _without(text: str, start: str, count: int = 1) -> str:
    """``text`` without ``count`` lines from the first that starts with ``start``."""
    lines = text.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.startswith(start))
    return "".join(lines[:index] + lines[index + count :])


def test_the_figure_check_fails_on_a_profile_without_a_figure_or_its_source() -> None:
    """figure_problems is not vacuous: a shipped profile less a figure, a source comment, the
    `derived` mark or a consistent product is caught."""
    path = SHIPPED / "rtx3060-12g.toml"
    text = path.read_text("utf-8")
    assert figure_problems(text, path.name) == []
    fp16 = text.splitlines().index("fp16_tflops = 51")
    block = fp16 - len(_comment_above(text.splitlines(), "fp16_tflops").splitlines())
    first_comment = text.splitlines()[block]
    broken = {
        "no FP16 figure": _without(text, "fp16_tflops =", 2),
        "no comment above the FP16 figure": _without(text, first_comment, fp16 - block),
        "no source above the bandwidth": _without(text, "# 360 GB/s", 2),
        "not listed as derived": _without(text, "derived ="),
        "a figure the product does not give": text.replace("fp16_tflops = 51", "fp16_tflops = 60"),
        "a product that does not add up": text.replace(f"{TIMES} 1024 FL", f"{TIMES} 2048 FL"),
    }
    for what, changed in broken.items():
        assert changed != text, what
        assert figure_problems(changed, path.name), what
    bare = "name = 'Mine'\nvram = '8G'\nmemory_bandwidth_gb_s = 1\npcie_gen = 4\npcie_lanes = 16\n"
    assert figure_problems(bare, "mine.toml")  # no comments, no FP16 figure


def test_every_fp16_figure_of_a_shipped_profile() -> None:
    assert all(p.fp16_tflops is not None for p in _shipped())
    derived = {p.id for p in _shipped() if p.derived}
    assert "rtx3060-12g" in derived and "rtx4090" not in derived


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
        assert profile.fp16_tflops is not None
        figure = f"{profile.fp16_tflops:g}"
        if "fp16_tflops" in profile.derived:
            figure += " (derived)"
        assert cells[5] == figure, profile_id
    assert f"({len(profiles)} cards;" in text
