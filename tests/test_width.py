"""Output at 80 columns: every table fits, no cell is cut short with "…" (a path may be
shortened in its middle, keeping the file name), and no flag is folded in two."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest
from rich.console import Console, RenderableType

from moetune.core.search import Attempt
from moetune.core.settings import Settings
from moetune.records import results as res
from moetune.report import bench as rb
from moetune.report.common import short_path
from moetune.report.render import print_report
from moetune.report.run import render_run
from moetune.store.tuned import (
    BuildIdentity,
    DeviceIdentity,
    Measured,
    ProfileStore,
    TuneKey,
    TuneSettings,
    model_identity,
    new_profile,
)
from moetune.units import GIB, MIB
from test_bench_verdict import _result, row

from factory import ARCHS
from helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN, MOETUNE, default_signals, moetune_env

WIDTH = 80
_FLAG_RE = re.compile(r"^--?[a-z][a-z0-9-]*$")


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


def table_lines(text: str) -> list[str]:
    """The lines of every table: from the header above a ``───`` rule to the next blank line."""
    lines = text.splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if set(line.strip()) == {"─"}:
            found.append(lines[index - 1])
            for after in lines[index:]:
                if not after.strip():
                    break
                found.append(after)
    return found


def check(narrow: str, wide: str) -> None:
    """Tables within the width; prose too, but for the commands to copy (ShellLines, one
    whole line each, however long)."""
    rows = table_lines(narrow) or narrow.splitlines()  # doctor's table has no header
    rows += [line for line in narrow.splitlines() if not _is_command(line)]
    too_wide = [line for line in rows if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    assert not re.search(r"…(?!/)", narrow), narrow  # only a path's middle, "…/"
    flags = {w for w in narrow.split() if _FLAG_RE.match(w)}
    assert flags <= set(wide.split()), flags - set(wide.split())


def _is_command(line: str) -> bool:
    return line.lstrip("# ").startswith(("llama-server ", "moetune ", "-ot "))


CASES = {
    "plan-16g": ("plan", str(EXAMPLE_QWEN), "--vram", "16G", "--ram", "64G"),
    "plan-ram-short": ("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G", "--ram", "32G"),
    "plan-gpu-short": ("plan", str(EXAMPLE_QWEN), "--vram", "4G", "--ram", "64G"),
    "plan-three-devices": ("plan", str(EXAMPLE_GPT_OSS), "--vram", "24G,16G,12G", "--ram", "64G"),
    "inspect-layers": ("inspect", str(EXAMPLE_QWEN), "--layers"),
    "doctor": ("doctor", str(EXAMPLE_GPT_OSS), "--vram", "24G"),
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
        measured = Measured(
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


def _render(renderable: RenderableType, width: int) -> str:
    """As the commands print a report: prose wrapped, ShellLines whole."""
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    print_report(renderable, console)
    return console.export_text()


def test_bench_tables_stack_the_ranges_when_narrow() -> None:
    results = [
        row("plan", 64, [1412.0, 11086.0, 1469.0], [12805.0, 15000.0, 14875.0]),
        row("cpu-moe", 64, [278.0, 295.0, 361.0], [2156.0, 2876.0, 4889.0]),
        row("layers", 16384, [203.0, 379.0, 467.0], [2174.0, 2194.0, 2222.0]),
    ]
    result = _result(results=results, verdicts=res.verdicts(results))
    narrow, wide = _render(rb.render_report(result), WIDTH), _render(rb.render_report(result), 200)
    check(narrow, wide)
    assert "1412-11086" in narrow and "median, min-max below" in narrow
    assert "1469 (1412-11086)" in wide and "median (min-max)" in wide


def test_run_attempts_at_80_columns() -> None:
    attempts = [
        Attempt(
            n_cpu_moe=12,
            predicted_bytes=21 * GIB,
            measured_bytes=21 * GIB + 5 * MIB,
            status="ok",
            ttft_s=3.21,
            prompt_tps=1234.5,
            decode_tps=41.5,
            decode_tps_min=31.0,
            decode_tps_max=43.0,
            repeats=3,
            log_path="/x.log",
        ),
        Attempt(
            n_cpu_moe=11,
            predicted_bytes=22 * GIB,
            measured_bytes=None,
            status="oom",
            message="cudaMalloc failed: out of memory",
        ),
    ]
    result = res.RunResult(
        model="/models/m.gguf",
        device="CUDA0",
        probe="NVML (the server process)",
        target_bytes=22 * GIB,
        settings=Settings(n_ctx=32768),
        planned_n_cpu_moe=12,
        attempts=attempts,
        best=attempts[0],
        command=["llama-server", "-m", "/models/m.gguf"],
    )
    narrow = _render(render_run(result), WIDTH)
    check(narrow, _render(render_run(result), 200))
    assert "2 launches" in narrow and "31.0-43.0" in narrow and "noisy" in narrow
    assert "decode 41.5 tok/s (31.0-43.0 over 3, noisy)" in narrow


def test_short_path_keeps_the_file_name() -> None:
    name = "Qwen3-235B-A22B-Instruct-2507-UD-Q4_K_XL-00001-of-00003.gguf"
    path = f"/home/someone/models/unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF/{name}"
    short = short_path(path, 80)
    assert short.endswith("…/" + name) and short.startswith("/home/someone") and len(short) <= 80
    assert short_path("/a/b.gguf", 80) == "/a/b.gguf"
    assert short_path(path, 20).endswith(name)  # the name is never cut
