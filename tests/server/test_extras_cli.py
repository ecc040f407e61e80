"""``--mmproj`` and ``--draft`` against llama-server: the projector's memory through
estimate() against its own log lines (clip's weights and compute on the device clip picks),
and the planned command stays within its budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moetune.core.extras import with_mmproj
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts, with_extras
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.extras import companion_files
from support.factory import ModelFactory
from support.helpers import moetune
from support.llama import running_server


@pytest.fixture(scope="module")
def files(model_factory: ModelFactory) -> dict[str, Path]:
    return companion_files(model_factory)


@pytest.mark.parametrize("offload", [True, False], ids=["on-the-rpc-device", "on-the-cpu"])
def test_projector_memory_matches_llama_server(
    files: dict[str, Path], rpc: str, offload: bool
) -> None:
    """The estimate's projector parts against clip's lines, parsed as ``run`` parses them."""
    extra = with_mmproj(() if offload else ("--no-mmproj-offload",), str(files["mmproj"]))
    facts = load_model_facts(files["model"])
    settings = Settings(n_ctx=4096, gpu_overhead_bytes=0, device_kind="rpc")
    settings, extras = with_extras(settings, facts, extra)
    memory = estimate(facts, Placement(), settings, extras=extras)
    with running_server(
        files["model"],
        "--rpc",
        rpc,
        "-ngl",
        "99",
        "-c",
        "4096",
        "-fa",
        "on",
        "--fit",
        "off",
        *extra,
    ) as server:
        lines = parse_buffers(server.log_text())
    mm = memory.mmproj
    assert mm is not None and mm.exact
    device = memory.devices[0]
    printed = total_mib(lines, "model", "RPC0") + total_mib(lines, "compute", "RPC0")
    main = memory.gpu_weights_bytes + memory.gpu_compute_bytes
    if offload:
        assert device.mmproj_weights_bytes == mm.mmproj_weights_bytes > 0
        assert abs((main + device.extras_bytes) / MIB - printed) <= 0.02
        assert mm.mmproj_compute_bytes > 0
    else:
        assert mm.device == "CPU" and device.extras_bytes == 0
        assert abs(main / MIB - printed) <= 0.01
        host = total_mib(lines, "compute", "CPU")
        assert abs((memory.host_compute_bytes + mm.mmproj_compute_bytes) / MIB - host) <= 0.01


def test_the_planned_command_stays_within_budget_per_llama_cpp(
    files: dict[str, Path], rpc: str
) -> None:
    """plan --mmproj --draft on the RPC device, then the planned command itself: the device's
    logged buffers (the model's, clip's and the draft's) stay within the budget, and the
    same command without the companions would have kept more experts on the device."""
    budget_mib = 52
    args = (
        "--rpc",
        rpc,
        "--vram",
        f"{budget_mib}M",
        "--headroom",
        "0",
        "--ctx",
        "4096",
        "--json",
        "--no-verify",
    )
    done = moetune(
        "plan",
        str(files["model"]),
        *args,
        "--mmproj",
        str(files["mmproj"]),
        "--draft",
        str(files["draft"]),
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    alone = json.loads(moetune("plan", str(files["model"]), *args).stdout)
    assert plan["n_cpu_moe"] > alone["n_cpu_moe"]
    command = plan["first"]["command"]  # what gpu_bytes is of (the -ot form where it is first)
    with running_server(Path(command[2]), *command[3:]) as server:
        lines = parse_buffers(server.log_text())
    logged = sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))
    assert logged <= budget_mib
    assert abs(logged * MIB - plan["gpu_bytes"]) <= 0.05 * MIB
