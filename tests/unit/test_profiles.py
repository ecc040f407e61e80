"""Hardware profiles (shipped TOML, loose names, the built package ships them) and tuned
profiles (identity, names, matching and invalidation) without a command."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import ProfileError
from moetune.store.hardware import (
    find_hardware_profile,
    load_hardware_profiles,
    match_detected,
    parse_hardware_profile,
)
from moetune.store.paths import tuned_dir
from moetune.store.tuned import (
    BuildIdentity,
    ProfileStore,
    TunedFigures,
    model_identity,
    new_profile,
    profile_name,
)
from moetune.units import GIB, MIB, parse_size

from support.factory import write_model
from support.helpers import ROOT
from support.profiles import GOOD, a_key, saved

SHIPPED = ROOT / "src" / "moetune" / "profiles_data"
REQUIRED = {"rtx4090", "rtx4090-laptop", "rtx3090", "rtx4060ti-16g", "rtx5090"}


# --- hardware profiles -------------------------------------------------------------------------


def test_shipped_profiles() -> None:
    profiles = {p.id: p for p in load_hardware_profiles()}
    assert set(profiles) >= REQUIRED
    p = profiles["rtx4090"]
    assert p.vram_bytes == 24564 * MIB and p.memory_bandwidth_gb_s == 1008
    assert (p.pcie_gen, p.pcie_lanes) == (4, 16)
    assert profiles["rtx4060ti-16g"].pcie_lanes == 8
    assert profiles["rtx5090"].pcie_gen == 5 and profiles["rtx5090"].vram_bytes > 31 * GIB
    assert profiles["rtx4090-laptop"].vram_bytes < 16 * GIB < profiles["rtx3090"].vram_bytes


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.toml")), ids=lambda p: p.stem)
def test_every_figure_has_its_source(path: Path) -> None:
    lines = path.read_text().splitlines()
    for key in ("vram", "memory_bandwidth_gb_s", "pcie_gen"):
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
        assert lines[index - 1].startswith("#"), f"{path.name}: no comment above {key}"
    assert "TechPowerUp" in path.read_text() or "NVIDIA" in path.read_text()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("rtx4090", "rtx4090"),
        ("RTX 4090", "rtx4090"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("4090", "rtx4090"),
        ("rtx-4090-laptop", "rtx4090-laptop"),
        ("4090 Laptop", "rtx4090-laptop"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "rtx4090-laptop"),
        ("4060 Ti", "rtx4060ti-16g"),
        ("rtx5090", "rtx5090"),
        ("3090", "rtx3090"),
    ],
)
def test_find_by_loose_name(query: str, expected: str) -> None:
    assert find_hardware_profile(query, load_hardware_profiles()).id == expected


def test_match_detected_uses_the_memory_size() -> None:
    profiles = load_hardware_profiles()
    name = "NVIDIA GeForce RTX 4060 Ti"
    assert match_detected(name, 16380 * MIB, profiles) is not None
    assert match_detected(name, 8188 * MIB, profiles) is None  # the 8 GB card
    assert match_detected("NVIDIA GeForce RTX 4090", None, profiles) is not None
    assert match_detected("NVIDIA H100", 80 * GIB, profiles) is None


def test_broken_message_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        parse_hardware_profile(GOOD + "vram_gb = 12\n", "mine", "mine.toml")
    assert "\n" not in info.value.message
    assert info.value.message == "mine.toml: unknown field 'vram_gb'"


def test_fp16_tflops_is_optional_and_positive() -> None:
    """No figure: None, and so no FLOP/s; a figure: TFLOPS x 1e12; zero, a negative or a word:
    one line naming the field."""
    bare = parse_hardware_profile(GOOD, "mine", "mine.toml")
    assert bare.fp16_tflops is None and bare.flops_per_s is None
    given = parse_hardware_profile(GOOD + "fp16_tflops = 101.5\n", "mine", "mine.toml")
    assert given.flops_per_s == pytest.approx(101.5e12)
    for value in ("0", "-3", '"fast"'):
        with pytest.raises(ProfileError) as info:
            parse_hardware_profile(GOOD + f"fp16_tflops = {value}\n", "mine", "mine.toml")
        assert "field 'fp16_tflops'" in info.value.message and "\n" not in info.value.message


def test_derived_names_figures_the_profile_gives() -> None:
    """`derived` lists figures computed from published specifications: each a figure field
    the profile gives, once; anything else is one line naming the field."""
    given = GOOD + "fp16_tflops = 51\n"
    marked = parse_hardware_profile(given + 'derived = ["fp16_tflops"]\n', "mine", "mine.toml")
    assert marked.derived == ["fp16_tflops"]
    assert parse_hardware_profile(given, "mine", "mine.toml").derived == []
    for value, why in (
        ('["notes"]', "'notes' is not a figure"),
        ('["fp16"]', "'fp16' is not a figure"),
        ('["fp16_tflops", "fp16_tflops"]', "named twice"),
        ("true", "valid list"),
    ):
        with pytest.raises(ProfileError) as info:
            parse_hardware_profile(given + f"derived = {value}\n", "mine", "mine.toml")
        message = info.value.message
        assert message.startswith("mine.toml: field 'derived'") and why in message, message
        assert "\n" not in message
    with pytest.raises(ProfileError) as info:
        parse_hardware_profile(GOOD + 'derived = ["fp16_tflops"]\n', "mine", "mine.toml")
    assert "'fp16_tflops' is derived but the profile does not give it" in info.value.message


def test_a_plans_figures_take_the_profiles_flops() -> None:
    """`plan --gpu`: the device's figures are its profile's (published); another device, or
    a profile without a FLOP/s figure, takes the typical figures of its class (assumed)."""
    from moetune.core.devices import DeviceSpec
    from moetune.core.figures import typical_gpu
    from moetune.core.ram import RamFigure
    from moetune.jobs.devices import DeviceSet
    from moetune.jobs.plan import machine_figures
    from moetune.store.paths import user_hardware_dir

    profiles = {p.id: p for p in load_hardware_profiles()}
    with_figure = next(p for p in profiles.values() if p.fp16_tflops is not None)
    user_hardware_dir().mkdir(parents=True)
    (user_hardware_dir() / "mine.toml").write_text(GOOD)  # every shipped one has the figure
    without = find_hardware_profile("mine")
    assert without.fp16_tflops is None
    two = (
        DeviceSpec(total_bytes=with_figure.vram_bytes),
        DeviceSpec(name="CUDA1", total_bytes=GIB),
    )
    found = DeviceSet(two, "test", profiles=(with_figure, None))
    ram = RamFigure(bytes_per_s=60 * 10**9, source="given")
    first = machine_figures(found, ram, 8)
    assert first.devices[0].flops_per_s == with_figure.flops_per_s
    assert first.devices[0].memory_bytes_per_s == with_figure.memory_bandwidth_bytes_per_s
    small = typical_gpu(GIB)
    assert first.devices[1].memory_bytes_per_s == small.memory.value  # its class's
    provenance = {s.figure: s.provenance for s in first.sources}
    assert provenance["CUDA0 FLOP/s"] == "published"
    assert provenance["CUDA1 FLOP/s"] == provenance["CUDA1 memory bandwidth"] == "assumed"
    assert provenance["RAM bandwidth"] == "given"
    one = DeviceSet((DeviceSpec(total_bytes=without.vram_bytes),), "test", profiles=(without,))
    lone = machine_figures(one, None, 8)
    flops = next(s for s in lone.sources if s.figure == "CUDA0 FLOP/s")
    assert flops.provenance == "assumed" and "memory bandwidth" in flops.basis
    assert lone.devices[0].flops_per_s == pytest.approx(
        without.memory_bandwidth_bytes_per_s * typical_gpu(without.vram_bytes).flop_per_byte.value
    )


def test_the_bench_forecast_takes_the_flops_of_the_device_s_profile() -> None:
    """A bench's devices as llama.cpp lists them: each gets its profile's figures by name,
    an NVIDIA card or not; a device without a profile gets its class's, marked assumed."""
    from moetune.core.devices import DeviceSpec
    from moetune.jobs.bench_forecast import figures_here

    profiles = {p.id: p for p in load_hardware_profiles()}
    cuda, rocm = profiles["rtx4090"], profiles["radeon-ai-pro-r9700"]
    devices = (
        DeviceSpec(name="CUDA0", description=cuda.name),
        DeviceSpec(name="ROCm0", buft="ROCm0", description=rocm.name),
        DeviceSpec(name="Vulkan0", buft="Vulkan0", description="Some Unknown GPU"),
    )
    machine = figures_here(devices, None)
    found = machine.devices
    assert found[0].flops_per_s == cuda.flops_per_s and found[0].flops_per_s is not None
    assert found[1].memory_bytes_per_s == rocm.memory_bandwidth_bytes_per_s
    if rocm.flops_per_s is not None:
        assert found[1].flops_per_s == rocm.flops_per_s
    assert found[2].memory_bytes_per_s is not None and found[2].flops_per_s is not None
    assumed = {s.figure for s in machine.sources if s.provenance == "assumed"}
    assert {"Vulkan0 memory bandwidth", "Vulkan0 FLOP/s", "RAM bandwidth"} <= assumed
    assert "CUDA0 FLOP/s" not in assumed


