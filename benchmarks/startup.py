"""Whole-process start and plan times, measured in one run against ``python -c pass``.

Times each command as a fresh process (median and range over ``--repeats`` rounds, each
round running every command once): ``moetune --version``, ``inspect`` and ``plan --vram
24G`` of the shipped Qwen3-30B-A3B example, the same plan with ``--frontier`` (its
candidates counted, its cost over the plan printed), ``plan --vram 24G`` and ``--ctx max``
of a generated header-only Qwen3-235B-A22B (94 blocks, 128 experts, 151,936-token
vocabulary), where most of the time is the planner's search, and ``plan --vram 24G`` of a
DeepSeek-V3.2-shaped header (61 blocks, the sparse attention's indexer), and the example
over two devices (``--vram 12G,12G``: pipeline parallelism, no target), with and without
``--frontier``.

Start-up is reported, not chased: there are no targets (issue 22's went with the second
parser, issue 35). Each figure is printed beside two baselines measured in the same rounds:
``python -c pass`` and ``python -c "import typer"`` (the parser every command starts with),
so what moetune adds over typer alone is read off directly. The package's bytecode is compiled
first, as any install does (this sandbox sets PYTHONDONTWRITEBYTECODE, which would otherwise
recompile every module on every start), and every run gets an empty ``MOETUNE_HOME`` (speeds
a user measured and kept would be read by every plan: a first run is what is measured).

    python benchmarks/startup.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.examples import write_v32_header
from support.factory import QWEN3_235B_A22B, write_header_only

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf"
MOETUNE = (sys.executable, "-m", "moetune")


Case = tuple[str, list[str]]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    """Wall seconds of ``argv`` run to completion, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    if done.returncode not in (0, 6):  # 6: does not fit, still a finished plan
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return time.perf_counter() - start, done.stdout


def timed(cases: list[Case], repeats: int, env: dict[str, str]) -> list[tuple[list[float], bytes]]:
    """Each case's samples and what it printed: ``repeats`` rounds after one warm-up, each
    round running every case once, so a slow minute of the machine falls on all of them
    alike (the frontier's cost is the difference of two cases)."""
    samples: list[list[float]] = [[] for _ in cases]
    outs = [b""] * len(cases)
    for index in range(repeats + 1):
        for i, (_, argv) in enumerate(cases):
            seconds, outs[i] = run_once(argv, env)
            if index:
                samples[i].append(seconds)
    return list(zip(samples, outs, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "src" / "moetune"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MOETUNE_HOME": str(Path(tmp) / "home")}
        big = write_header_only(Path(tmp) / "Qwen3-235B-A22B-Q4_K_M.gguf", shape=QWEN3_235B_A22B)
        v32 = write_v32_header(Path(tmp) / "DeepSeek-V3.2-Q4_K_M.header.gguf")
        plan_example = [*MOETUNE, "plan", str(EXAMPLE), "--vram", "24G", "--json"]
        two_devices = [*MOETUNE, "plan", str(EXAMPLE), "--vram", "12G,12G", "--json"]
        cases: list[Case] = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("python -c 'import typer'", [sys.executable, "-c", "import typer"]),
            ("moetune --version", [*MOETUNE, "--version"]),
            ("inspect EXAMPLE --json", [*MOETUNE, "inspect", str(EXAMPLE), "--json"]),
            ("plan EXAMPLE --vram 24G --json", plan_example),
            ("plan EXAMPLE --vram 24G --json --frontier", [*plan_example, "--frontier"]),
            (
                "plan 235B-A22B (94 blocks) --vram 24G --json",
                [*MOETUNE, "plan", str(big), "--vram", "24G", "--json"],
            ),
            (
                "plan 235B-A22B --vram 24G --ctx max --json",
                [*MOETUNE, "plan", str(big), "--vram", "24G", "--ctx", "max", "--json"],
            ),
            (
                "plan DeepSeek-V3.2 (61 blocks) --vram 24G --json",
                [*MOETUNE, "plan", str(v32), "--vram", "24G", "--json"],
            ),
            ("plan EXAMPLE --vram 12G,12G --json", two_devices),
            ("plan EXAMPLE --vram 12G,12G --json --frontier", [*two_devices, "--frontier"]),
        ]
        results = [
            (label, samples, out)
            for (label, _), (samples, out) in zip(
                cases, timed(cases, args.repeats, env), strict=True
            )
        ]
    medians = {label: statistics.median(samples) for label, samples, _ in results}
    base, typer_alone = medians["python -c pass"], medians["python -c 'import typer'"]
    print(f"whole-process wall time, median (min-max) of {args.repeats} runs")
    for label, samples, out in results:
        median = medians[label]
        note = f"  +{median - typer_alone:.3f} s over typer alone" if median > typer_alone else ""
        if label.endswith("--frontier"):
            frontier = json.loads(out).get("frontier") or {}
            without = medians[label.removesuffix(" --frontier")]
            note += (
                f"; {len(frontier.get('entries', []))} candidates, "
                f"+{median - without:.3f} s over the plan"
            )
        print(
            f"  {label:50s} {median:6.3f} s ({min(samples):.3f}-{max(samples):.3f}), "
            f"{median / base:5.1f}x python -c pass{note}"
        )


if __name__ == "__main__":
    main()
