"""moetune's first command against llama.cpp's own ``--fit`` on the same per-device budgets.

Two or three ``ggml-rpc-server`` processes on 127.0.0.1 are the devices. For each case (a
real-shaped header made loadable: its metadata and tensor infos, a placeholder vocabulary,
the data as a hole), ``llama-fit-params --fit on --fit-target M0,M1`` prints the arguments
``--fit`` chooses (the margins are each device's free memory minus its budget, as ``--fit``
keeps a margin of free memory); moetune plans for the same budgets (at the dry run's own
semantics: one sequence, logits for the whole batch, no runtime overhead) and the command
it prints first is taken (``PlanResult.first``: the ``-ot`` form where it keeps more on the
devices, else ``--n-cpu-moe``; what ``alias`` and ``export`` take). Both commands are
then projected by ``llama-fit-params -fitp on``, llama.cpp's own dry run, and the script
prints, per case, the expert bytes each keeps on the devices, each device's projection
against its budget, moetune's predicted weights per device against the dry run's (whole
MiB, as llama.cpp prints them), and the crossings per token of each (home changes along a
token's pass, core/speed.py's ``n_hops``). A case where moetune keeps fewer expert bytes than
``--fit``, exceeds a budget, or predicts other weights than the dry run is marked. Where the
first command is the ``-ot`` form, the expert bytes the ``--n-cpu-moe`` form printed beside it
keeps are shown too (moetune's prediction, not dry-run), against ``--fit``'s.

An RPC device backed by a CPU reports the host's physical memory as both free and total
(ggml/src/ggml-cpu/ggml-cpu.cpp ``ggml_backend_cpu_device_get_memory``: ``sysconf
(_SC_PHYS_PAGES)``). The dry runs allocate nothing, so the servers are started with a small
``LD_PRELOAD`` library, compiled here with ``cc``, whose ``sysconf`` reports
``DEVICE_MIB`` pages instead: budgets above this machine's RAM can then be given to
``--fit``. Without a C compiler the servers report the real memory and a case with a budget
above it is skipped (and said so).

The cases: two and three devices, equal and unequal budgets, Qwen3-30B-A3B to
Qwen3-235B-A22B and DeepSeek-V3 shapes, leading dense blocks (DeepSeek-V3's three,
GLM-4.5-Air's one) and a NextN block (GLM-4.5-Air's, skipped at load).

    python benchmarks/multidevice.py [CASE_NUMBER ...]
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate
from moetune.core.placement import split_weights
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.speed import layout_of
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB, MIB

from support.factory import (
    QWEN3_235B_A22B,
    loadable_copy,
    write_glm45_air_header,
    write_header_only,
)
from support.fitrig import dry_run_settings, fit_choice, free_mib, placement_of, project
from support.llama import rpc_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "models"
DEVICE_MIB = 65536  # what each RPC device reports (free and total) with the library

PHYSMEM_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
/* sysconf(_SC_PHYS_PAGES) as MOETUNE_DEVICE_MIB MiB of pages; everything else unchanged */
long sysconf(int name) {
    static long (*real)(int) = 0;
    if (!real) real = (long (*)(int)) dlsym(RTLD_NEXT, "sysconf");
    const char *mib = getenv("MOETUNE_DEVICE_MIB");
    if (name == _SC_PHYS_PAGES && mib) return atol(mib) * (1048576L / real(_SC_PAGE_SIZE));
    return real(name);
}
"""


def _example(name: str) -> Callable[[Path], Path]:
    return lambda dst: Path(shutil.copyfile(EXAMPLES / f"{name}.header.gguf", dst))


# each model's header-only file: an example of examples/models, or written by tests/support
MODELS: dict[str, Callable[[Path], Path]] = {
    "Qwen3-30B-A3B-Q4_K_M": _example("Qwen3-30B-A3B-Q4_K_M"),
    "gpt-oss-20b-MXFP4": _example("gpt-oss-20b-MXFP4"),
    "gpt-oss-120b-MXFP4": _example("gpt-oss-120b-MXFP4"),
    "Qwen3-235B-A22B-Q4_K_M": lambda dst: write_header_only(dst, shape=QWEN3_235B_A22B),
    "DeepSeek-V3-0324-Q4_K_M": _example("DeepSeek-V3-0324-Q4_K_M"),
    "GLM-4.5-Air-Q8_0": write_glm45_air_header,
}


@dataclass(frozen=True)
class Case:
    model: str
    n_ctx: int
    budgets_gib: tuple[float, ...]
    note: str = ""


