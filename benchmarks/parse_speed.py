"""Header parse speed: moetune's header-only reader against gguf.GGUFReader, in one run.

Writes a header-only Qwen3-30B-A3B Q4_K_M file (151,936 tokens, 151,387 merges, 579 tensor
infos; the data region a sparse hole so that GGUFReader can map it), then times both readers
on it and prints the medians and their ratio.

    python benchmarks/parse_speed.py [--repeats 7] [--reference-repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.gguf import read_model
from moetune.jobs.loader import load_model_facts

from support.factory import write_header_only


def median_seconds(func: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--reference-repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_header_only(Path(tmp) / "Qwen3-30B-A3B-Q4_K_M.gguf", sparse=True)
        header = read_model(path)
        print(f"file: {len(header.tensors)} tensors, header {header.shards[0].data_offset:,} B")
        load_model_facts(path)  # warm the page cache and imports before timing
        ours, _ = median_seconds(lambda: read_model(path), args.repeats)
        facts, _ = median_seconds(lambda: load_model_facts(path), args.repeats)
        reference, samples = median_seconds(lambda: gguf.GGUFReader(path), args.reference_repeats)
    print(f"moetune reader       median {ours:.4f} s  (x{args.repeats})")
    print(f"moetune + ModelFacts median {facts:.4f} s  (x{args.repeats})")
    print(
        f"gguf.GGUFReader      median {reference:.4f} s  (x{args.reference_repeats}: "
        + ", ".join(f"{s:.2f}" for s in samples)
        + ")"
    )
    print(f"ratio GGUFReader / moetune reader: {reference / ours:.0f}x")


if __name__ == "__main__":
    main()