def test_readme_example_is_a_valid_profile() -> None:
    text = (ROOT / "profiles" / "README.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    profile = parse_hardware_profile(example, "rtx3060", "README example")
    assert profile.vram_bytes == 12 * GIB and profile.pcie_bytes_per_s > 31 * 10**9


def test_built_package_ships_the_profiles(tmp_path: Path) -> None:
    """A non-editable install finds the profiles: setuptools copies them as package data, and
    moetune loads them from the built tree (not from this checkout)."""
    work = tmp_path / "copy"
    shutil.copytree(
        ROOT / "src", work / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, work / name)
    built = tmp_path / "built"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import setuptools; setuptools.setup()",
            "-q",
            "build_py",
            "--build-lib",
            str(built),
        ],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the metadata is current: setuptools warns of nothing (a TOML table license is deprecated)
    assert "deprecated" not in done.stderr.lower(), done.stderr
    assert {p.stem for p in (built / "moetune" / "profiles_data").glob("*.toml")} >= REQUIRED
    shutil.rmtree(work)
    check = (
        "import json, moetune, moetune.store.hardware as p; print(moetune.__file__); "
        "print(json.dumps([x.id for x in p.load_hardware_profiles()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        env={"PYTHONPATH": str(built)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    where, ids = done.stdout.splitlines()
    assert where.startswith(str(built))
    assert set(json.loads(ids)) >= REQUIRED


# --- tuned profiles ----------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-Q8.gguf", "qwen3moe")


def test_identity(tiny: Path, tmp_path: Path) -> None:
    first = model_identity(tiny)
    assert first == model_identity(tiny)
    assert first.file_name == "Tiny-Q8.gguf" and first.file_bytes == tiny.stat().st_size
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    copy = shutil.copy(tiny, moved / tiny.name)
    assert model_identity(copy).model_dump(exclude={"path"}) == first.model_dump(exclude={"path"})
    data = bytearray(tiny.read_bytes())
    data[-1] ^= 0xFF  # tensor data only: same header, same size
    tiny.write_bytes(bytes(data))
    assert model_identity(tiny).header_sha256 == first.header_sha256
    write_model(tiny, "qwen3moe", n_layers=6)
    assert model_identity(tiny).header_sha256 != first.header_sha256


def test_profile_name(tiny: Path) -> None:
    """Model stem, context, cache types, target and a tag of the device: one file for each
    thing a tuned result depends on."""
    key = a_key(tiny)
    name = profile_name(key)
    assert re.fullmatch(r"Tiny-Q8-4k-q8_0-22G-[0-9a-f]{6}", name), name
    settings = key.settings.model_copy(
        update={"target_bytes": 20 * GIB, "type_v": "f16", "n_ctx": 5000}
    )
    assert profile_name(key.model_copy(update={"settings": settings})).startswith(
        "Tiny-Q8-5000-q8_0-f16-20G-"
    )
    other_gpu = key.gpu.model_copy(update={"name": "NVIDIA GeForce RTX 3090"})
    assert profile_name(key.model_copy(update={"gpu": other_gpu})) != name
    shards = key.model.model_copy(update={"file_name": "M-00001-of-00003.gguf"})
    assert profile_name(key.model_copy(update={"model": shards})).startswith("M-4k-")
    weird = key.model.model_copy(update={"file_name": "we ird$.gguf"})
    assert profile_name(key.model_copy(update={"model": weird})).startswith("we_ird-4k-")


def test_two_targets_keep_two_profiles(tiny: Path) -> None:
    key = a_key(tiny)
    lower = key.model_copy(
        update={"settings": key.settings.model_copy(update={"target_bytes": 20 * GIB})}
    )
    saved(key, n=5)
    saved(lower, n=7)
    store = ProfileStore()
    assert len(store.names()) == 2
    first, second = store.match(key).profile, store.match(lower).profile
    assert first is not None and first.placement.n_cpu_moe == 5
    assert second is not None and second.placement.n_cpu_moe == 7


@pytest.mark.parametrize(
    ("typed", "shown"),
    [("22G", "22G"), ("22.5G", "22.5G"), ("22.50GiB", "22.5G"), ("23000M", "23000M")],
)
def test_the_name_gives_the_target_as_typed(tiny: Path, typed: str, shown: str) -> None:
    """``run --target-vram 22.5G`` names its profile ``...-22.5G-...`` (it said ``23040M``),
    ``23000M`` stays in MiB, and the name parses back to the same target."""
    key = a_key(tiny)
    target = parse_size(typed)
    settings = key.settings.model_copy(update={"target_bytes": target})
    name = profile_name(key.model_copy(update={"settings": settings}))
    assert re.fullmatch(rf"Tiny-Q8-4k-q8_0-{re.escape(shown)}-[0-9a-f]{{6}}", name), name
    assert parse_size(shown) == target
    both = settings.model_copy(update={"device_targets": [target, 12 * GIB]})
    assert f"-{shown}_12G-" in profile_name(key.model_copy(update={"settings": both}))


def test_a_profile_saved_under_its_old_name_is_still_found(tiny: Path) -> None:
    """A profile saved before the names gave targets as typed (``23040M`` for 22.5G) is
    matched by run under that name, and a new save keeps it (no second file)."""
    key = a_key(tiny)
    key = key.model_copy(
        update={"settings": key.settings.model_copy(update={"target_bytes": 23040 * MIB})}
    )
    old = profile_name(key, legacy=True)
    assert "-23040M-" in old and "-22.5G-" in profile_name(key)
    measured = TunedFigures(vram_bytes=21 * GIB, decode_tps=50.0)
    store = ProfileStore()
    store.save(new_profile(key, 6, measured, ["/usr/bin/llama-server"], name=old))
    match = store.match(key)
    assert match.name == old and match.profile is not None
    assert match.profile.placement.n_cpu_moe == 6
    store.save(
        new_profile(key, 7, measured, ["/usr/bin/llama-server"], match.profile, name=match.name)
    )
    assert store.names() == [old]
    fresh = key.model_copy(update={"settings": key.settings.model_copy(update={"n_ctx": 8192})})
    assert store.match(fresh).name == profile_name(fresh)  # nothing saved: the new name


def test_home_is_xdg_or_moetune_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MOETUNE_HOME", str(tmp_path / "mh"))
    assert tuned_dir() == tmp_path / "mh" / "profiles"
    monkeypatch.delenv("MOETUNE_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert tuned_dir() == tmp_path / "xdg" / "moetune" / "profiles"


def test_match_and_invalidation(tiny: Path) -> None:
    key = a_key(tiny)
    store = ProfileStore()
    assert store.match(key).profile is None and not store.match(key).notes
    saved(key)
    match = store.match(key)
    assert match.profile is not None and match.profile.placement.n_cpu_moe == 5
    other_gpu = key.gpu.model_copy(update={"name": "NVIDIA GeForce RTX 3090"})
    other_build = key.llama_cpp.model_copy(update={"build_number": 11500, "commit": "fff"})
    other_args = key.settings.model_copy(update={"extra_args": ["-ub", "2048"]})
    cases: dict[str, dict[str, Any]] = {
        "llama.cpp changed": {"llama_cpp": other_build},
        "other arguments after --": {"settings": other_args},
    }
    for words, change in cases.items():
        miss = store.match(key.model_copy(update=change))
        assert miss.profile is None and words in miss.notes[0], miss.notes
    # another device set is another profile: not out of date, just not tuned yet
    miss = store.match(key.model_copy(update={"gpu": other_gpu}))
    assert miss.profile is None and not miss.notes and miss.name != profile_name(key)
    write_model(tiny, "qwen3moe", n_layers=6)
    miss = store.match(a_key(tiny))
    assert miss.profile is None and "model file changed" in miss.notes[0]


def test_unrecorded_builds_compare_the_binary(tiny: Path) -> None:
    build = BuildIdentity(
        build_number=None,
        commit=None,
        version="0.6.0-dev",
        binary="/x/llama-server",
        binary_fingerprint="10:20",
    )
    key = a_key(tiny, llama_cpp=build)
    saved(key)
    assert ProfileStore().match(key).profile is not None
    rebuilt = build.model_copy(update={"binary_fingerprint": "10:30"})
    assert ProfileStore().match(a_key(tiny, llama_cpp=rebuilt)).profile is None
