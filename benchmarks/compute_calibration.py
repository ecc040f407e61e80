"""Calibrate moetune.core.compute against the compute buffers llama.cpp itself reports.

Four sources, each compared with ``estimate_compute`` for the same settings:

1. llama-server (``-lv 4``) on tiny fixtures of every test architecture, in three sizes, with
   ggml-rpc-server as the device: ubatch x context x flash attention x placement (all on the
   device, ``--n-cpu-moe 2``, ``-ngl`` one short of all) plus quantized caches; the
   ``sched_reserve: RPC0/CPU compute buffer size`` lines (printed to 0.01 MiB).
2. llama-fit-params ``-fitp on`` on the sparse header-only Qwen3-30B-A3B Q4_K_M (a real-size
   model the dry run never reads): integer MiB (floored) per device, for the same grid and
   placements plus the output layer on the CPU.  Its context has one sequence and outputs
   every token (``n_seq=1, n_outputs=None``), unlike llama-server.
3. The public CUDA data point of tools/fit-params/README.md (build 6895, RTX 4090):
   Qwen3-30B-A3B F16, ctx 4096, experts of blocks 14-47 and the output layer on the CPU:
   CUDA0 compute 898 MiB, Host 12 MiB.
4. llama-server of the llama.cpp build (its Vulkan backend) on Mesa's lavapipe as
   Vulkan0, a backend that offloads ops on CPU weights as CUDA does: tiny fixtures of every
   test architecture, ubatch x context x flash attention x placement; the
   ``Vulkan0/CPU compute buffer size`` lines. Skipped (and said) where that build is absent.

Prints every case and the max/mean absolute and relative error per device kind.

    python benchmarks/compute_calibration.py [--quick] [--skip-server] [--skip-fit-params]
        [--skip-vulkan]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.core.compute.estimate import estimate_compute
from moetune.core.facts import ModelFacts
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers
from moetune.units import MIB

from support.factory import ARCHS, write_header_only, write_model
from support.llama import bin_path, rpc_server, running_server
from support.vulkan import DEVICE, VISIBLE, have_vulkan, vulkan_tool

SIZES: dict[str, dict[str, int]] = {
    "small": {},
    "e512k4": {"n_embd": 512, "n_experts": 32, "n_experts_used": 4, "n_layers": 6},
    "e1024k8": {"n_embd": 1024, "n_experts": 16, "n_experts_used": 8},
}
UBATCHES = (128, 512, 2048)
CONTEXTS = (512, 4096, 16384)


@dataclass
class Case:
    """One configuration: what llama.cpp printed and what moetune predicts (bytes)."""

    source: str
    label: str
    measured: dict[str, float]  # "device"/"host" -> MiB as printed
    predicted: dict[str, int] = field(default_factory=dict)
    floored: bool = False  # llama-fit-params prints floor(MiB)

    def error_mib(self, kind: str) -> float:
        pred = self.predicted[kind] / MIB
        if self.floored:
            pred = float(int(pred))
        return pred - self.measured[kind]


def _server_args(ub: int, ctx: int, fa: bool, extra: list[str]) -> list[str]:
    fa_flag = "on" if fa else "off"
    return [
        "--fit",
        "off",
        "-c",
        str(ctx),
        "-ub",
        str(ub),
        "-b",
        str(max(ub, 2048)),
        "-fa",
        fa_flag,
        *extra,
    ]


def _placements(n_layers: int) -> list[tuple[str, list[str], dict[str, Any]]]:
    return [
        ("all", ["-ngl", "99"], {}),
        ("ncmoe2", ["-ngl", "99", "--n-cpu-moe", "2"], {"cpu_expert_layers": 2}),
        (f"ngl{n_layers}", ["-ngl", str(n_layers)], {"layers_on_device": n_layers - 1}),
    ]


def _measure(model: Path, args: list[str], device: str, binary: Path | None) -> dict[str, float]:
    """The compute buffers llama-server prints: ``device``'s (a prefix) and the host's."""
    with running_server(model, *args, binary=binary) as server:
        lines = parse_buffers(server.log_text())
    out: dict[str, float] = {}
    for line in lines:
        if line.kind == "compute":
            out["device" if line.device.startswith(device) else "host"] = line.mib
    out.setdefault("device", 0.0)
    return out


def _server_measure(model: Path, endpoint: str, args: list[str]) -> dict[str, float]:
    return _measure(model, ["--rpc", endpoint, *args], "RPC", None)


def server_cases(root: Path, endpoint: str, quick: bool) -> Iterator[Case]:
    """Source 1: llama-server on the RPC device."""
    sizes = ["small", "e1024k8"] if quick else list(SIZES)
    for arch, size in itertools.product(ARCHS, sizes):
        kwargs: dict[str, Any] = dict(SIZES[size])
        path = write_model(root / f"{arch}-{size}.gguf", arch, **kwargs)
        facts = load_model_facts(path)
        yield from _server_grid(facts, path, endpoint, f"{arch}/{size}", quick)


def _server_grid(
    facts: ModelFacts, path: Path, endpoint: str, name: str, quick: bool
) -> Iterator[Case]:
    ubs, ctxs = ((128, 2048), (512, 16384)) if quick else (UBATCHES, CONTEXTS)
    for (label, flags, kw), ub, ctx, fa in itertools.product(
        _placements(facts.n_layers - 1), ubs, ctxs, (True, False)
    ):
        case = Case("server", f"{name} {label} ub={ub} ctx={ctx} fa={int(fa)}", {})
        case.measured = _server_measure(path, endpoint, _server_args(ub, ctx, fa, flags))
        estimate = estimate_compute(
            facts, n_ctx=ctx, n_ubatch=ub, flash_attn=fa, device_kind="rpc", **kw
        )
        case.predicted = {"device": estimate.device_bytes, "host": estimate.host_bytes}
        yield case
    for cache in ("q8_0", "q4_0"):
        flags = ["-ngl", "99", "-ctk", cache, "-ctv", cache]
        if facts.architecture == "deepseek2" and cache == "q4_0":
            continue  # llama.cpp rejects it: MLA's V view of a q4_0 K row
        case = Case("server", f"{name} kv={cache} ub=512 ctx=4096 fa=1", {})
        case.measured = _server_measure(path, endpoint, _server_args(512, 4096, True, flags))
        estimate = estimate_compute(
            facts, n_ctx=4096, type_k=cache, type_v=cache, device_kind="rpc"
        )
        case.predicted = {"device": estimate.device_bytes, "host": estimate.host_bytes}
        yield case


def vulkan_cases(root: Path, quick: bool) -> Iterator[Case]:
    """Source 4: llama-server of the Vulkan build on lavapipe (Vulkan0), the smallest fixture
    of each architecture: op offload's copies of the CPU experts land in Vulkan0's buffer."""
    if not have_vulkan():
        print("vulkan: llama.cpp was built without Vulkan (scripts/setup-test-env.sh); skipped")
        return
    os.environ.update(VISIBLE)
    ubs, ctxs = ((32, 2048), (4096,)) if quick else ((16, 32, *UBATCHES), CONTEXTS)
    for arch in ARCHS:
        path = write_model(root / f"{arch}-vk.gguf", arch)
        facts = load_model_facts(path)
        placements = _placements(facts.n_layers - 1)[:2]
        for (label, flags, kw), ub, ctx, fa in itertools.product(
            placements, ubs, ctxs, (True, False)
        ):
            case = Case("vulkan", f"{arch} {label} ub={ub} ctx={ctx} fa={int(fa)}", {})
            args = _server_args(ub, ctx, fa, flags)
            case.measured = _measure(path, args, DEVICE, vulkan_tool("llama-server"))
            estimate = estimate_compute(
                facts, n_ctx=ctx, n_ubatch=ub, flash_attn=fa, device_kind="vulkan", **kw
            )
            case.predicted = {"device": estimate.device_bytes, "host": estimate.host_bytes}
            yield case


def _fit_params(path: Path, endpoint: str, args: list[str]) -> dict[str, float]:
    argv = [str(bin_path("llama-fit-params")), "-m", str(path), "--rpc", endpoint, *args]
    done = subprocess.run([*argv, "-fitp", "on"], capture_output=True, text=True, check=True)
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line}
    device = next(v for k, v in rows.items() if k.startswith("RPC"))
    return {"device": float(device[2]), "host": float(rows["Host"][2])}


def fit_params_cases(root: Path, endpoint: str, quick: bool) -> Iterator[Case]:
    """Source 2: llama-fit-params on a real-size header-only model."""
    path = write_header_only(root / "Qwen3-30B-A3B-Q4_K_M.gguf", sparse=True)
    facts = load_model_facts(path)
    placements = [
        *_placements(30),
        ("out-cpu", ["-ngl", "99", "-ot", r"^output\.weight=CPU"], {"output_on_device": False}),
    ]
    ubs, ctxs = ((128, 2048), (512, 16384)) if quick else (UBATCHES, CONTEXTS)
    for (label, flags, kw), ub, ctx, fa in itertools.product(placements, ubs, ctxs, (True, False)):
        case = Case("fit-params", f"Qwen3-30B-A3B {label} ub={ub} ctx={ctx} fa={int(fa)}", {})
        case.floored = True
        case.measured = _fit_params(path, endpoint, _server_args(ub, ctx, fa, flags)[2:])
        estimate = estimate_compute(
            facts,
            n_ctx=ctx,
            n_ubatch=ub,
            flash_attn=fa,
            device_kind="rpc",
            n_seq=1,
            n_outputs=None,
            **kw,
        )
        case.predicted = {"device": estimate.device_bytes, "host": estimate.host_bytes}
        yield case


def cuda_case(root: Path) -> Iterator[Case]:
    """Source 3: the public data point, with build 6895's server semantics (every token of
    the ubatch is an output, so the 594 MiB output matmul was op-offloaded to CUDA)."""
    facts = load_model_facts(write_header_only(root / "Qwen3-30B-A3B-F16.gguf", quant="F16"))
    settings: dict[str, Any] = {
        "n_ctx": 4096,
        "output_on_device": False,
        "cpu_expert_blocks": range(14, 48),
        "device_kind": "cuda",
    }
    case = Case(
        "cuda",
        "Qwen3-30B-A3B F16 ctx=4096 ub=512 experts 14-47+output on CPU",
        {"device": 898.0, "host": 12.0},
    )
    old = estimate_compute(facts, n_seq=1, n_outputs=None, **settings)
    case.predicted = {"device": old.device_bytes, "host": old.host_bytes}
    yield case
    now = estimate_compute(facts, **settings)
    print(
        f"  (same placement, llama-server of this build, n_outputs=4: CUDA0 "
        f"{now.device_bytes / MIB:.2f} MiB, host {now.host_bytes / MIB:.2f} MiB)"
    )


def report(cases: list[Case]) -> None:
    """Per source and buffer: max and mean absolute (MiB) and relative error."""
    print(
        f"\n{'source':12} {'buffer':7} {'n':>4} {'max |err| MiB':>14} {'mean |err| MiB':>15}"
        f" {'max rel':>8} {'mean rel':>9}"
    )
    for source in dict.fromkeys(c.source for c in cases):
        for kind in ("device", "host"):
            rows = [c for c in cases if c.source == source]
            abs_err = [abs(c.error_mib(kind)) for c in rows]
            rel = [abs(c.error_mib(kind)) / max(c.measured[kind], 0.01) for c in rows]
            mean_abs, mean_rel = statistics.fmean(abs_err), statistics.fmean(rel)
            print(
                f"{source:12} {kind:7} {len(rows):4} {max(abs_err):14.3f} "
                f"{mean_abs:15.4f} {max(rel):8.2%} {mean_rel:9.3%}"
            )


def _print_case(case: Case) -> None:
    dev, host = case.predicted["device"] / MIB, case.predicted["host"] / MIB
    print(
        f"{case.source:10} {case.label:52} device {case.measured['device']:9.2f} pred {dev:9.2f}"
        f" | host {case.measured['host']:8.2f} pred {host:8.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid (4 min on 2 cores)")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--skip-fit-params", action="store_true")
    parser.add_argument("--skip-vulkan", action="store_true")
    args = parser.parse_args()
    cases: list[Case] = []
    with tempfile.TemporaryDirectory() as tmp, rpc_server() as endpoint:
        root = Path(tmp)
        sources = [cuda_case(root)]
        if not args.skip_server:
            sources.append(server_cases(root, endpoint, args.quick))
        if not args.skip_fit_params:
            sources.append(fit_params_cases(root, endpoint, args.quick))
        if not args.skip_vulkan:
            sources.append(vulkan_cases(root, args.quick))
        for case in itertools.chain(*sources):
            _print_case(case)
            cases.append(case)
    report(cases)


if __name__ == "__main__":
    main()
