"""Broken files under $MOETUNE_HOME never stop a command: every command that reads tuned
profiles goes on and names the broken file in one warning line, `profiles list` marks it
(text and --json); the same for the user's hardware profiles."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from moetune.errors import ExitCode
from moetune.store.tuned import ProfileStore

from support.factory import write_model
from support.helpers import EXAMPLE_QWEN, cli
from support.profiles import GOOD, a_key, saved

DEEP = "[" * 100_000 + "]" * 100_000


def _json_of(good: Path, **changes: object) -> str:
    data = json.loads(good.read_text())
    data.update(changes)
    return json.dumps(data)


def _empty_command(path: Path, good: Path) -> None:
    path.write_text(_json_of(good, command=[]))


def _nested(path: Path, good: Path) -> None:
    path.write_text(_json_of(good).replace('"command": [', f'"command": [{DEEP}, ', 1))


def _directory(path: Path, good: Path) -> None:
    path.mkdir()


def _symlink_loop(path: Path, good: Path) -> None:
    path.symlink_to(path.name)


def _not_utf8(path: Path, good: Path) -> None:
    path.write_bytes(b'{"name": "\xff\xfe"}')


def _truncated(path: Path, good: Path) -> None:
    path.write_text(good.read_text()[:100])


BROKEN: dict[str, Callable[[Path, Path], None]] = {
    "empty-command": _empty_command,
    "nested": _nested,
    "directory": _directory,
    "symlink-loop": _symlink_loop,
    "not-utf8": _not_utf8,
    "truncated": _truncated,
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-Q8.gguf", "qwen3moe")


def _one_warning(err: str, name: str) -> None:
    lines = [line for line in err.splitlines() if name in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("warning: skipping a broken tuned profile: "), err
    assert "Traceback" not in err


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_tuned_profile_never_stops_a_command(tiny: Path, kind: str) -> None:
    good = saved(a_key(tiny))
    broken = good.with_name("zz-broken.json")
    BROKEN[kind](broken, good)

    code, out, err = cli("profiles", "list")
    assert code == 0, err
    assert "zz-broken.json" in out and "broken" in out
    code, out, err = cli("profiles", "list", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [good.stem] == [p["name"] for p in data["tuned"]]
    assert len(data["broken"]) == 1 and "zz-broken.json" in data["broken"][0]

    for command in (
        ("export", "preset"),
        ("export", "llama-swap", str(tiny)),
        ("alias", "tiny", str(tiny), "--shell", "bash"),
    ):
        code, out, err = cli(*command)
        assert code == 0, (command, err)
        assert "-m x" in out or "model = x" in out, out  # the good profile's command
        _one_warning(err, "zz-broken.json")

    code, out, err = cli("profiles", "show", good.stem)
    assert code == 0 and good.stem in out, err
    match = ProfileStore().match(a_key(tiny))
    assert match.profile is not None


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_profile_of_the_run_is_named(tiny: Path, kind: str) -> None:
    """run tunes again over a broken profile of its own name, and says so."""
    key = a_key(tiny)
    path = saved(key)
    path.unlink()
    BROKEN[kind](path, saved(a_key(tiny, settings=key.settings.model_copy(update={"n_ctx": 8}))))
    match = ProfileStore().match(key)
    assert match.profile is None
    assert match.notes[0].startswith("ignoring a broken profile: ") and path.name in match.notes[0]


def test_the_plan_fallback_says_why(tiny: Path) -> None:
    """Only a broken profile of the model: alias and export fall back to the plan and say
    that the broken file was skipped."""
    good = saved(a_key(tiny))
    _empty_command(good.with_name("zz-broken.json"), good)
    good.unlink()
    for command in (("export", "preset", str(tiny)), ("alias", "tiny", str(tiny))):
        code, out, err = cli(*command, "--vram", "4G")
        assert code == 0 and "PREDICTED" in out, err
        _one_warning(err, "zz-broken.json")
        assert "1 broken tuned profile(s) skipped" in err and "plan" in err, err
    code, _, err = cli("alias", "tiny", str(tiny), "--require-tuned")
    assert code == ExitCode.FILE_NOT_FOUND
    assert "1 broken tuned profile(s) skipped" in err.splitlines()[-1], err


def test_rm_of_a_broken_profile(tiny: Path) -> None:
    good = saved(a_key(tiny))
    loop = good.with_name("loop.json")
    _symlink_loop(loop, good)
    code, _, err = cli("profiles", "rm", "loop")
    assert code == 0 and not loop.is_symlink(), err
    folder = good.with_name("folder.json")
    folder.mkdir()
    code, _, err = cli("profiles", "rm", "folder")
    assert code == ExitCode.BAD_VALUE and "cannot remove" in err, err
    assert len(err.strip().splitlines()) == 1 and folder.is_dir()


HARDWARE_BROKEN: dict[str, Callable[[Path], object]] = {
    "missing-field": lambda p: p.write_text(GOOD.replace("pcie_lanes = 16\n", "")),
    "nested": lambda p: p.write_text(GOOD + f"notes = {DEEP}\n"),
    "not-utf8": lambda p: p.write_bytes(b"name = '\xff'\n"),
    "directory": lambda p: p.mkdir(),
    "symlink-loop": lambda p: p.symlink_to(p.name),
}


@pytest.mark.parametrize("kind", HARDWARE_BROKEN)
def test_profiles_list_marks_a_broken_hardware_profile(_moetune_home: Path, kind: str) -> None:
    user = _moetune_home / "hardware"
    user.mkdir()
    (user / "mine.toml").write_text(GOOD)
    HARDWARE_BROKEN[kind](user / "bad.toml")
    code, out, err = cli("profiles", "list")
    assert code == 0, err
    assert "broken" in out and "bad.toml" in out
    code, out, err = cli("profiles", "list", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "mine" in {p["id"] for p in data["hardware"]}
    assert len(data["hardware_broken"]) == 1 and "bad.toml" in data["hardware_broken"][0]
    # another broken file does not stop a plan on a profile that loads
    code, _, err = cli("plan", str(EXAMPLE_QWEN), "--gpu", "mine", "--ram", "64G", "--no-verify")
    assert code == 0, err
    # the broken file itself, asked for by its name: one line naming it
    code, _, err = cli("plan", str(EXAMPLE_QWEN), "--gpu", "bad", "--ram", "64G", "--no-verify")
    assert code == ExitCode.BAD_VALUE and "bad.toml" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_run_whose_profile_cannot_be_saved_keeps_its_result(tiny: Path) -> None:
    """A folder where run's profile goes: the tuned result is reported with a note, not lost
    with the profile (before: one "cannot write" error, and the launches' result gone)."""
    from moetune.core.search import Attempt
    from moetune.core.settings import Settings
    from moetune.jobs.run import save_winner
    from moetune.records.results import RunResult

    key = a_key(tiny)
    path = saved(key)
    path.unlink()
    path.mkdir()
    best = Attempt(n_cpu_moe=3, predicted_bytes=1, measured_bytes=1, status="ok")
    result = RunResult(
        model=str(tiny),
        device="RPC0",
        probe="llama.cpp's memory log",
        target_bytes=1 << 30,
        settings=Settings(n_ctx=4096),
        planned_n_cpu_moe=3,
        attempts=[best],
        best=best,
        command=["llama-server", "-m", str(tiny)],
    )
    notes: list[str] = []
    kept = save_winner(ProfileStore(), key, result, None, notes.append)
    assert kept.best == best and kept.profile_path is None
    assert len(notes) == 1 and "not saved" in notes[0] and path.name in notes[0], notes
    assert path.is_dir()
