"""Launches to converge: moetune's calibrated search against the seeds' linear step-down.

For each fixture architecture, the real llama-server is launched once per N on a
ggml-rpc-server device (the "GPU") and its RPC0 buffers are read; then, over several targets,
three strategies are replayed on those measured figures:

- moetune: start at the planned N, calibrate with the first measurement, confirm N-1;
- linear step-down (the seed's method): start at N = block count, step down until over;
- full sweep: every N.

    python benchmarks/converge.py [--layers 8] [--ctx 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.core.planner import DeviceBudgets, plan_n_cpu_moe
from moetune.core.search import Attempt, Search, Split, best_attempt, tune
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.factory import MOE_ARCHS, write_model
from support.llama import rpc_server, running_server


def measure_all(model: Path, rpc: str, n_layers: int, ctx: int) -> list[int]:
    """RPC0 model+KV+RS+compute bytes for every --n-cpu-moe N."""
    figures = []
    for n in range(n_layers + 1):
        args = [
            "--rpc",
            rpc,
            "-ngl",
            "99",
            "-fa",
            "on",
            "-ctk",
            "q8_0",
            "-ctv",
            "q8_0",
            "-c",
            str(ctx),
            "--fit",
            "off",
            "--n-cpu-moe",
            str(n),
        ]
        with running_server(model, *args) as server:
            lines = parse_buffers(server.log_text())
        kinds = ("model", "KV", "RS", "compute")
        figures.append(round(sum(total_mib(lines, k, "RPC0") for k in kinds) * MIB))
    return figures


def moetune_launches(
    facts: ModelFacts, settings: Settings, figures: list[int], target: int
) -> tuple[int, int]:
    def predict(n: int) -> int:
        return estimate(facts, Placement.with_n_cpu_moe(n), settings).gpu_bytes

    search = Search.one(facts.n_layers, target, predict)
    start = (
        plan_n_cpu_moe(facts, DeviceBudgets.one(target, settings), settings).placement.n_cpu_moe
        or 0
    )

    def measure(n: int, split: Split) -> Attempt:
        status = "ok" if figures[n] <= target else "over"
        return Attempt(
            n_cpu_moe=n, predicted_bytes=predict(n), measured_bytes=figures[n], status=status
        )

    attempts = tune(search, start, measure)
    best = best_attempt(attempts)
    return len(attempts), -1 if best is None else best.n_cpu_moe


def linear_launches(figures: list[int], target: int) -> int:
    """Seed method: N = block count, then N-1, ... until the next one is over the target."""
    launches = 0
    for n in range(len(figures) - 1, -1, -1):
        launches += 1
        if figures[n] > target:
            break
    return launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--ctx", type=int, default=1024)
    args = parser.parse_args()
    settings = Settings(
        n_ctx=args.ctx, type_k="q8_0", type_v="q8_0", gpu_overhead_bytes=0, device_kind="rpc"
    )
    ours: list[int] = []
    linear: list[int] = []
    with tempfile.TemporaryDirectory() as tmp, rpc_server() as rpc:
        for arch in MOE_ARCHS:
            model = write_model(Path(tmp) / f"{arch}.gguf", arch, n_layers=args.layers)
            facts = load_model_facts(model)
            figures = measure_all(model, rpc, args.layers, args.ctx)
            for n in range(1, args.layers):
                target = (figures[n] + figures[n - 1]) // 2
                truth = min(i for i, f in enumerate(figures) if f <= target)
                launches, found = moetune_launches(facts, settings, figures, target)
                assert found == truth, (arch, n, found, truth)
                ours.append(launches)
                linear.append(linear_launches(figures, target))
            print(f"{arch:10s} measured MiB per N: " + " ".join(f"{f / MIB:.1f}" for f in figures))
    sweep = args.layers + 1
    print(f"\n{len(ours)} cases ({len(MOE_ARCHS)} architectures x {args.layers - 1} targets)")
    print(f"moetune      launches: mean {statistics.mean(ours):.2f}, max {max(ours)}")
    print(f"linear step  launches: mean {statistics.mean(linear):.2f}, max {max(linear)}")
    print(f"full sweep   launches: {sweep}")
    print(f"ratio linear/moetune (mean): {statistics.mean(linear) / statistics.mean(ours):.2f}x")


if __name__ == "__main__":
    main()
