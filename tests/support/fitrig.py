"""llama.cpp's own ``--fit`` and dry run on the rig's RPC devices, for comparing moetune's plans
with them (benchmarks/multidevice.py, tests/server/test_multidevice.py).

- ``fit_choice``: the arguments ``--fit`` chooses (``llama-fit-params --fit on``) for
  per-device budgets, given as its margins of free memory (a device's free memory minus its
  budget: ``--fit`` keeps a margin free, common/fit.cpp);
- ``project``: llama.cpp's dry run of a command (``llama-fit-params -fitp on``), per device;
- ``placement_of``: a command's ``-ngl``, ``-ts`` and ``-ot`` as a moetune placement.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from moetune.core.placement import CPU, Override, Placement
from moetune.core.settings import Settings
from moetune.llamacpp.log import Projection, parse_projection

from support.llama import bin_path

COMMON = ("-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0")  # the cache both sides plan for


def fit_params(model: Path, args: Sequence[str], tool: Path | None = None) -> str:
    """llama-fit-params' stdout for ``model`` and ``args`` (``tool``: another build's, the
    Vulkan one of support/vulkan.py); SystemExit with its stderr."""
    argv = [str(tool or bin_path("llama-fit-params")), "-m", str(model), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-fit-params failed: {done.stderr[-800:]}")
    return done.stdout


def free_mib(endpoints: Sequence[str]) -> list[int]:
    """Each RPC device's free memory as llama-server lists it, MiB."""
    argv = [str(bin_path("llama-server")), "--rpc", ",".join(endpoints), "--list-devices"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    return [
        int(line.split("(")[1].split(",")[1].split()[0])
        for line in out.splitlines()
        if line.strip().startswith("RPC")
    ]


def fit_choice(
    model: Path, n_ctx: int, budgets_mib: Sequence[int], endpoints: Sequence[str]
) -> list[str]:
    """The arguments llama.cpp's ``--fit`` chooses for the budgets (its margins of free
    memory), with the devices and the cache: a command's arguments without ``-m``."""
    margins = [
        max(0, free - budget) for free, budget in zip(free_mib(endpoints), budgets_mib, strict=True)
    ]
    args = [
        "--rpc",
        ",".join(endpoints),
        "-c",
        str(n_ctx),
        *COMMON,
        "--fit",
        "on",
        "--fit-target",
        ",".join(map(str, margins)),
    ]
    return ["--rpc", ",".join(endpoints), *shlex.split(fit_params(model, args)), *COMMON]


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


def project(model: Path, args: Sequence[str], tool: Path | None = None) -> dict[str, Projection]:
    """llama.cpp's dry run of a command's arguments (``-m`` and ``--fit`` taken out) by
    ``tool`` (default: the CPU/RPC build's llama-fit-params)."""
    rest: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-m", "--fit"):
            skip = True
        else:
            rest.append(arg)
    return parse_projection(fit_params(model, [*rest, "-fitp", "on"], tool))


def dry_run_settings(n_ctx: int) -> Settings:
    """llama-fit-params' semantics on the rig: one sequence, logits for the whole batch, q8_0
    KV, no runtime overhead on RPC devices."""
    return Settings(
        n_ctx=n_ctx,
        type_k="q8_0",
        type_v="q8_0",
        n_seq=1,
        all_outputs=True,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
