"""How soon Ctrl-C is acknowledged, against how long stopping llama-server takes.

Starts ``moetune run`` of a tiny generated model against a ``ggml-rpc-server`` on 127.0.0.1,
waits until llama-server is loading or serving, sends SIGINT, and times (from the signal) the
first byte of moetune's "interrupted, stopping llama-server..." line and moetune's exit.
Median and range over ``--repeats`` runs. Target: acknowledged within 0.5 s, however long
the stop takes (the exit time is the baseline it is compared with).

    python benchmarks/interrupt.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.factory import write_model
from support.helpers import MOETUNE, default_signals, moetune_env
from support.llama import rpc_server

ACK = b"interrupted, stopping llama-server"
TARGET_S = 0.5


def once(model: Path, rpc: str, home: Path, delay_s: float) -> tuple[float, float]:
    """(seconds to the acknowledgement, seconds to the exit) of one interrupted run."""
    argv = [
        *MOETUNE,
        "run",
        str(model),
        "--target-vram",
        "40M",
        "--ctx",
        "8192",
        "--no-save",
        "--",
        "--rpc",
        rpc,
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=moetune_env(home),
        preexec_fn=default_signals,  # noqa: PLW1509
    )
    assert proc.stderr is not None
    parent = psutil.Process(proc.pid)
    while not any("llama-server" in c.name() for c in parent.children(recursive=True)):
        if proc.poll() is not None:
            raise SystemExit(f"moetune exited first: {proc.stderr.read().decode()[-500:]}")
        time.sleep(0.02)
    time.sleep(delay_s)
    start = time.perf_counter()
    os.kill(proc.pid, signal.SIGINT)
    seen, ack = b"", None
    while ack is None:
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        chunk = os.read(proc.stderr.fileno(), 4096) if ready else b""
        if not chunk:
            break
        seen += chunk
        if ACK in seen:
            ack = time.perf_counter() - start
    proc.wait(timeout=60)
    done = time.perf_counter() - start
    if ack is None:
        raise SystemExit(f"no acknowledgement: {seen.decode()[-500:]}")
    return ack, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, rpc_server() as rpc:
        model = write_model(Path(tmp) / "tiny.gguf", "glm4moe", n_layers=8)
        runs = [
            once(model, rpc, Path(tmp) / "home", 0.1 + 0.3 * (i % 3)) for i in range(args.repeats)
        ]
    acks, exits = [a for a, _ in runs], [d for _, d in runs]

    def show(label: str, samples: list[float]) -> str:
        return (
            f"  {label:34s} {statistics.median(samples):6.3f} s "
            f"({min(samples):.3f}-{max(samples):.3f})"
        )

    print(f"SIGINT during `moetune run`, median (min-max) of {args.repeats} runs")
    print(show("acknowledged", acks))
    print(show("exited (llama-server stopped)", exits))
    ratio = statistics.median(acks) / statistics.median(exits)
    verdict = "met" if max(acks) <= TARGET_S else "MISSED"
    print(f"  acknowledgement / exit: {ratio:.3f}; target <= {TARGET_S} s: {verdict}")


if __name__ == "__main__":
    main()
