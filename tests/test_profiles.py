"""Hardware profiles (shipped TOML, plan --gpu, broken files) and tuned profiles (identity,
matching, invalidation, the `profiles` commands, and `moetune run` saving and reusing one)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import BadValueError, ExitCode, ProfileError
from moetune.store.hardware import (
    find_hardware_profile,
    load_hardware_profiles,
    match_detected,
    parse_hardware_profile,
)
from moetune.store.paths import tuned_dir
from moetune.store.tuned import (
    BuildIdentity,
    DeviceIdentity,
    Measured,
    ProfileStore,
    TuneKey,
    TuneSettings,
    model_identity,
    new_profile,
    profile_name,
)
from moetune.units import GIB, MIB

from factory import write_model
from helpers import EXAMPLE_QWEN, cli, moetune

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "src" / "moetune" / "profiles_data"
QWEN = str(EXAMPLE_QWEN)
REQUIRED = {"rtx4090", "rtx4090-laptop", "rtx3090", "rtx4060ti-16g", "rtx5090"}
GOOD = """name = "Test GPU"
vram = "12G"
memory_bandwidth_gb_s = 360
pcie_gen = 4
pcie_lanes = 16
"""


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


def test_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(BadValueError) as info:
        find_hardware_profile("rtx9999", load_hardware_profiles())
    assert "rtx4090" in (info.value.hint or "")
    code, _, err = cli("plan", QWEN, "--gpu", "4080", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE and "rtx4090" in err, err


def test_match_detected_uses_the_memory_size() -> None:
    profiles = load_hardware_profiles()
    name = "NVIDIA GeForce RTX 4060 Ti"
    assert match_detected(name, 16380 * MIB, profiles) is not None
    assert match_detected(name, 8188 * MIB, profiles) is None  # the 8 GB card
    assert match_detected("NVIDIA GeForce RTX 4090", None, profiles) is not None
    assert match_detected("NVIDIA H100", 80 * GIB, profiles) is None


BROKEN = [
    (GOOD.replace("pcie_gen = 4\n", ""), "missing field 'pcie_gen'"),
    (GOOD + "vram_gb = 12\n", "unknown field 'vram_gb'"),
    (GOOD.replace("360", '"fast"'), "field 'memory_bandwidth_gb_s'"),
    (GOOD.replace('"12G"', '"twelve"'), "field 'vram'"),
    (GOOD.replace("pcie_lanes = 16", "pcie_lanes = 12"), "field 'pcie_lanes'"),
    (GOOD.replace("pcie_gen = 4", "pcie_gen = 9"), "field 'pcie_gen'"),
    (GOOD.replace("pcie_gen = 4", "pcie_gen 4"), "not valid TOML"),
]


@pytest.mark.parametrize(("text", "words"), BROKEN)
def test_broken_hardware_profile_one_clear_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    code, out, err = cli("plan", QWEN, "--gpu", str(path), "--ram", "64G")
    assert code == ExitCode.BAD_VALUE, out + err
    assert words in err and "mine.toml" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_broken_message_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        parse_hardware_profile(GOOD + "vram_gb = 12\n", "mine", "mine.toml")
    assert "\n" not in info.value.message
    assert info.value.message == "mine.toml: unknown field 'vram_gb'"


def test_user_profiles_add_and_override(_moetune_home: Path) -> None:
    user = _moetune_home / "hardware"
    user.mkdir()
    (user / "a770.toml").write_text(GOOD.replace("Test GPU", "Intel Arc A770"))
    (user / "rtx4090.toml").write_text(GOOD.replace("Test GPU", "NVIDIA GeForce RTX 4090"))
    profiles = {p.id: p for p in load_hardware_profiles()}
    assert profiles["a770"].memory_bandwidth_gb_s == 360
    assert profiles["rtx4090"].vram_bytes == 12 * GIB  # the user's wins
    code, out, _ = cli("profiles", "list")
    assert code == 0 and "a770" in out


def test_broken_user_profile_in_list(_moetune_home: Path) -> None:
    user = _moetune_home / "hardware"
    user.mkdir()
    (user / "bad.toml").write_text(GOOD.replace("pcie_lanes = 16\n", ""))
    code, _, err = cli("profiles", "list")
    assert code == ExitCode.BAD_VALUE
    assert "bad.toml: missing field 'pcie_lanes'" in err


def test_readme_example_is_a_valid_profile() -> None:
    text = (ROOT / "profiles" / "README.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    profile = parse_hardware_profile(example, "rtx3060", "README example")
    assert profile.vram_bytes == 12 * GIB and profile.pcie_bytes_per_s > 31 * 10**9


def test_plan_with_gpu_profile() -> None:
    code, out, _ = cli("plan", QWEN, "--gpu", "rtx4060ti-16g", "--ram", "64G", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["budget_bytes"] == 16380 * MIB - 1536 * MIB
    assert data["n_cpu_moe"] > 0
    code, out, _ = cli("plan", QWEN, "--gpu", "RTX 4090", "--ram", "64G")
    assert code == 0 and "hardware profile rtx4090" in out
    code, _, err = cli("plan", QWEN, "--gpu", "rtx9999", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE and "no hardware profile 'rtx9999'" in err


@pytest.mark.parametrize("command", ["plan", "doctor"])
def test_gpu_and_vram_together_are_refused(command: str) -> None:
    code, out, err = cli(command, QWEN, "--gpu", "rtx4090", "--vram", "16G", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE and "--vram and --gpu" in err, out + err


def test_built_package_ships_the_profiles(tmp_path: Path) -> None:
    """A non-editable install finds the profiles: setuptools copies them as package data, and
    moetune loads them from the built tree (not from this checkout)."""
    work = tmp_path / "copy"
    shutil.copytree(
        ROOT / "src", work / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, work / name)
    built = tmp_path / "built"
    subprocess.run(
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
        timeout=120,
    )
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


def a_key(model: Path, **changes: Any) -> TuneKey:
    key = TuneKey(
        model=model_identity(model),
        gpu=DeviceIdentity(
            name="NVIDIA GeForce RTX 4090", device="CUDA0", vram_total_bytes=24564 * MIB
        ),
        llama_cpp=BuildIdentity(
            build_number=11434,
            commit="0123abc",
            version="b11434",
            binary="/usr/bin/llama-server",
            binary_fingerprint="1:2",
        ),
        settings=TuneSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0", target_bytes=22 * GIB),
    )
    return key.model_copy(update=changes)


def saved(key: TuneKey, n: int = 5) -> Path:
    measured = Measured(vram_bytes=21 * GIB, ttft_s=0.2, decode_tps=50.0, prompt_tps=800.0)
    profile = new_profile(key, n, measured, ["/usr/bin/llama-server", "-m", "x"])
    return ProfileStore().save(profile)


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


def test_broken_tuned_profile(tiny: Path) -> None:
    key = a_key(tiny)
    path = saved(key)
    data = json.loads(path.read_text())
    data["measured"]["decode_tps"] = "fast"
    path.write_text(json.dumps(data))
    code, _, err = cli("profiles", "show", path.stem)
    assert code == ExitCode.BAD_VALUE
    assert "field 'measured.decode_tps'" in err and path.name in err
    assert len(err.strip().splitlines()) == 1, err
    match = ProfileStore().match(key)
    assert match.profile is None and "ignoring a broken profile" in match.notes[0]
    code, out, _ = cli("profiles", "list")
    assert code == 0 and "broken" in out
    path.write_text("{not json")
    code, _, err = cli("profiles", "show", path.stem)
    assert code == ExitCode.BAD_VALUE and "not valid JSON" in err


def test_profiles_commands(tiny: Path) -> None:
    path = saved(a_key(tiny))
    name = path.stem
    code, out, _ = cli("profiles", "list")
    assert code == 0 and "rtx4090" in out and name[:10] in out
    code, out, _ = cli("profiles", "list", "--json")
    data = json.loads(out)
    assert data["tuned"][0]["name"] == name and len(data["hardware"]) >= 5
    code, out, _ = cli("profiles", "show", name)
    assert code == 0 and "--n-cpu-moe 5" in out and "build 11434" in out
    code, out, _ = cli("profiles", "show", name, "--json")
    assert json.loads(out)["placement"]["n_cpu_moe"] == 5
    code, out, _ = cli("profiles", "show", "rtx3090")
    assert code == 0 and "936.2 GB/s" in out
    code, _, err = cli("profiles", "rm", "rtx3090")
    assert code == ExitCode.BAD_VALUE and "hardware profile" in err
    code, _, err = cli("profiles", "rm", name)
    assert code == 0 and not path.exists()
    code, _, err = cli("profiles", "rm", name)
    assert code == ExitCode.FILE_NOT_FOUND and "no tuned profile" in err
    code, _, err = cli("profiles", "show", "nothing-here")
    assert code == ExitCode.FILE_NOT_FOUND


# --- moetune run saves, then reuses (real llama-server, RPC device) -----------------------------


@pytest.mark.server
def test_run_saves_then_reuses(tmp_path: Path, rpc: str, _moetune_home: Path) -> None:
    model = write_model(tmp_path / "Tiny-MoE.gguf", "qwen3moe", n_layers=8)
    args = [
        "run",
        str(model),
        "--target-vram",
        "40M",
        "--ctx",
        "1024",
        "--overhead",
        "0",
        "--json",
        "--",
        "--rpc",
        rpc,
    ]
    first = moetune(*args)
    assert first.returncode == 0, first.stderr
    tuned = json.loads(first.stdout)
    assert tuned["profile"]["reused"] is False
    path = Path(tuned["profile"]["path"])
    assert path.parent == _moetune_home / "profiles"
    assert path.stem.startswith("Tiny-MoE-1k-q8_0-40M-"), path.stem
    profile = json.loads(path.read_text())
    best = tuned["best"]
    assert profile["placement"]["n_cpu_moe"] == best["n_cpu_moe"]
    assert profile["measured"]["vram_bytes"] == best["measured_bytes"]
    assert profile["gpu"]["device"] == "RPC0" and profile["gpu"]["name"] == rpc
    assert profile["settings"]["extra_args"] == ["--rpc", rpc]
    assert profile["command"][1:] == best["command"][1:]
    assert Path(profile["command"][0]).name == "llama-server"

    second = moetune(*args)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["launches"] == 1 and again["profile"]["reused"] is True
    assert again["best"]["n_cpu_moe"] == best["n_cpu_moe"]
    assert "matches" in second.stderr and "one launch to confirm" in second.stderr
    assert json.loads(path.read_text())["confirmed_at"] is not None

    # another target is another profile: the first is kept, and still matches
    lower = moetune(*[("30M" if a == "40M" else a) for a in args])
    assert lower.returncode == 0, lower.stderr
    other = Path(json.loads(lower.stdout)["profile"]["path"])
    assert other != path and other.stem.startswith("Tiny-MoE-1k-q8_0-30M-")
    assert sorted(p.name for p in path.parent.glob("*.json")) == sorted([path.name, other.name])
    third = moetune(*args)
    assert json.loads(third.stdout)["profile"]["reused"] is True, third.stderr

    code, out, _ = cli("alias", "tiny", str(model), "--shell", "bash")
    assert code == 0
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)
    assert "--retune -- --rpc" in out  # the whole re-tune command, the part after -- included


def test_show_and_rm_take_a_unique_prefix(tiny: Path) -> None:
    key = a_key(tiny)
    first = saved(key).stem
    second = saved(
        key.model_copy(
            update={"settings": key.settings.model_copy(update={"target_bytes": 20 * GIB})}
        )
    ).stem
    code, out, _ = cli("profiles", "show", "Tiny-Q8-4k-q8_0-22", "--json")
    assert code == 0 and json.loads(out)["name"] == first
    code, _, err = cli("profiles", "show", "Tiny-Q8")
    assert code == ExitCode.BAD_VALUE and first in err and second in err  # which ones
    code, _, _ = cli("profiles", "rm", "Tiny-Q8-4k-q8_0-20")
    assert code == 0 and ProfileStore().names() == [first]
    code, _, err = cli("profiles", "rm", "Nothing")
    assert code == ExitCode.FILE_NOT_FOUND and "no tuned profile" in err
