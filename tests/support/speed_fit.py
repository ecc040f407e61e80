"""What the speed tests share: a machine's figures and the example models' layouts at an
``--n-cpu-moe`` and a ubatch (the points they fit are made from these), llama-bench rows that
agree, and what benchmarks/speed_forecast.py prints."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from typing import Any

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures, SpeedLayout, placement_layout
from moetune.gguf.split import read_model
from moetune.hardware.host import cpu_model

from support.helpers import EXAMPLES, ROOT

QWEN = "Qwen3-30B-A3B-Q4_K_M.header.gguf"  # 48 blocks
FIGURES = MachineFigures(
    devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=100e12),),
    ram_bytes_per_s=60e9,
    cpu_flops_per_s=1e12,
)


@cache
def example_facts(name: str = QWEN) -> ModelFacts:
    return facts_from_gguf(read_model(str(EXAMPLES / name)))


def example_layout(n: int, ubatch: int, name: str = QWEN) -> SpeedLayout:
    """The example model ``name`` with the experts of ``n`` blocks on the CPU, one device."""
    settings = Settings(n_ctx=8192, n_ubatch=ubatch)
    placement = Placement.with_n_cpu_moe(n)
    return placement_layout(example_facts(name), placement, settings, (DeviceSpec(),))


SPEED_FORECAST = ROOT / "benchmarks" / "speed_forecast.py"
BENCH_ROWS_JSON = ROOT / "tests" / "data" / "llama_bench" / "readme_rtx4080_qwen2.5_7b.json"


@cache
def speed_forecast_lines() -> tuple[str, ...]:
    """What ``benchmarks/speed_forecast.py --no-rig`` prints, run once for every test that
    reads it."""
    done = subprocess.run(
        [sys.executable, str(SPEED_FORECAST), "--no-rig"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return tuple(done.stdout.splitlines())


def good_rows() -> list[dict[str, Any]]:
    """llama-bench rows that agree: a prompt and a generation test at four placements of the
    Qwen3 example model, on this CPU (plan reads the points measured on it)."""
    pp, tg = json.loads(BENCH_ROWS_JSON.read_text())
    cpu = cpu_model()
    rows = []
    for n in (0, 12, 24, 36):
        for row, tps in ((pp, 2000.0 - 20 * n), (tg, 90.0 - n)):
            rows.append(
                row
                | {
                    "model_filename": str(EXAMPLES / QWEN),
                    "cpu_info": cpu,
                    "n_cpu_moe": n,
                    "avg_ts": tps,
                    "stddev_ts": 1.0,
                    "samples_ts": [tps, tps],
                }
            )
    return rows
