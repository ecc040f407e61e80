"""Write a tiny Qwen3-MoE model with real (random) weights: 8 blocks of 8 experts, 27 MiB,
that the real llama-server loads and serves. For trying `moetune run` and `bench` without a
GPU, against a ``ggml-rpc-server`` (README, "Try it without a GPU").

It is the test suite's model factory (tests/support/factory.py, one implementation), so it needs the
test environment: ``bash scripts/setup-test-env.sh``.

    .venv/bin/python examples/models/make_tiny.py /tmp/tiny-moe.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.factory import write_model


def main() -> None:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path, help="where to write the .gguf file")
    parser.add_argument("--blocks", type=int, default=8, help="number of blocks (default: 8)")
    args = parser.parse_args()
    path = write_model(args.path, "qwen3moe", n_layers=args.blocks)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