CASES = [
    Case("Qwen3-30B-A3B-Q4_K_M", 32768, (12, 8)),
    Case("Qwen3-30B-A3B-Q4_K_M", 32768, (16, 6)),
    Case("Qwen3-30B-A3B-Q4_K_M", 32768, (8, 8)),
    Case("Qwen3-30B-A3B-Q4_K_M", 16384, (6, 5, 4)),
    Case("gpt-oss-20b-MXFP4", 32768, (6, 4)),
    Case("gpt-oss-120b-MXFP4", 32768, (22, 22)),
    Case("gpt-oss-120b-MXFP4", 32768, (24, 12), "issue 24's example"),
    Case("gpt-oss-120b-MXFP4", 32768, (20, 12, 12)),
    Case("Qwen3-235B-A22B-Q4_K_M", 32768, (24, 24)),
    Case("Qwen3-235B-A22B-Q4_K_M", 16384, (32, 16, 16)),
    Case("DeepSeek-V3-0324-Q4_K_M", 16384, (24, 24), "3 leading dense blocks"),
    Case("DeepSeek-V3-0324-Q4_K_M", 16384, (40, 24, 16), "3 leading dense blocks"),
    Case("GLM-4.5-Air-Q8_0", 32768, (24, 16), "1 leading dense block, a NextN block"),
    Case("GLM-4.5-Air-Q8_0", 32768, (16, 16, 16), "1 leading dense block, a NextN block"),
]


def rpc_devices(endpoints: Sequence[str]) -> tuple[DeviceSpec, ...]:
    return tuple(
        DeviceSpec(
            name=f"RPC{i}",
            buft=rpc_buft(ep),
            kind="rpc",
            overhead_bytes=0,
            total_bytes=DEVICE_MIB * MIB,
        )
        for i, ep in enumerate(endpoints)
    )


def moetune_first(
    facts: ModelFacts, model: Path, case: Case, endpoints: Sequence[str]
) -> tuple[list[str], MemoryEstimate, int | None]:
    """moetune's first command for the budgets: its arguments, its prediction, and the expert
    bytes the ``--n-cpu-moe`` form printed beside it keeps on the devices (predicted; None
    where that form is the first)."""
    request = PlanRequest(
        model_path=str(model),
        settings=dry_run_settings(case.n_ctx),
        devices=rpc_devices(endpoints),
        target_vram=tuple(round(b * GIB) for b in case.budgets_gib),
        device_args=("--rpc", ",".join(endpoints)),
    )
    result = make_plan(facts, request)
    first, simpler = result.first, result.simpler
    beside = None
    if simpler is not None:
        beside = split_weights(facts, simpler.placement, len(endpoints)).gpu_expert_bytes
    return first.command[1:], first.memory, beside


@dataclass(frozen=True)
class Report:
    experts: int  # expert bytes on the devices
    within: bool  # every device within its budget by the dry run
    weights_agree: bool | None  # predicted weights per device = the dry run's (None: no prediction)
    crossings: int
    text: str


def report(
    label: str,
    facts: ModelFacts,
    model: Path,
    args: Sequence[str],
    *,
    case: Case,
    endpoints: Sequence[str],
    predicted: MemoryEstimate | None = None,
) -> Report:
    devices = rpc_devices(endpoints)
    weights = split_weights(facts, placement_of(args, [d.buft for d in devices]), len(devices))
    hops = layout_of(facts, weights, dry_run_settings(case.n_ctx), devices).n_hops
    projected = project(model, args)
    within, agree, cells = [], [], []
    for i, budget in enumerate(case.budgets_gib):
        row = projected[f"RPC{i}"]
        ok = row.total_mib <= budget * 1024
        within.append(ok)
        cell = f"RPC{i} {row.total_mib:,}/{round(budget * 1024):,} MiB{'' if ok else ' OVER'}"
        if predicted is not None:
            mine = int(predicted.devices[i].weights_bytes / MIB)
            agree.append(mine == row.model_mib)
            cell += f" (weights {row.model_mib:,}, predicted {mine:,}"
            cell += ")" if mine == row.model_mib else " DIFFER)"
        cells.append(cell)
    experts = weights.gpu_expert_bytes
    text = (
        f"  {label:8s} experts on devices {experts / GIB:6.2f} GiB, {hops} crossings per token"
        f"\n           {'; '.join(cells)}\n           {shlex.join(args)}"
    )
    return Report(experts, all(within), all(agree) if predicted else None, hops, text)


