"""``moetune export --json``: the router's command line (``router_command``, an argv) that
keeps one model loaded at a time, and ``--models-max 2`` refused with the arithmetic for
two models each tuned to fill the card."""

from __future__ import annotations

import json
from pathlib import Path

from moetune.errors import ExitCode
from moetune.store.tuned import ProfileStore

from support.helpers import assert_one_line_error, moetune
from support.preset_ini import load_preset
from support.profiles import make_profile

SERVER = "/opt/llama/llama-server"


def save_two() -> None:
    """Two models, each tuned alone on the 24 GiB RTX 4090 (target 22 GiB, peak 21 GiB)."""
    for name in ("a", "b"):
        path = f"/models/{name}.gguf"
        profile = make_profile(
            [SERVER, "-m", path, "-ngl", "99", "--n-cpu-moe", "7", "-c", "32768", "--jinja"],
            file_name=f"{name}.gguf",
            identity_path=path,
        )
        ProfileStore().save(profile)


def test_json_gives_the_router_command_with_one_model_at_a_time() -> None:
    save_two()
    done = moetune("export", "preset", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["router_command"] == [SERVER, "--models-preset", "models.ini", "--models-max", "1"]
    assert doc["models_max"] == 1 and doc["format"] == "preset" and doc["out"] is None
    assert [m["name"] for m in doc["models"]] == ["a", "b"]
    assert doc["models"][0]["peaks"] == [
        {
            "device": "CUDA0",
            "peak_bytes": 21 * 2**30,
            "budget_bytes": 22 * 2**30,
            "size_bytes": 24 * 2**30,
            "measured": True,
        }
    ]
    preset = load_preset(doc["text"])
    assert preset.shared == {"jinja": "true"}  # n-cpu-moe 7 is theirs, not every model's
    assert all(keys["n-cpu-moe"] == "7" for keys in preset.models.values())
    line = f"serve it with: {SERVER} --models-preset models.ini --models-max 1"
    assert line in done.stderr and line in doc["notes"][0]


def test_out_names_the_file_in_the_router_command(tmp_path: Path) -> None:
    save_two()
    out = tmp_path / "my models.ini"
    done = moetune("export", "preset", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["router_command"] == [SERVER, "--models-preset", str(out), "--models-max", "1"]
    assert doc["out"] == str(out) and doc["text"] is None
    assert out.read_text().startswith("; llama-server --models-preset THIS_FILE --models-max 1")
    assert f"'{out}'" in done.stderr  # the note quotes the path for a shell


def test_two_models_that_fill_the_card_are_refused_at_models_max_2(tmp_path: Path) -> None:
    save_two()
    out = tmp_path / "models.ini"
    done = moetune("export", "preset", "--models-max", "2", "--out", str(out))
    line = assert_one_line_error(done, ExitCode.BAD_VALUE)
    assert (
        "2 models at once need 21.00 GiB + 21.00 GiB on CUDA0, whose budget is 22.00 GiB "
        "of its 24.00 GiB" in line
    )
    assert not out.exists()
    as_json = moetune("export", "preset", "--models-max", "2", "--json")
    assert json.loads(as_json.stdout)["error"]["name"] == "BAD_VALUE"
    swap = moetune("export", "llama-swap", "--models-max", "2")
    assert "llama-swap runs one of these models at a time" in assert_one_line_error(
        swap, ExitCode.BAD_VALUE
    )


def test_llama_swap_json_and_note() -> None:
    save_two()
    done = moetune("export", "llama-swap", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["router_command"] == ["llama-swap", "--config", "config.yaml"]
    assert "one of these models at a time" in done.stderr
    assert "--n-cpu-moe 7" not in doc["text"].split("models:")[0]  # not in the macro
