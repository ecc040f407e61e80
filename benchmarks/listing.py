"""``moetune plan user/model`` over whole repositories on the local fake hub: whole-process
wall times, measured in one run against ``python -c pass``.

Three repositories are served by tests/support/fakehub.py (its pretend CDN answers the
ranged header reads):

- ``bench/Qwen3-235B-A22B-GGUF``: 20 quants (tests/support/factory.py ``SCHEMES``, IQ1_S to
  BF16) of a Qwen3-235B-A22B-shaped model (94 blocks, 128 experts, 151,936-token
  vocabulary), each a header-only file truncated to its full size (a sparse hole), so the
  tree's sizes are the quants' real sizes;
- ``bench/files-500-GGUF``: the same 20 quants among 500 files (model cards, imatrix and
  mmproj-like files, images: the files a busy repository keeps beside its quants);
- ``bench/tree-10000-GGUF``: 10,000 model files, 500 folders of the 20 quants (moetune
  plans more than ``jobs/quants.py:MAX_PLANNED`` by bisection over the sizes).

Each is planned for a 24 GiB GPU and 128 GiB of RAM, cold (an empty Hugging Face cache and
moetune home: the refs, the tree and every header it reads come from the fake hub) and warm
(the same caches again: no request at all). Targets (issue 22, on the development machine):
20 quants <= 5 s cold and <= 2 s warm, the 500-file repository <= 5 s, the 10,000-file tree
ends within 10 s.

    python benchmarks/listing.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.factory import QWEN3_235B_A22B, SCHEMES, write_header_only
from support.fakehub import FakeHub, fake_hub

ROOT = Path(__file__).resolve().parent.parent
MOETUNE = (sys.executable, "-m", "moetune")
PLAN = ("--vram", "24G", "--ram", "128G", "--json")
QUANTS = tuple(tag for tag in SCHEMES if tag != "F16")  # 20: BF16 is the 16-bit one
OTHERS = ("README.md", "imatrix_unsloth.dat", "mmproj-F16.gguf.md5", "images/figure.png")


def write_quants(folder: Path) -> dict[str, Path]:
    """The 20 quants, one header-only sparse file each: repository name -> file."""
    stem = QWEN3_235B_A22B.name
    folder.mkdir(parents=True, exist_ok=True)
    return {
        f"{stem}-{tag}.gguf": write_header_only(
            folder / f"{stem}-{tag}.gguf", shape=QWEN3_235B_A22B, quant=tag, sparse=True
        )
        for tag in QUANTS
    }


def serve(hub: FakeHub, quants: dict[str, Path], filler: Path) -> dict[str, str]:
    """The three repositories on ``hub``: label -> repository."""
    hub.add_repo("bench/Qwen3-235B-A22B-GGUF", quants)
    files = dict(quants)
    for i in range(500 - len(quants)):
        files[f"extra/{i:03d}-{OTHERS[i % len(OTHERS)]}"] = filler
    hub.add_repo("bench/files-500-GGUF", files)
    tree = {
        f"v{folder:03d}/{name}": path
        for folder in range(10_000 // len(quants))
        for name, path in quants.items()
    }
    hub.add_repo("bench/tree-10000-GGUF", tree)
    return {
        "20 quants": "bench/Qwen3-235B-A22B-GGUF",
        "500 files": "bench/files-500-GGUF",
        "10,000-file tree": "bench/tree-10000-GGUF",
    }


def timed(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, int]:
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1
    if done.returncode not in (0, 6):  # 6: no quant fits, still a finished listing
        sys.stderr.write(done.stderr.decode()[-800:])
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="per run, seconds")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "src" / "moetune"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        quants = write_quants(tmp / "quants")
        filler = tmp / "filler.txt"
        filler.write_text("not a model\n")
        with fake_hub() as hub:
            repos = serve(hub, quants, filler)
            env = {**os.environ, "MODEL_ENDPOINT": hub.endpoint}
            env.pop("HF_TOKEN", None)
            base: list[float] = []
            samples: dict[str, tuple[list[float], list[float], set[int]]] = {
                label: ([], [], set()) for label in repos
            }
            for _ in range(args.repeats):  # interleaved: the load of the moment hits all
                base.append(timed([sys.executable, "-c", "pass"], env, 10)[0])
                for label, repo in repos.items():
                    cold, warm, codes = samples[label]
                    home = tmp / "run"
                    shutil.rmtree(home, ignore_errors=True)
                    run_env = {**env, "HF_HOME": str(home / "hf"), "MOETUNE_HOME": str(home)}
                    argv = [*MOETUNE, "plan", repo, *PLAN]
                    seconds, code = timed(argv, run_env, args.timeout)
                    cold.append(seconds)
                    codes.add(code)
                    hub.reset()
                    seconds, code = timed(argv, run_env, args.timeout)
                    warm.append(seconds)
                    codes.add(code)
                    if hub.requests():
                        codes.add(-2)  # a warm run that asked the hub
    pass_s = statistics.median(base)
    print(f"whole-process wall time, median of {args.repeats} runs (python -c pass {pass_s:.3f} s)")
    targets = {"20 quants": (5.0, 2.0), "500 files": (5.0, None), "10,000-file tree": (10.0, None)}
    for label, (cold, warm, codes) in samples.items():
        cold_s, warm_s = statistics.median(cold), statistics.median(warm)
        goal_cold, goal_warm = targets[label]
        met = cold_s <= goal_cold and (goal_warm is None or warm_s <= goal_warm)
        notes = []
        if -1 in codes:
            notes.append(f"TIMED OUT at {args.timeout:.0f} s")
        if -2 in codes:
            notes.append("the warm run made requests")
        if codes - {0, 6, -1, -2}:
            notes.append(f"exit codes {sorted(codes - {-1, -2})}")
        goal = f"<= {goal_cold:.0f} s cold" + (f", <= {goal_warm:.0f} s warm" if goal_warm else "")
        print(
            f"  plan {label:17s} cold {cold_s:6.2f} s ({cold_s / pass_s:5.0f}x)  "
            f"warm {warm_s:6.2f} s ({warm_s / pass_s:5.0f}x)  target {goal}: "
            + ("met" if met and not notes else "MISSED")
            + (f"  [{'; '.join(notes)}]" if notes else "")
        )


if __name__ == "__main__":
    main()
