"""moetune's plan against llama.cpp's own ``--fit`` on the same per-device budgets.

Two or three ``ggml-rpc-server`` processes on 127.0.0.1 are the devices. For each case
(a real-shaped example header made loadable: its metadata and tensor infos, a placeholder
vocabulary, the data as a hole), ``llama-fit-params --fit on --fit-target M0,M1`` prints the
arguments ``--fit`` chooses (the margins are each device's free memory minus its budget, as
``--fit`` keeps a margin of free memory); moetune plans for the same budgets (at the dry
run's own semantics: one sequence, logits for the whole batch, no runtime overhead). Both
commands are then projected by ``llama-fit-params -fitp on``, llama.cpp's own dry run, and
the script prints, per case, the expert bytes each keeps on the devices and whether each
device stays within its budget. The target: moetune keeps at least as many expert bytes on
the devices as ``--fit``, and never exceeds a budget.

    python benchmarks/multidevice.py
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.facts import ModelFacts
from moetune.core.placement import CPU, Override, Placement, split_weights
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.settings import Settings
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import Projection, parse_projection
from moetune.units import GIB

from support.factory import loadable_copy
from support.llama import bin_path, rpc_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"


@dataclass(frozen=True)
class Case:
    example: str
    n_ctx: int
    budgets_gib: tuple[float, ...]


CASES = [
    Case("Qwen3-30B-A3B-Q4_K_M", 32768, (12, 8)),  # measured: --fit left RPC0 over its target here
    Case("Qwen3-30B-A3B-Q4_K_M", 32768, (16, 6)),
    Case("Qwen3-30B-A3B-Q4_K_M", 16384, (6, 5, 4)),
    Case("gpt-oss-120b-MXFP4", 32768, (22, 22)),
    Case("gpt-oss-120b-MXFP4", 32768, (20, 12, 12)),
]
COMMON = ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]


def fit_params(model: Path, args: Sequence[str]) -> str:
    argv = [str(bin_path("llama-fit-params")), "-m", str(model), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-fit-params failed: {done.stderr[-800:]}")
    return done.stdout


def free_mib(endpoints: Sequence[str]) -> list[int]:
    argv = [str(bin_path("llama-server")), "--rpc", ",".join(endpoints), "--list-devices"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    return [
        int(line.split("(")[1].split(",")[1].split()[0])
        for line in out.splitlines()
        if line.strip().startswith("RPC")
    ]


def fit_choice(model: Path, case: Case, endpoints: Sequence[str]) -> list[str]:
    """The arguments llama.cpp's --fit chooses for the budgets (its margins of free memory)."""
    margins = [
        max(0, free - round(b * 1024))
        for free, b in zip(free_mib(endpoints), case.budgets_gib, strict=True)
    ]
    args = [
        "--rpc",
        ",".join(endpoints),
        "-c",
        str(case.n_ctx),
        *COMMON,
        "--fit",
        "on",
        "--fit-target",
        ",".join(map(str, margins)),
    ]
    return shlex.split(fit_params(model, args))


def placement_of(args: Sequence[str], bufts: Sequence[str]) -> Placement:
    """-ngl, -ts and -ot of a command as a moetune placement."""
    ngl, rules = 999, []
    split: tuple[float, ...] = ()
    for flag, value in zip(args, [*args[1:], ""], strict=True):
        if flag == "-ngl":
            ngl = int(value)
        elif flag == "-ts":
            split = tuple(float(v) for v in value.split(","))
        elif flag in ("-ot", "--override-tensor"):
            for rule in value.split(","):
                pattern, buft = rule.rsplit("=", 1)
                rules.append(Override(pattern, CPU if buft == "CPU" else bufts.index(buft)))
    return Placement(ngl, tuple(rules), tensor_split=split)


def moetune_command(
    facts: ModelFacts, model: Path, case: Case, endpoints: Sequence[str]
) -> list[str]:
    devices = tuple(
        DeviceSpec(
            name=f"RPC{i}", buft=rpc_buft(ep), kind="rpc", overhead_bytes=0, total_bytes=24 * GIB
        )
        for i, ep in enumerate(endpoints)
    )
    settings = Settings(
        n_ctx=case.n_ctx,
        type_k="q8_0",
        type_v="q8_0",
        n_seq=1,
        all_outputs=True,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
    request = PlanRequest(
        model_path=str(model),
        settings=settings,
        devices=devices,
        target_vram=tuple(round(b * GIB) for b in case.budgets_gib),
        device_args=("--rpc", ",".join(endpoints)),
    )
    result = make_plan(facts, request)
    best = result.alternative or result.recommended
    return best.command[1:]


def project(model: Path, args: Sequence[str]) -> dict[str, Projection]:
    """llama.cpp's dry run of a command's arguments (``-m`` and ``--fit`` taken out)."""
    rest: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-m", "--fit"):
            skip = True
        else:
            rest.append(arg)
    return parse_projection(fit_params(model, [*rest, "-fitp", "on"]))


Report = tuple[int, bool, str]  # expert bytes on the devices, all within budget, the text


def _report(
    label: str,
    facts: ModelFacts,
    model: Path,
    args: Sequence[str],
    *,
    endpoints: Sequence[str],
    budgets: Sequence[float],
) -> Report:
    bufts = [rpc_buft(ep) for ep in endpoints]
    placement = placement_of(args, bufts)
    experts = split_weights(facts, placement, len(endpoints)).gpu_expert_bytes
    projected = project(model, args)
    within = []
    cells = []
    for i, budget in enumerate(budgets):
        row = projected[f"RPC{i}"]
        ok = row.total_mib <= budget * 1024
        within.append(ok)
        cells.append(
            f"RPC{i} {row.total_mib:,}/{round(budget * 1024):,} MiB{'' if ok else ' OVER'}"
        )
    line = (
        f"  {label:8s} experts on devices {experts / GIB:6.2f} GiB | "
        f"{'; '.join(cells)}\n           {' '.join(args)}"
    )
    return experts, all(within), line


def main() -> None:
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        trio = [stack.enter_context(rpc_server()) for _ in range(3)]
        print("moetune's plan vs llama.cpp's --fit, per device, by llama.cpp's own dry run")
        met = True
        for case in CASES:
            model = loadable_copy(
                EXAMPLES / f"{case.example}.header.gguf", Path(tmp) / f"{case.example}.gguf"
            )
            facts = load_model_facts(model)
            endpoints = trio[: len(case.budgets_gib)]
            print(
                f"\n{case.example}, ctx {case.n_ctx}, budgets "
                f"{', '.join(f'{b:g} GiB' for b in case.budgets_gib)}"
            )
            fit_args = ["--rpc", ",".join(endpoints), *fit_choice(model, case, endpoints), *COMMON]
            fit_experts, fit_ok, fit_line = _report(
                "--fit", facts, model, fit_args, endpoints=endpoints, budgets=case.budgets_gib
            )
            ours = moetune_command(facts, model, case, endpoints)
            our_experts, our_ok, our_line = _report(
                "moetune", facts, model, ours, endpoints=endpoints, budgets=case.budgets_gib
            )
            print(fit_line)
            print(our_line)
            ratio = our_experts / fit_experts if fit_experts else float("inf")
            holds = our_ok and our_experts >= fit_experts
            met &= holds
            print(
                f"  moetune / --fit expert bytes on devices: {ratio:.3f}; moetune within every "
                f"budget: {our_ok}; --fit within every budget: {fit_ok}"
                f"{'' if holds else '  TARGET MISSED'}"
            )
        print(
            f"\ntarget (>= --fit's expert bytes, no budget exceeded): {'met' if met else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
