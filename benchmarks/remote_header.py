"""Remote headers: bytes fetched and round trips per shard, over the local fake hub.

Serves the example headers (examples/models/*.header.gguf) and a header-only Qwen3-30B-A3B
Q4_K_M with the full 151,936-token vocabulary (its data region a sparse hole, so the file
is its real ~17 GiB) from tests/support/fakehub.py, reads each with moetune.hub.remote_model in an
empty cache, and prints per file the bytes the pretend CDN sent, the ranged GETs, all HTTP
requests (refs, tree, the resolve redirect, the ranges), and the goal check: at most 8 MiB
and 4 ranged requests per shard. A second read of each must make no request at all.

    python benchmarks/remote_header.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.gguf.reader import read_header
from moetune.hub import ModelName, choose_quant, list_repo, remote_model

from support.factory import write_header_only
from support.fakehub import FakeHub, fake_hub

ROOT = Path(__file__).resolve().parent.parent
GOAL_BYTES = 8 << 20
GOAL_RANGES = 4


def measure(hub: FakeHub, repo: str) -> tuple[int, int, int, float, int]:
    hub.reset()
    start = time.perf_counter()
    listing = list_repo(ModelName(repo))
    model = remote_model(listing, choose_quant(listing, None))
    seconds = time.perf_counter() - start
    ranges = sum(1 for s in hub.requests("cdn", "GET") if s.range)
    fetched, requests = sum(hub.bytes_served.values()), len(hub.requests())
    hub.reset()
    remote_model(list_repo(ModelName(repo)), choose_quant(listing, None))
    assert model.tensors
    return fetched, ranges, requests, seconds, len(hub.requests())


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MOETUNE_HOME"] = str(Path(tmp) / "home")
        os.environ["HF_HOME"] = str(Path(tmp) / "hf")
        os.environ.pop("HF_TOKEN", None)
        big = write_header_only(Path(tmp) / "Qwen3-30B-A3B-Q4_K_M.gguf", sparse=True)
        files = {
            p.name.replace(".header", ""): p for p in (ROOT / "examples/models").glob("*.gguf")
        }
        files[big.name + " (151936 vocab)"] = big
        ok = True
        with fake_hub() as hub:
            os.environ["MODEL_ENDPOINT"] = hub.endpoint
            print(
                f"{'file':44} {'size':>9} {'header':>9} {'fetched':>9} {'ranges':>6} "
                f"{'requests':>8} {'ms':>6} {'warm':>4}"
            )
            for i, (label, path) in enumerate(sorted(files.items())):
                repo = f"bench/model-{i}"
                name = label.split(" ")[0]
                hub.add_repo(repo, {name: path})
                fetched, ranges, requests, seconds, warm = measure(hub, repo)
                header = read_header(path).data_offset
                good = fetched <= GOAL_BYTES and ranges <= GOAL_RANGES and warm == 0
                ok &= good
                print(
                    f"{label:44} {path.stat().st_size / 2**20:>8.1f}M "
                    f"{header / 2**20:>8.2f}M {fetched / 2**20:>8.2f}M {ranges:>6} "
                    f"{requests:>8} {seconds * 1000:>6.0f} {warm:>4}"
                    f"{'' if good else '  GOAL MISSED'}"
                )
        print(
            f"goal: <= {GOAL_BYTES >> 20} MiB and <= {GOAL_RANGES} ranged requests per shard, "
            f"0 requests warm: {'met' if ok else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
