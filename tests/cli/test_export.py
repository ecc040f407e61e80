"""``moetune export`` of a model without a tuned profile: the plan as a marked fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.errors import ExitCode
from moetune.store.tuned import ProfileStore
from moetune.units import GIB

from support.factory import write_model
from support.helpers import EXAMPLE_QWEN, assert_one_line_error, moetune
from support.llama_swap import load_swap
from support.preset_ini import load_preset
from support.profiles import make_profile


def test_a_model_without_a_profile_is_exported_from_its_plan(tmp_path: Path) -> None:
    model = write_model(tmp_path / "plain.gguf", "qwen3moe", n_layers=4)
    done = moetune("export", "preset", str(model), "--vram", "4G")
    assert done.returncode == 0, done.stderr
    assert "PREDICTED" in done.stdout and f"model = {model}" in done.stdout
    assert "predicted, not measured" in done.stderr
    refused = moetune("export", "preset", str(model), "--vram", "4G", "--require-tuned")
    assert refused.returncode == ExitCode.FILE_NOT_FOUND


def test_a_model_that_does_not_fit_the_ram_is_left_out_and_the_rest_exported(
    tmp_path: Path,
) -> None:
    out = tmp_path / "models.ini"
    small = write_model(tmp_path / "small.gguf", "qwen3moe", n_layers=4)
    big = write_model(tmp_path / "big.gguf", "qwen3moe", n_layers=16)
    args = ("export", "preset", str(small), str(big), "--vram", "1G", "--target-vram", "540M")
    done = moetune(*args, "--ctx", "1k", "--ram", "24M", "--out", str(out))
    # the big model's CPU side needs 42.21 MiB: left out, said, and the exit code says so
    assert done.returncode == ExitCode.DOES_NOT_FIT, done.stderr
    assert "left out of the export" in done.stderr and big.name in done.stderr
    assert "[small]" in out.read_text() and big.name not in out.read_text()
    assert "wrote 1 model(s)" in done.stderr
    both = moetune(*args, "--ctx", "1k", "--ram", "64M")
    assert both.returncode == 0, both.stderr
    assert big.name in both.stdout and small.name in both.stdout


def test_a_header_only_file_is_refused_as_alias_refuses_it() -> None:
    """A preset entry of a file without its weights would not start: refused, one line."""
    done = moetune("export", "preset", str(EXAMPLE_QWEN), "--vram", "24G")
    line = assert_one_line_error(done, ExitCode.BAD_MODEL)
    assert "holds no tensor data (a header-only file): an entry of it would not start" in line
    assert done.stdout == ""


# --- hostile names through tuned profiles ------------------------------------------------------

SERVER = "/opt/llama dir/llama-server"


def save_tuned(file_name: str, *args: str) -> str:
    """A tuned profile of ``/models/FILE_NAME`` (as `moetune run` saves one); its path."""
    path = f"/models/{file_name}"
    profile = make_profile(
        [SERVER, "-m", path, "--n-cpu-moe", "3", *args],
        file_name=file_name,
        identity_path=path,
    )
    ProfileStore().save(profile)
    return path


@pytest.mark.parametrize("fmt", ["preset", "llama-swap"])
@pytest.mark.parametrize("file_name", ["x\n[evil]\nmodel=y.gguf", "a\rb.gguf", " lead.gguf"])
def test_a_tuned_name_no_format_holds_is_refused(fmt: str, file_name: str, tmp_path: Path) -> None:
    save_tuned(file_name)
    done = moetune("export", fmt)
    line = assert_one_line_error(done, ExitCode.BAD_VALUE)
    assert "cannot export the model" in line and done.stdout == ""
    out = tmp_path / "mine.conf"
    out.write_text("; mine\n")
    again = moetune("export", fmt, "--out", str(out))
    assert_one_line_error(again, ExitCode.BAD_VALUE)
    assert out.read_text() == "; mine\n"


def test_a_tuned_path_a_preset_cannot_hold_is_refused_and_llama_swap_quotes_it() -> None:
    path = save_tuned("a;b #c.gguf", "--alias", "x\ry")
    line = assert_one_line_error(moetune("export", "preset"), ExitCode.BAD_VALUE)
    assert "'a;b #c'" in line and "preset" in line
    done = moetune("export", "llama-swap")
    assert done.returncode == 0, done.stderr
    assert load_swap(done.stdout) == {
        "a;b #c": [SERVER, "--port", "5800", "-m", path, "--n-cpu-moe", "3", "--alias", "x\ry"]
    }


def test_hostile_tuned_names_come_back_as_data(tmp_path: Path) -> None:
    names = {  # the file's name: the section the router lists (its tag made canonical)
        "a=b [x": "a=b [x",
        "ü模型 'q' \"d\"": "ü模型 'q' \"d\"",
        "- &x: *y {z} !t": "- &x: *Y {Z} !T",
    }
    paths = {name: save_tuned(f"{name}.gguf", "-ot", r"blk\.[0-9]=CPU") for name in names}
    out = tmp_path / "models.ini"
    out.write_text("; mine\n[hand]\nmodel = /m/hand.gguf\n")
    done = moetune("export", "preset", "--out", str(out))
    assert done.returncode == 0, done.stderr
    preset = load_preset(out.read_text())
    # the placement they share stays in each section: [*] would hand it to any model
    assert preset.shared == {}
    placement = {"n-cpu-moe": "3", "override-tensor": r"blk\.[0-9]=CPU"}
    assert preset.models == {
        "hand": {"model": "/m/hand.gguf"},
        **{names[name]: {"model": path, **placement} for name, path in paths.items()},
    }
    swap = moetune("export", "llama-swap")
    assert swap.returncode == 0, swap.stderr
    argv = load_swap(swap.stdout)
    assert set(argv) == set(names)
    for name, path in paths.items():
        assert argv[name][:2] == [SERVER, "--port"]
        assert argv[name][3:] == ["-m", path, "--n-cpu-moe", "3", "-ot", r"blk\.[0-9]=CPU"]


def test_a_hand_written_section_of_an_exported_name_is_refused(tmp_path: Path) -> None:
    save_tuned("tiny.gguf")
    for fmt, hand in (
        ("preset", "[tiny]\nmodel = /m/mine.gguf\n"),
        ("llama-swap", "models:\n  tiny:\n    cmd: /bin/x --port ${PORT}\n"),
    ):
        out = tmp_path / f"{fmt}.conf"
        out.write_text(hand)
        line = assert_one_line_error(moetune("export", fmt, "--out", str(out)), ExitCode.BAD_VALUE)
        assert "written by hand" in line
        assert out.read_text() == hand


def test_of_several_tuned_profiles_the_newest_is_exported_and_the_others_named() -> None:
    """export with no model named: of a model's two tuned profiles that match, the newest, as
    alias takes it, and a warning names the other with what tells it apart; a selector
    (--target-vram, --profile) picks one."""
    first = make_profile([SERVER, "-m", "/models/m.gguf", "--n-cpu-moe", "3"])
    settings = first.settings.model_copy(update={"target_bytes": 20 * GIB})
    second = first.model_copy(
        update={
            "name": first.name.replace("-22G-", "-20G-"),
            "settings": settings,
            "tuned_at": "2025-02-01T00:00:00+00:00",
            "command": [SERVER, "-m", "/models/m.gguf", "--n-cpu-moe", "5"],
        }
    )
    ProfileStore().save(first)
    ProfileStore().save(second)
    newest = moetune("export", "preset")
    assert newest.returncode == 0, newest.stderr
    assert "n-cpu-moe = 5" in newest.stdout and "n-cpu-moe = 3" not in newest.stdout
    said = " ".join(newest.stderr.split())
    assert f"using the newest, {second.name} (--target-vram 20G)" in said, said
    assert f"{first.name} (--target-vram 22G) also" in said, said
    older = moetune("export", "preset", "--target-vram", "22G")
    assert older.returncode == 0, older.stderr
    assert "n-cpu-moe = 3" in older.stdout and "n-cpu-moe = 5" not in older.stdout
    named = moetune("export", "llama-swap", "--profile", second.name)
    assert named.returncode == 0, named.stderr
    assert "--n-cpu-moe 5" in named.stdout
