"""Output at 80 columns from the commands: every table fits, no cell is cut short with "…"
(a path may be shortened in its middle, keeping the file name), and no flag is folded in two."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from moetune.report import to_json
from moetune.report.payloads import bench_payload
from moetune.store.bench import write_result
from moetune.store.tuned import (
    BuildIdentity,
    DeviceIdentity,
    ProfileStore,
    TunedFigures,
    TuneKey,
    TuneSettings,
    model_identity,
    new_profile,
)
from moetune.units import GIB, MIB

from support.bench import SPEEDS, speed_bench
from support.factory import ARCHS
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN, MOETUNE, default_signals, moetune_env
from support.width import WIDTH, check


def run_at(columns: int, *args: str, home: Path | None = None) -> str:
    done = subprocess.run(
        [*MOETUNE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=moetune_env(home, COLUMNS=str(columns)),
        preexec_fn=default_signals,
    )
    assert done.returncode in (0, 6, 12), done.stderr
    return done.stdout


CASES = {
    "plan-16g": ("plan", str(EXAMPLE_QWEN), "--vram", "16G", "--ram", "64G"),
    "plan-ram-short": ("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G", "--ram", "32G"),
    "plan-gpu-short": ("plan", str(EXAMPLE_QWEN), "--vram", "4G", "--ram", "64G"),
    "plan-three-devices": ("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G,16G,12G", "--ram", "64G"),
    "plan-frontier": (
        *("plan", str(EXAMPLE_QWEN), "--gpu", "rtx4090", "--ram", "64G"),
        *("--ram-bandwidth", "60", "--workload", "8k:512"),
    ),
    "plan-frontier-two": (
        *("plan", str(EXAMPLE_GPT_OSS), "--vram", "40G,24G", "--ram", "128G"),
        "--frontier",
    ),
    "inspect-layers": ("inspect", str(EXAMPLE_QWEN), "--layers"),
    "doctor": ("doctor", str(EXAMPLE_GPT_OSS), "--vram", "24G", "--no-measure"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_commands_at_80_columns(case: str) -> None:
    args = CASES[case]
    check(run_at(WIDTH, *args), run_at(200, *args))


@pytest.mark.parametrize("arch", ARCHS)
def test_inspect_blocks_of_every_architecture(tiny_models: dict[str, Path], arch: str) -> None:
    args = ("inspect", str(tiny_models[arch]), "--layers")
    check(run_at(WIDTH, *args), run_at(200, *args))


def test_tuned_profiles_with_long_names(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL-00001-of-00006.gguf"
    model.write_bytes(tiny_models["qwen3moe"].read_bytes())
    home = tmp_path / "home"
    store = ProfileStore(home / "profiles")
    for target in (22, 20):
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
            settings=TuneSettings(
                n_ctx=32768, type_k="q8_0", type_v="q8_0", target_bytes=target * GIB
            ),
        )
        measured = TunedFigures(
            vram_bytes=21 * GIB,
            decode_tps=41.5,
            decode_tps_min=40.0,
            decode_tps_max=43.0,
            repeats=3,
        )
        store.save(new_profile(key, 12, measured, ["llama-server", "-m", str(model)]))
    narrow = run_at(WIDTH, "profiles", "list", home=home)
    assert "Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL-32k-q8_0-22G-" in narrow
    assert "--n-cpu-moe 12" in narrow  # whole, not folded
    assert all(len(line.rstrip()) <= WIDTH for line in narrow.splitlines()), narrow
    wide = run_at(200, "profiles", "list", home=home)
    assert "--n-cpu-moe 12" in wide
    check(narrow, wide)
    name = next(n for n in store.names() if "-22G-" in n)
    check(
        run_at(WIDTH, "profiles", "show", name, home=home),
        run_at(200, "profiles", "show", name, home=home),
    )


def test_report_with_the_forecast(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    write_result(path, to_json(bench_payload(speed_bench(SPEEDS))))
    narrow = run_at(WIDTH, "report", str(path))
    assert "forecast beside measured" in narrow and "measured against forecast" in narrow
    check(narrow, run_at(200, "report", str(path)))


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("group", [(), ("profiles",)])
def test_help_lists_each_command_with_its_whole_description(
    columns: int, group: tuple[str, ...]
) -> None:
    """A group's --help lists each command with its help's whole first paragraph (click cut
    it with "..."), wrapped between words only (never at a hyphen: ``llama-`` / ``swap``),
    within the width and without trailing spaces."""
    import typer.main

    from moetune.cli import load_commands
    from moetune.cli.helpfmt import whole_short_help
    from moetune.cli.typer_app import app

    text = run_at(columns, *group, "--help")
    for line in text.splitlines():
        assert len(line) <= columns, line
        assert line == line.rstrip(), repr(line)
    section = text.split("Commands:\n", 1)[1]
    assert "..." not in section
    load_commands(None)
    command: Any = typer.main.get_command(app)
    for name in group:
        command = command.commands[name]
    joined = " ".join(section.split())
    for name, sub in command.commands.items():
        assert f"{name} {whole_short_help(sub)}" in joined, name
    for line in section.splitlines():
        assert not re.search(r"\w-$", line), line
