"""`moetune calibrate FILE` on big inputs: time and peak memory of each import, as a fresh
process, beside issue 38's targets.

Four files, written here:

- a 17 GB GGUF (sparse: the magic, a version, then a hole), as a model passed by mistake:
  refused from its first bytes, target under 5 s and under 400 MB;
- a 17 GB text file (sparse after 8 KiB of a JSON array's opening), which passes the first
  bytes' check: refused by its size (jobs/calibrate.py ``MAX_TEXT_BYTES``), the same target;
- 10,000 llama-bench ``-o json`` rows of the shipped example model (a prompt and a
  generation test at 5,000 placements and thread counts; each row llama-bench's own fields,
  as tests/data/llama_bench has them), imported into an empty ``MOETUNE_HOME``: target under
  15 s;
- the same rows repeated to just under ``MAX_TEXT_BYTES``, the largest file an import reads
  (no target: reported).

Each is run ``--repeats`` times as ``python -m moetune calibrate FILE``; the wall time is
the median, the peak resident memory the largest of the child's ``ru_maxrss``
(``resource.getrusage(RUSAGE_CHILDREN)`` of a fresh helper process per run, so one run's
peak is not another's). ``python -c pass`` is timed beside them.

    python benchmarks/import_speed.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "models" / "Qwen3-30B-A3B-Q4_K_M.header.gguf"
ROWS = ROOT / "tests" / "data" / "llama_bench" / "readme_rtx4080_qwen2.5_7b.json"
MOETUNE = (sys.executable, "-m", "moetune")
GB = 10**9
MB = 10**6
BIG_BYTES = 17 * GB

# run in a fresh interpreter: the wall time and peak RSS of one child, as JSON
MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"wall": wall, "peak": peak, "rc": done.returncode,
                  "out": done.stdout[-300:], "err": done.stderr[-300:]}))
"""


def measured(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    """One run of ``argv``: wall seconds, peak RSS bytes, exit code, the output's tail."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *argv],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def sparse_gguf(path: Path) -> Path:
    """A 17 GB file that starts as a GGUF (magic, version 3) and is a hole after."""
    with path.open("wb") as file:
        file.write(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
        file.truncate(BIG_BYTES)
    return path


def sparse_text(path: Path) -> Path:
    """A 17 GB file whose first 8 KiB are a JSON array's opening (no NUL byte where the
    first bytes are checked), a hole after."""
    with path.open("wb") as file:
        file.write(b"[" + b" " * 8191)
        file.truncate(BIG_BYTES)
    return path


def bench_rows(count: int) -> list[dict[str, object]]:
    """``count`` llama-bench rows of the example model: its prompt and generation tests at
    ever other placements and thread counts (so each row is a point of its own)."""
    pp, tg = json.loads(ROWS.read_text())
    rows = []
    for index in range(count // 2):
        n, threads = index % 49, 1 + index // 49
        for row, tps in ((pp, 2000.0 - 20 * n + threads), (tg, 90.0 - n + threads / 100)):
            rows.append(
                row
                | {
                    "model_filename": str(EXAMPLE),
                    "n_cpu_moe": n,
                    "n_threads": threads,
                    "avg_ts": tps,
                    "stddev_ts": 1.0,
                    "samples_ts": [tps - 1, tps, tps + 1],
                }
            )
    return rows


def rows_file(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(rows, indent=2))
    return path


def capped_file(path: Path, rows: list[dict[str, object]], limit: int) -> tuple[Path, int]:
    """``rows`` repeated, as one ``-o jsonl`` file just under ``limit`` bytes; how many."""
    lines = [json.dumps(row) + "\n" for row in rows]
    count, size = 0, 0
    with path.open("w") as file:
        while size + len(lines[count % len(lines)]) <= limit:
            line = lines[count % len(lines)]
            file.write(line)
            size += len(line)
            count += 1
    return path, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from moetune.jobs.calibrate import MAX_TEXT_BYTES as cap

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = bench_rows(10_000)
        capped, capped_rows = capped_file(folder / "capped.jsonl", rows, cap)
        cases = [
            ("17 GB GGUF (sparse)", sparse_gguf(folder / "model.gguf"), "refused in 5 s, 400 MB"),
            ("17 GB text (sparse)", sparse_text(folder / "big.json"), "refused in 5 s, 400 MB"),
            ("10,000 llama-bench rows", rows_file(folder / "rows.json", rows), "15 s"),
            (f"{capped_rows:,} rows, {cap >> 20} MiB (the cap)", capped, "none"),
        ]
        base = statistics.median(
            float(measured([sys.executable, "-c", "pass"], dict(os.environ))["wall"])  # type: ignore[arg-type]
            for _ in range(args.repeats)
        )
        print(f"calibrate FILE as a fresh process, median of {args.repeats} runs")
        print(f"(python -c pass {base:.3f} s)")
        for label, path, target in cases:
            walls: list[float] = []
            peaks: list[int] = []
            last: dict[str, object] = {}
            for index in range(args.repeats):
                home = folder / f"home-{label[:6]}-{index}"
                env = {**os.environ, "MOETUNE_HOME": str(home), "MOETUNE_NO_MEASURE": "1"}
                last = measured([*MOETUNE, "calibrate", str(path)], env)
                walls.append(float(last["wall"]))  # type: ignore[arg-type]
                peaks.append(int(last["peak"]))  # type: ignore[call-overload]
            size = path.stat().st_size
            said = str(last["out"] or last["err"]).strip().splitlines()
            answer = f"exit {last['rc']}: {said[-1] if said else ''}"
            print(
                f"  {label:34s} {size / MB:>9,.0f} MB  {statistics.median(walls):6.2f} s "
                f"({min(walls):.2f}-{max(walls):.2f})  peak {max(peaks) / MB:5.0f} MB  "
                f"target: {target}"
            )
            print(f"      {answer[:150]}")


if __name__ == "__main__":
    main()
