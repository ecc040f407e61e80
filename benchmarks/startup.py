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

Targets (issue 22, on the development machine): inspect and plan of the example at most
0.20 s, the 94-block plan at most 0.40 s and at ``--ctx max`` 0.50 s, the DeepSeek-V3.2 plan
1 s, the frontier at most 0.3 s over the plan without it. The package's bytecode is compiled
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


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    """Wall seconds of ``argv`` run to completion, and what it printed."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    if done.returncode not in (0, 6):  # 6: does not fit, still a finished plan
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    return time.perf_counter() - start, done.stdout


def timed(
    cases: list[tuple[str, list[str], float | None]], repeats: int, env: dict[str, str]
) -> list[tuple[list[float], bytes]]:
    """Each case's samples and what it printed: ``repeats`` rounds after one warm-up, each
    round running every case once, so a slow minute of the machine falls on all of them
    alike (the frontier's cost is the difference of two cases)."""
    samples: list[list[float]] = [[] for _ in cases]
    outs = [b""] * len(cases)
    for index in range(repeats + 1):
        for i, (_, argv, _) in enumerate(cases):
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
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("moetune --version", [*MOETUNE, "--version"], None),
            ("inspect EXAMPLE --json", [*MOETUNE, "inspect", str(EXAMPLE), "--json"], 0.20),
            ("plan EXAMPLE --vram 24G --json", plan_example, 0.20),
            ("plan EXAMPLE --vram 24G --json --frontier", [*plan_example, "--frontier"], None),
            (
                "plan 235B-A22B (94 blocks) --vram 24G --json",
                [*MOETUNE, "plan", str(big), "--vram", "24G", "--json"],
                0.40,
            ),
            (
                "plan 235B-A22B --vram 24G --ctx max --json",
                [*MOETUNE, "plan", str(big), "--vram", "24G", "--ctx", "max", "--json"],
                0.50,
            ),
            (
                "plan DeepSeek-V3.2 (61 blocks) --vram 24G --json",
                [*MOETUNE, "plan", str(v32), "--vram", "24G", "--json"],
                1.0,
            ),
            ("plan EXAMPLE --vram 12G,12G --json", two_devices, None),
            ("plan EXAMPLE --vram 12G,12G --json --frontier", [*two_devices, "--frontier"], None),
        ]
        results = [
            (label, samples, target, out)
            for (label, _, target), (samples, out) in zip(
                cases, timed(cases, args.repeats, env), strict=True
            )
        ]
    base = statistics.median(results[0][1])
    print(f"whole-process wall time, median (min-max) of {args.repeats} runs")
    medians = {label: statistics.median(samples) for label, samples, _, _ in results}
    for label, samples, target, out in results:
        median = medians[label]
        verdict = (
            ""
            if target is None
            else f"  target <= {target:.2f} s: " + ("met" if median <= target else "MISSED")
        )
        if label == "plan EXAMPLE --vram 24G --json --frontier":
            frontier = json.loads(out).get("frontier") or {}
            over = median - medians["plan EXAMPLE --vram 24G --json"]
            verdict = (
                f"  {len(frontier.get('entries', []))} candidates, +{over:.3f} s over the plan, "
                "target <= +0.30 s: " + ("met" if over <= 0.3 else "MISSED")
            )
        print(
            f"  {label:50s} {median:6.3f} s ({min(samples):.3f}-{max(samples):.3f}), "
            f"{median / base:5.1f}x python -c pass{verdict}"
        )


if __name__ == "__main__":
    main()
