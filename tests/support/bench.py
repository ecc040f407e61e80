"""Bench results built by hand: a sample, one configuration's row at a depth, a whole result."""

from __future__ import annotations

from moetune.records import results as res
from moetune.records.speed import SpeedMachine
from moetune.units import MIB

from support.helpers import EXAMPLE_QWEN


def sample(decode: float, prefill: float = 1000.0, ttft: float | None = 0.1) -> res.Sample:
    return res.Sample(
        prompt_n=64,
        predicted_n=16,
        ttft_s=ttft,
        prompt_ms=64 / prefill * 1000,
        predicted_ms=16 / decode * 1000 if decode else 0.0,
        prefill_tps=prefill,
        decode_tps=decode,
        client_prefill_tps=64 / ttft if ttft else None,
        client_decode_tps=decode * 0.98,
        wall_s=1.0,
        stop_type="length",
    )


def row(
    config: str, depth: int, decodes: list[float], prefills: list[float] | None = None
) -> res.DepthResult:
    prefills = prefills or [1000.0] * len(decodes)
    samples = [sample(d, p) for d, p in zip(decodes, prefills, strict=True)]
    return res.summarize(config, depth, samples, 30 * MIB)


def bench_result(**changes: object) -> res.BenchResult:
    results = [
        row("plan", 64, [40.0, 42.0]),
        row("cpu-moe", 64, [20.0, 22.0]),
        row("plan", 256, [30.0, 31.0]),
        row("cpu-moe", 256, [29.0, 30.5]),
    ]
    runs = [
        res.ConfigRun(
            name=n,
            status="ok",
            description=d,
            args=["-m", "m.gguf"],
            predicted_bytes=29 * MIB,
            peak_device_bytes=30 * MIB,
            load_s=1.5,
        )
        for n, d in (("plan", "--n-cpu-moe 2"), ("cpu-moe", "-cmoe"))
    ]
    runs.append(
        res.ConfigRun(
            name="gpu-only",
            status="skipped",
            description="-ngl 99",
            args=[],
            predicted_bytes=None,
            peak_device_bytes=None,
            load_s=None,
            message="does not fit",
        )
    )
    base = res.BenchResult(
        created="2025-01-02T03:04:05+00:00",
        moetune_version="0.1.0",
        model="/m/q.gguf",
        server_url=None,
        endpoint="chat",
        n_ctx=1024,
        n_predict=16,
        repeats=2,
        depths=[64, 256],
        device="RPC0[127.0.0.1:5]",
        device_total_bytes=24 * 1024 * MIB,
        budget_bytes=30 * MIB,
        probe="llama.cpp log (RPC0 buffers)",
        probe_includes_overhead=False,
        shortest_prompt=41,
        configs=runs,
        results=results,
        verdicts=res.verdicts(results),
    )
    return base.model_copy(update=changes)


# --- a bench the speed model can forecast ---------------------------------------------------

SPEED_MACHINE = SpeedMachine(cpu_info="Test CPU", gpu_info="Test GPU", devices=["CUDA0"])
PLACEMENTS = {  # name: llama-server's placement flags
    "plan": ["--n-cpu-moe", "20"],
    "cpu-moe": ["-cmoe"],
    "layers": ["--n-cpu-moe", "36"],
}


def _speed_sample(prompt_n: int, decode: float, prefill: float) -> res.Sample:
    return res.Sample(
        prompt_n=prompt_n,
        predicted_n=32,
        ttft_s=prompt_n / prefill,
        prompt_ms=prompt_n / prefill * 1000,
        predicted_ms=32 / decode * 1000,
        prefill_tps=prefill,
        decode_tps=decode,
        client_prefill_tps=None,
        client_decode_tps=None,
        wall_s=1.0,
        stop_type="length",
    )


def speed_bench(
    speeds: dict[str, dict[int, tuple[float, float]]], **changes: object
) -> res.BenchResult:
    """A bench of EXAMPLE_QWEN at ``PLACEMENTS`` (another name: ``--fit on``): per
    configuration, per depth, (decode, prefill) tok/s."""
    rows = [
        res.summarize(name, depth, [_speed_sample(depth, decode, prefill)] * 2, None)
        for name, by_depth in speeds.items()
        for depth, (decode, prefill) in by_depth.items()
    ]
    configs = [
        res.ConfigRun(
            name=name,
            status="ok",
            description=" ".join(PLACEMENTS.get(name, ["--fit", "on"])),
            args=["-m", str(EXAMPLE_QWEN), "-c", "8192", *PLACEMENTS.get(name, ["--fit", "on"])],
            predicted_bytes=None,
            peak_device_bytes=None,
            load_s=1.0,
        )
        for name in speeds
    ]
    result = res.BenchResult(
        created="2026-01-02T03:04:05+00:00",
        moetune_version="0.1.0",
        model=str(EXAMPLE_QWEN),
        server_url=None,
        endpoint="completion",
        n_ctx=8192,
        n_predict=32,
        repeats=2,
        depths=sorted({d for s in speeds.values() for d in s}),
        device="CUDA0",
        device_total_bytes=24 * 1024 * MIB,
        budget_bytes=20 * 1024 * MIB,
        probe=None,
        probe_includes_overhead=False,
        configs=configs,
        results=rows,
        verdicts=res.verdicts(rows),
        machine=SPEED_MACHINE,
    )
    return result.model_copy(update=changes)


SPEEDS = {
    "plan": {512: (40.0, 900.0), 4096: (36.0, 800.0)},
    "cpu-moe": {512: (22.0, 400.0), 4096: (20.0, 380.0)},
    "layers": {512: (30.0, 600.0), 4096: (27.0, 560.0)},
}