def physmem_env(tmp: Path) -> dict[str, str] | None:
    """The environment that makes each RPC device report DEVICE_MIB (None: no compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    source, lib = tmp / "physmem.c", tmp / "physmem.so"
    source.write_text(PHYSMEM_C)
    done = subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(source), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    return dict(os.environ, LD_PRELOAD=str(lib), MOETUNE_DEVICE_MIB=str(DEVICE_MIB))


def main(chosen: Sequence[int]) -> None:
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        env = physmem_env(Path(tmp))
        trio = [stack.enter_context(rpc_server(env=env)) for _ in range(3)]
        free = free_mib(trio)
        print("moetune's first command vs llama.cpp's --fit, per device, by llama.cpp's dry run")
        print(
            f"each RPC device reports {free[0]:,} MiB free"
            + (" (LD_PRELOAD sysconf)" if env else " (the host's RAM: no C compiler)")
        )
        rows: list[str] = []
        behind: list[float] = []  # the --n-cpu-moe form beside an -ot first: MiB vs --fit
        met = True
        for number, case in enumerate(CASES, 1):
            if chosen and number not in chosen:
                continue
            title = (
                f"{number}. {case.model}, ctx {case.n_ctx}, budgets "
                + ", ".join(f"{b:g} GiB" for b in case.budgets_gib)
                + (f" ({case.note})" if case.note else "")
            )
            print(f"\n{title}")
            if max(case.budgets_gib) * 1024 > min(free):
                print(f"  skipped: a budget is above the {min(free):,} MiB the devices report")
                rows.append(f"{number:>2}. skipped")
                continue
            header = Path(tmp) / f"{case.model}.header.gguf"
            model = Path(tmp) / f"{case.model}.gguf"
            if not model.exists():
                loadable_copy(MODELS[case.model](header), model)
            facts = load_model_facts(model)
            endpoints = trio[: len(case.budgets_gib)]
            budgets = [round(b * 1024) for b in case.budgets_gib]
            fit_args = fit_choice(model, case.n_ctx, budgets, endpoints)
            fit = report("--fit", facts, model, fit_args, case=case, endpoints=endpoints)
            args, predicted, beside = moetune_first(facts, model, case, endpoints)
            ours = report(
                "moetune", facts, model, args, case=case, endpoints=endpoints, predicted=predicted
            )
            print(fit.text)
            print(ours.text)
            marks = [
                *(["BEHIND --fit"] if ours.experts < fit.experts else []),
                *(["OVER A BUDGET"] if not ours.within else []),
                *(["WEIGHTS DIFFER FROM THE DRY RUN"] if not ours.weights_agree else []),
            ]
            met &= not marks
            delta = (ours.experts - fit.experts) / MIB
            print(
                f"  moetune - --fit: {delta:+,.0f} MiB of experts on the devices; crossings "
                f"{ours.crossings} vs {fit.crossings}; --fit within every budget: {fit.within}"
                + (f"  <<< {', '.join(marks)}" if marks else "")
            )
            form = "-ot" if beside is not None else "N"
            if beside is not None:
                simpler = (beside - fit.experts) / MIB
                behind.append(simpler)
                print(
                    f"  beside it, the --n-cpu-moe form (predicted): {beside / GIB:.2f} GiB of "
                    f"experts on the devices, {simpler:+,.0f} MiB against --fit"
                )
            rows.append(
                f"{number:>2}. {case.model:24s} {case.n_ctx:>6} "
                f"{','.join(f'{b:g}' for b in case.budgets_gib):>10} GiB  "
                f"--fit {fit.experts / GIB:6.2f}  moetune {ours.experts / GIB:6.2f} GiB "
                f"({delta:+6,.0f} MiB)  crossings {fit.crossings:>3} / {ours.crossings:>3}"
                f"  {form:>3}" + (f"  <<< {', '.join(marks)}" if marks else "")
            )
        print(
            "\nexpert bytes on the devices (--fit / moetune's first), crossings per token, "
            "the first's form (-ot, or N: --n-cpu-moe)"
        )
        print("\n".join(rows))
        if behind:
            late = [b for b in behind if b < 0]
            print(
                f"the --n-cpu-moe form printed beside the -ot form ({len(behind)} cases), "
                f"predicted: behind --fit in {len(late)}"
                + (f", by {-max(late):,.0f} to {-min(late):,.0f} MiB" if late else "")
            )
        print(
            "\ntarget (>= --fit's expert bytes, no budget exceeded, weights to the MiB): "
            + ("met" if met else "MISSED")
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])
