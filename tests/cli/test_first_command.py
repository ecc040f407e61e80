"""The first command a plan prints is the one alias and export take: the ``-ot`` form where it
keeps more on the devices, ``--n-cpu-moe N`` where it keeps as much (the simpler form) or N is
fixed; the ``--n-cpu-moe`` form is printed beside it with what it gives up."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from moetune.cli import app

from support.factory import write_model
from support.helpers import EXAMPLE_GPT_OSS
from support.llama_swap import load_swap
from support.preset_ini import load_preset

# two RPC devices (no runtime overhead), described, not reached: a prediction
RIG = ("--rpc", "10.0.0.2:50052,10.0.0.3:50052", "--vram", "1G,1G", "--ctx", "4096")
MORE = ("--target-vram", "16M,16M")  # the -ot form keeps 6 MiB more on the devices
TIE = ("--target-vram", "10M,10M")  # the -ot form keeps nothing more


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-MoE-Q8.gguf", "qwen3moe")


def plan_json(*args: str) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["plan", *args, "--json"])
    assert done.exit_code == 0, done.output
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def weights_on_devices(placed: dict[str, Any]) -> int:
    return sum(d["weights_bytes"] for d in placed["memory"]["devices"])


def test_the_ot_form_is_first_where_it_keeps_more(tiny: Path) -> None:
    data = plan_json(str(tiny), *RIG, *MORE)
    plan = data["plan"]
    first, simpler = plan["alternative"], plan["recommended"]
    gain = weights_on_devices(first) - weights_on_devices(simpler)
    assert gain == plan["override_gain_bytes"] > 0
    assert data["first"] == {
        "form": "override",
        "command": data["override_command"],
        "frontier_pick": False,
    }
    assert plan["override_first"] is True
    assert data["command"] == simpler["command"]  # the --n-cpu-moe form keeps its key
    # the top-level figures and the RAM check are the first command's
    assert data["gpu_weights_bytes"] == first["memory"]["gpu_weights_bytes"]
    assert data["host_bytes"] == plan["ram"]["needed_bytes"]
    assert data["cpu_weights_bytes"] == first["memory"]["cpu_weights_bytes"]
    assert data["cpu_weights_bytes"] == simpler["memory"]["cpu_weights_bytes"] - gain
    text = CliRunner().invoke(app, ["plan", str(tiny), *RIG, *MORE], env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    at = lines.index("command:")
    assert shlex.split(lines[at + 1]) == first["command"]
    label = "--n-cpu-moe form (simpler; keeps 6.00 MiB more experts in RAM):"
    assert lines[at + 2] == label
    assert shlex.split(lines[at + 3]) == simpler["command"]
    n = simpler["n_cpu_moe"]
    said = f"or --n-cpu-moe {n}  (experts of blocks 0-{n - 1} on the CPU): simpler; 6.00 MiB"
    assert said + " more experts in RAM" in text.stdout


def test_a_tie_keeps_the_n_form_first(tiny: Path) -> None:
    """The -ot form keeps nothing more: --n-cpu-moe first and alone (the tiny model on two
    devices; gpt-oss-120b on one 24G card)."""
    for args in ((str(tiny), *RIG, *TIE), (str(EXAMPLE_GPT_OSS), "--vram", "24G", "--ram", "64G")):
        data = plan_json(*args)
        assert data["n_cpu_moe"] > 0
        assert data["override_command"] is None
        assert data["first"]["form"] == "n_cpu_moe"
        assert data["first"]["command"] == data["command"]


def test_a_fixed_n_stays_first(tiny: Path) -> None:
    """--n-cpu-moe N given: that N is first, the -ot form beside it."""
    n = plan_json(str(tiny), *RIG, *MORE)["n_cpu_moe"]
    data = plan_json(str(tiny), *RIG, *MORE, "--n-cpu-moe", str(n))
    assert data["first"]["form"] == "n_cpu_moe" and data["override_command"] is not None
    text = CliRunner().invoke(app, ["plan", str(tiny), *RIG, *MORE, "--n-cpu-moe", str(n)])
    assert text.stdout.index("command:") < text.stdout.index("-ot form:")


def test_alias_and_export_take_the_first_command(tiny: Path) -> None:
    first = plan_json(str(tiny), *RIG, *MORE)["first"]["command"]
    assert "-ot" in first and "--n-cpu-moe" not in first
    alias = CliRunner().invoke(app, ["alias", "tiny", str(tiny), *RIG, *MORE])
    assert alias.exit_code == 0, alias.output
    body = next(line for line in alias.stdout.splitlines() if line.startswith("    "))
    assert shlex.split(body)[1:-1] == first[1:]  # "$@" last
    assert "PREDICTED (no tuned profile): -ot " in alias.stdout
    swap = CliRunner().invoke(app, ["export", "llama-swap", str(tiny), *RIG, *MORE])
    assert swap.exit_code == 0, swap.output
    (argv,) = load_swap(swap.stdout).values()
    assert argv[3:] == first[1:]  # after the server, --port and its port
    preset = CliRunner().invoke(app, ["export", "preset", str(tiny), *RIG, *MORE])
    assert preset.exit_code == 0, preset.output
    found = load_preset(preset.stdout)
    keys = {**found.shared, **next(iter(found.models.values()))}
    assert keys["override-tensor"] == first[first.index("-ot") + 1]
    assert "n-cpu-moe" not in keys
