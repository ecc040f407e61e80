"""The hardware and tuned profiles through the commands: `plan --gpu`, broken files in one
line, user profiles, and `moetune profiles list/show/rm`."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from moetune.errors import BadValueError, ExitCode
from moetune.store.hardware import find_hardware_profile, load_hardware_profiles
from moetune.store.tuned import ProfileStore
from moetune.units import GIB, MIB

from support.factory import write_model
from support.helpers import EXAMPLE_QWEN, as_ordinary_user, assert_one_line_error, cli, moetune
from support.profiles import GOOD, a_key, saved

QWEN = str(EXAMPLE_QWEN)


def test_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(BadValueError) as info:
        find_hardware_profile("rtx9999", load_hardware_profiles())
    assert "rtx4090" in (info.value.hint or "")
    code, _, err = cli("plan", QWEN, "--gpu", "9999", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE and "rtx4090" in err, err


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
    code, out, err = cli("profiles", "list", "--json")
    assert code == 0, err
    assert "bad.toml: missing field 'pcie_lanes'" in json.loads(out)["hardware_broken"][0]


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


def test_a_shortened_gpu_name_names_every_card_it_fits() -> None:
    code, _, err = cli("plan", QWEN, "--gpu", "4080", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE, err
    assert "'4080' is ambiguous: rtx4080 (NVIDIA GeForce RTX 4080)" in err
    assert "rtx4080-laptop" in err and "rtx4080super" in err and len(err.splitlines()) == 1
    code, out, err = cli("plan", QWEN, "--gpu", "4060 ti 16", "--ram", "64G")  # one card fits
    assert code == 0 and "hardware profile rtx4060ti-16g" in out, err


@pytest.mark.parametrize("command", ["plan", "doctor"])
def test_gpu_and_vram_together_are_refused(command: str) -> None:
    code, out, err = cli(command, QWEN, "--gpu", "rtx4090", "--vram", "16G", "--ram", "64G")
    assert code == ExitCode.BAD_VALUE and "--vram and --gpu" in err, out + err


# --- tuned profiles ----------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-Q8.gguf", "qwen3moe")


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


# --- a profiles folder or file moetune may not read --------------------------------------------


def _one_denied_line(result: tuple[int, str, str], path: Path) -> None:
    code, out, err = result
    assert code == ExitCode.PERMISSION_DENIED, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moetune: error: "), err
    assert f"{path}: permission denied" in lines[0] and "PERMISSION_DENIED, exit 15" in lines[0]


def test_a_profiles_folder_that_may_not_be_listed_is_permission_denied(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the folder refused (at the store's boundary, os.scandir): `profiles list`
    never says "no tuned profiles yet", `show`/`rm` never FILE_NOT_FOUND."""
    name = saved(a_key(tiny)).stem
    root = ProfileStore().root
    scandir = os.scandir

    def refused(path: Any = ".") -> Any:
        if Path(path) == root:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refused)
    for args in (("list",), ("show", name), ("rm", name), ("show", name[:8])):
        _one_denied_line(cli("profiles", *args), root)
    code, out, _ = cli("profiles", "list", "--json")
    error = json.loads(out)["error"]
    assert code == ExitCode.PERMISSION_DENIED and error["name"] == "PERMISSION_DENIED"
    assert error["message"] == f"{root}: permission denied" and "MOETUNE_HOME" in error["hint"]


def test_a_tuned_profile_that_may_not_be_read_is_permission_denied(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the file refused (store/files.read_text, as the store reads it)."""
    path = saved(a_key(tiny))

    def refused(file: Path) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", str(file))

    monkeypatch.setattr("moetune.store.tuned.read_text", refused)
    for args in (("list",), ("show", path.stem), ("list", "--json")):
        _one_denied_line(cli("profiles", *args), path)


def test_a_profiles_folder_of_mode_0_refuses_an_ordinary_user(tiny: Path) -> None:
    """The real thing: the folder's mode refuses the user (root: without CAP_DAC_*)."""
    prefix = as_ordinary_user()
    path = saved(a_key(tiny))
    root = path.parent
    path.chmod(0)
    try:
        result = moetune("profiles", "show", path.stem, prefix=prefix)
        line = assert_one_line_error(result, ExitCode.PERMISSION_DENIED)
        assert f"{path}: permission denied" in line
        root.chmod(0)
        for args in (("list",), ("show", path.stem), ("rm", path.stem)):
            line = assert_one_line_error(
                moetune("profiles", *args, prefix=prefix), ExitCode.PERMISSION_DENIED
            )
            assert f"{root}: permission denied" in line, args
    finally:
        root.chmod(0o755)
        path.chmod(0o644)
    assert path.exists()
