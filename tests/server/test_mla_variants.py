"""MLA and DeepSeek-sparse-attention shapes beyond the architecture matrix's one per
architecture (tests/archfix_c.py): DeepSeek-V2-Lite (no Q compression), Kimi-K2 (384 experts),
DeepSeek-V3 routing (expert groups), and the DSA models at other settings (no flash attention,
an f16 cache, another ubatch, more experts on the CPU).

Each is loaded by llama-server with its offloaded blocks on a ggml-rpc-server device and
projected by llama-fit-params; moetune's estimate must match the matrix's bounds (weights to
0.01 MiB, KV within 1 %, compute within 10 % or 64 MiB) and, since these replays are exact
here, the compute buffers to the printed 0.01 MiB as well.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, parse_projection, total_mib
from moetune.units import MIB

from support.archfix_c import VARIANTS, write_deepseek32, write_glm_dsa
from support.factory import ModelFactory
from support.llama import bin_path, running_server

WRITERS = {"deepseek32": write_deepseek32, "glm-dsa": write_glm_dsa, **VARIANTS}


@dataclass(frozen=True)
class Case:
    model: str
    n_cpu_moe: int = 1
    cache: str = "q8_0"
    flash_attn: bool = True
    n_ubatch: int = 512
    n_ctx: int = 4096

    def flags(self, rpc: str) -> list[str]:
        return [
            "--rpc",
            rpc,
            "-ngl",
            "99",
            "--n-cpu-moe",
            str(self.n_cpu_moe),
            "-c",
            str(self.n_ctx),
            "-ctk",
            self.cache,
            "-ctv",
            self.cache,
            "-fa",
            "on" if self.flash_attn else "off",
            "-ub",
            str(self.n_ubatch),
        ]


CASES = [
    *(Case(name) for name in VARIANTS),
    Case("deepseek32", 3, "f16", n_ctx=8192),
    Case("deepseek32", 1, "f16", flash_attn=False),
    Case("deepseek32", 2, "q8_0", n_ubatch=256),
    Case("glm-dsa", 4, "f16", n_ctx=8192),
    Case("glm-dsa", 2, "f16", flash_attn=False),
]


def _predict(model: Path, case: Case, fit_params: bool = False) -> MemoryEstimate:
    settings = Settings(
        n_ctx=case.n_ctx,
        type_k=case.cache,
        type_v=case.cache,
        flash_attn=case.flash_attn,
        n_ubatch=case.n_ubatch,
        gpu_overhead_bytes=0,
        device_kind="rpc",
        n_seq=1 if fit_params else 4,
        all_outputs=fit_params,
    )
    return estimate(load_model_facts(model), Placement.with_n_cpu_moe(case.n_cpu_moe), settings)


def _case_id(case: Case) -> str:
    fa = "" if case.flash_attn else "-nofa"
    return f"{case.model}-N{case.n_cpu_moe}-{case.cache}-ub{case.n_ubatch}-c{case.n_ctx}{fa}"


def _printed(predicted_bytes: int, printed_mib: float) -> bool:
    return abs(predicted_bytes / MIB - printed_mib) <= 0.005 + 1e-9


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_llama_server(model_factory: ModelFactory, rpc: str, case: Case) -> None:
    model = model_factory.written(case.model, WRITERS[case.model])
    predicted = _predict(model, case)
    with running_server(model, *case.flags(rpc), "--fit", "off") as server:
        lines = parse_buffers(server.log_text())
    kv = total_mib(lines, "KV", "RPC0")
    shown = (
        predicted.gpu_weights_bytes / MIB,
        predicted.gpu_kv_bytes / MIB,
        predicted.gpu_compute_bytes / MIB,
        predicted.host_compute_bytes / MIB,
        [(b.device, b.kind, b.mib) for b in lines],
    )
    assert _printed(predicted.gpu_weights_bytes, total_mib(lines, "model", "RPC0")), shown
    # the DSA cache prints two rounded KV lines (MLA and indexer)
    assert abs(predicted.gpu_kv_bytes / MIB - kv) <= max(0.01 * kv, 0.01), shown
    assert _printed(predicted.gpu_compute_bytes, total_mib(lines, "compute", "RPC0")), shown
    assert _printed(predicted.host_compute_bytes, total_mib(lines, "compute", "CPU")), shown


@pytest.mark.parametrize("case", CASES[::2], ids=_case_id)
def test_matches_llama_fit_params(model_factory: ModelFactory, rpc: str, case: Case) -> None:
    model = model_factory.written(case.model, WRITERS[case.model])
    predicted = _predict(model, case, fit_params=True)
    argv = [
        str(bin_path("llama-fit-params")),
        "-m",
        str(model),
        *case.flags(rpc),
        "-np",
        "1",
        "-fitp",
        "on",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    device = parse_projection(done.stdout)["RPC0"]
    shown = (
        predicted.gpu_weights_bytes / MIB,
        predicted.gpu_kv_bytes / MIB,
        predicted.gpu_compute_bytes / MIB,
        device,
    )
    assert int(predicted.gpu_weights_bytes / MIB) == device.model_mib, shown
    assert int(predicted.gpu_kv_bytes / MIB) == device.context_mib, shown
    assert int(predicted.gpu_compute_bytes / MIB) == device.compute_mib, shown
