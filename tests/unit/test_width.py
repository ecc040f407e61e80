"""Output at 80 columns, rendered in-process: bench tables stack their ranges, run attempts
fit, a shortened path keeps the file name."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from moetune.core.search import Attempt
from moetune.core.settings import Settings
from moetune.records import results as res
from moetune.report import bench as rb
from moetune.report.common import short_path
from moetune.report.render import RunView, print_report, text
from moetune.report.run import render_run
from moetune.units import GIB, MIB

from support.bench import bench_result, row
from support.width import WIDTH, check


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
    result = bench_result(results=results, verdicts=res.verdicts(results))
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
    saved = result.model_copy(
        update={
            "profile_name": "Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL-32k-q8_0-22.5G-1f0c2a",
            "profile_path": "/home/someone/.config/moetune/profiles/Qwen3-Coder-480B-A35B-"
            "Instruct-UD-Q4_K_XL-32k-q8_0-22.5G-1f0c2a.json",
        }
    )
    view = text(RunView(saved, "/models/Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL.gguf"))
    narrow = _render(view, WIDTH)
    check(narrow, _render(view, 200))
    # the folder, whole on its line (the whole path was cut in two at 80 columns)
    assert "saved (in /home/someone/.config/moetune/profiles)\n" in narrow, narrow
    assert "2 launches" in narrow and "31.0-43.0" in narrow and "noisy" in narrow
    assert "decode 41.5 tok/s (31.0-43.0 over 3, noisy)" in narrow


def test_short_path_keeps_the_file_name() -> None:
    name = "Qwen3-235B-A22B-Instruct-2507-UD-Q4_K_XL-00001-of-00003.gguf"
    path = f"/home/someone/models/unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF/{name}"
    short = short_path(path, 80)
    assert short.endswith("…/" + name) and short.startswith("/home/someone") and len(short) <= 80
    assert short_path("/a/b.gguf", 80) == "/a/b.gguf"
    assert short_path(path, 20).endswith(name)  # the name is never cut


def _ot_result(status: str) -> res.RunResult:
    """A converged N=12 and the -ot form launched beside it (``status``)."""
    rules = ["blk\\.(1[2-9])\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"]
    n = Attempt(n_cpu_moe=12, predicted_bytes=21 * GIB, measured_bytes=21 * GIB, status="ok")
    ot = Attempt(
        n_cpu_moe=12,
        predicted_bytes=21 * GIB + 900 * MIB,
        measured_bytes=22 * GIB + 100 * MIB,
        status=status,
        override_tensor=rules,
        device_predicted=[21 * GIB + 900 * MIB],
        device_measured=[22 * GIB + 100 * MIB],
    )
    best = ot if status == "ok" else n
    return res.RunResult(
        model="/models/m.gguf",
        device="CUDA0",
        probe="NVML (the server process)",
        target_bytes=22 * GIB,
        settings=Settings(n_ctx=32768),
        planned_n_cpu_moe=12,
        attempts=[n, ot],
        best=best,
        command=["llama-server", "-m", "/models/m.gguf"],
        override_gain_bytes=900 * MIB,
    )


def test_run_says_which_form_won_and_what_the_other_keeps() -> None:
    won = " ".join(_render(render_run(_ot_result("ok")), 200).split())
    assert "best: the -ot form, decode" in won
    assert "the -ot form keeps 900.00 MiB more weights on the device than --n-cpu-moe 12" in won
    kept = " ".join(_render(render_run(_ot_result("over")), 200).split())
    assert "best: --n-cpu-moe 12, decode" in kept
    assert (
        "the -ot form would keep 900.00 MiB more weights on the device than --n-cpu-moe 12, "
        "but measured 22.10 GiB on CUDA0 (target 22.00 GiB): kept --n-cpu-moe 12"
    ) in kept
