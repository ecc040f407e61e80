"""Whole-process start and plan times, measured in one run against ``python -c pass``.

Times each command as a fresh process (median and range over ``--repeats`` runs):
``moetune --version``, ``inspect`` and ``plan --vram 24G`` of the shipped Qwen3-30B-A3B
example, and ``plan --vram 24G`` of a generated header-only Qwen3-235B-A22B (94 blocks, 128
experts, 151,936-token vocabulary), where most of the time is the planner's search.

Targets on the development machine: inspect and plan of the example at most 0.25 s, the
94-block plan at most 0.5 s. The package's bytecode is compiled first, as any install does
(this sandbox sets PYTHONDONTWRITEBYTECODE, which would otherwise recompile every module on
every start).

    python benchmarks/startup.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.factory import QWEN3_235B_A22B, write_header_only

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf"
MOETUNE = (sys.executable, "-m", "moetune")


def timed(argv: list[str], repeats: int) -> list[float]:
    """Wall seconds of ``argv`` run to completion, ``repeats`` times (one warm-up first)."""
    samples: list[float] = []
    for index in range(repeats + 1):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False)
        if done.returncode not in (0, 6):  # 6: does not fit, still a finished plan
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
        if index:
            samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "src" / "moetune"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        big = write_header_only(Path(tmp) / "Qwen3-235B-A22B-Q4_K_M.gguf", shape=QWEN3_235B_A22B)
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("moetune --version", [*MOETUNE, "--version"], None),
            ("inspect EXAMPLE --json", [*MOETUNE, "inspect", str(EXAMPLE), "--json"], 0.25),
            (
                "plan EXAMPLE --vram 24G --json",
                [*MOETUNE, "plan", str(EXAMPLE), "--vram", "24G", "--json"],
                0.25,
            ),
            (
                "plan 235B-A22B (94 blocks) --vram 24G --json",
                [*MOETUNE, "plan", str(big), "--vram", "24G", "--json"],
                0.5,
            ),
        ]
        results = [(label, timed(argv, args.repeats), target) for label, argv, target in cases]
    base = statistics.median(results[0][1])
    print(f"whole-process wall time, median (min-max) of {args.repeats} runs")
    for label, samples, target in results:
        median = statistics.median(samples)
        verdict = (
            ""
            if target is None
            else f"  target <= {target:.2f} s: " + ("met" if median <= target else "MISSED")
        )
        print(
            f"  {label:46s} {median:6.3f} s ({min(samples):.3f}-{max(samples):.3f}), "
            f"{median / base:5.1f}x python -c pass{verdict}"
        )


if __name__ == "__main__":
    main()
