"""``moetune export --out``: a file that cannot be written is one clear line and the file as it
was; concurrent exports serialize, so the hand-written text survives every round; an export
killed mid-write leaves the old file or the new one."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from moetune.errors import ExitCode

from support.factory import write_model
from support.helpers import MOETUNE, assert_one_line_error, cli, default_signals, moetune_env
from support.llama_swap import load_swap
from support.preset_ini import load_preset
from support.profiles import a_key, saved

HAND = """; my presets, written by hand
version = 1

[*]
; every model: my own defaults
jinja = true

[my-model]
; keep this one
model = /models/mine.gguf
ctx-size = 8192
"""


@pytest.fixture
def tuned(tmp_path: Path) -> Path:
    """A tuned profile in $MOETUNE_HOME (export needs no GPU and no llama-server for it)."""
    return saved(a_key(write_model(tmp_path / "Tiny-Q8.gguf", "qwen3moe")))


def _refused(out: Path | str, code: ExitCode, words: str) -> None:
    exit_code, _, err = cli("export", "preset", "--out", str(out))
    assert exit_code == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moetune: error: "), err
    assert words in lines[0] and "internal error" not in lines[0], err


@pytest.mark.usefixtures("tuned")
def test_out_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    _refused(tmp_path, ExitCode.BAD_VALUE, "is a folder")
    _refused(tmp_path / "nowhere" / "p.ini", ExitCode.FILE_NOT_FOUND, "no folder")
    assert not (tmp_path / "nowhere").exists()
    if Path("/proc/version").is_file():
        before = Path("/proc/version").read_bytes()
        _refused("/proc/version", ExitCode.BAD_VALUE, "cannot write /proc/version")
        assert Path("/proc/version").read_bytes() == before
    latin1 = tmp_path / "latin1.ini"
    latin1.write_bytes(HAND.encode().replace(b"my presets", b"mes pr\xe9r\xe9glages"))
    before = latin1.read_bytes()
    _refused(latin1, ExitCode.BAD_VALUE, "not UTF-8")
    assert latin1.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_bad_out_is_said_before_any_model_is_planned(tmp_path: Path) -> None:
    """--out is checked first: a folder is refused before the models are opened and planned
    (a hub model's plan reads headers over the network), not after."""
    missing = tmp_path / "not-there.gguf"
    code, _, err = cli("export", "preset", str(missing), "--vram", "24G", "--out", str(tmp_path))
    assert code == ExitCode.BAD_VALUE and "is a folder" in err, err
    nowhere = tmp_path / "nowhere" / "p.ini"
    code, _, err = cli("export", "preset", str(missing), "--vram", "24G", "--out", str(nowhere))
    assert code == ExitCode.FILE_NOT_FOUND and "no folder" in err, err


@pytest.mark.usefixtures("tuned")
def test_out_that_is_immutable_or_read_only(tmp_path: Path) -> None:
    ini = tmp_path / "p.ini"
    ini.write_text(HAND)
    if (
        shutil.which("chattr")
        and subprocess.run(["chattr", "+i", str(ini)], check=False).returncode == 0
    ):
        try:  # EPERM
            _refused(ini, ExitCode.PERMISSION_DENIED, "cannot write")
        finally:
            subprocess.run(["chattr", "-i", str(ini)], check=True)
        assert ini.read_text() == HAND
    if os.geteuid() != 0:  # root writes a read-only file
        ini.chmod(0o444)
        _refused(ini, ExitCode.PERMISSION_DENIED, f"cannot write {ini}: permission denied")
        assert ini.read_text() == HAND


def test_out_that_is_not_a_regular_file(tuned: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.ini"
    os.mkfifo(fifo)
    done = subprocess.run(
        [*MOETUNE, "export", "preset", "--out", str(fifo)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=moetune_env(),
        preexec_fn=default_signals,
    )
    assert "not a regular file" in assert_one_line_error(done, ExitCode.BAD_VALUE)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_out_through_a_link_keeps_the_link_and_the_mode(tuned: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "presets.ini"
    real.parent.mkdir()
    real.write_text(HAND)
    real.chmod(0o640)
    link = tmp_path / "presets.ini"
    link.symlink_to(real)
    code, _, err = cli("export", "preset", "--out", str(link))
    assert code == 0, err
    assert link.is_symlink() and HAND in real.read_text() and "model = x" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_concurrent_exports_keep_the_hand_written_text(tuned: Path, tmp_path: Path) -> None:
    """50 rounds of three `export --out` at once on a hand-edited file (padded, so that a
    write takes a while): every round, every hand-written line is still there."""
    hand = HAND + "".join(f"; note {i}: {'x' * 60}\n" for i in range(4000))
    ini = tmp_path / "race.ini"
    for round_ in range(50):
        ini.write_text(hand)
        children = [
            subprocess.Popen(
                [*MOETUNE, "export", "preset", "--out", str(ini)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=moetune_env(),
                preexec_fn=default_signals,  # noqa: PLW1509
            )
            for _ in range(3)
        ]
        errors = [child.communicate(timeout=120)[1] for child in children]
        assert [child.returncode for child in children] == [0, 0, 0], errors
        text = ini.read_text()
        assert hand in text, f"round {round_}: hand-written text lost"
        assert text.count("[my-model]") == 1 and text.count("model = x") == 1, text[:400]


KILLED = """
import resource, sys
from pathlib import Path
from moetune.cli import app, load_commands
load_commands(["export"])
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
app(["export", "preset", "--out", sys.argv[1]])
"""


def test_an_export_stopped_mid_write_leaves_the_old_file(tuned: Path, tmp_path: Path) -> None:
    """The file size limit stops the write half way (EFBIG): the old file is as it was, the
    error is one line and no temporary file is left."""
    hand = HAND + "".join(f"; note {i}: {'x' * 60}\n" for i in range(4000))
    ini = tmp_path / "p.ini"
    ini.write_text(hand)
    limit = len(hand) + 100  # the old file fits, the new one does not
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip("the file size limit is already lower")
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(ini), str(limit)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=moetune_env(),
        preexec_fn=default_signals,
    )
    assert ini.read_text() == hand
    assert "cannot write" in assert_one_line_error(done, ExitCode.BAD_VALUE)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("fmt", ["preset", "llama-swap"])
def test_exporting_another_model_keeps_the_first_ones_entry(fmt: str, tmp_path: Path) -> None:
    """`export FMT B --out F` after `export FMT A --out F`: both are in F (B's entry added,
    A's as it was); `export FMT A` again replaces A's entry and keeps B's."""
    a, b = (write_model(tmp_path / f"{n}.gguf", "qwen3moe", n_layers=4) for n in "ab")
    out = tmp_path / ("models.ini" if fmt == "preset" else "swap.yaml")
    for model in (a, b, a):
        code, _, err = cli("export", fmt, str(model), "--vram", "4G", "--out", str(out))
        assert code == 0, err
    text = out.read_text()
    models = set(load_preset(text).models) if fmt == "preset" else set(load_swap(text))
    assert models == {"a", "b"}, text
    assert text.count(str(a)) == 1 and text.count(str(b)) == 1, text
