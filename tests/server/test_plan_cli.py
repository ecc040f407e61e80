"""`moetune plan`'s command, run: llama-server on a real device stays within the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.factory import MOE_ARCHS
from support.llama import running_server
from support.plan import TINY, plan


@pytest.mark.parametrize("arch", MOE_ARCHS)
@pytest.mark.parametrize("which", ["command", "override_command"])
def test_planned_command_runs_within_budget(
    tiny_models: dict[str, Path], rpc: str, arch: str, which: str
) -> None:
    """The printed command, given an RPC device, loads and stays within the budget."""
    code, out = plan(str(tiny_models[arch]), "--vram", "20M", *TINY, "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["plan"]["recommended"]["n_cpu_moe"] > 0 or data["override_tensor"]
    argv = data[which]
    assert argv[0] == "llama-server" and argv[2] == str(tiny_models[arch])
    with running_server(tiny_models[arch], *argv[3:], "--rpc", rpc) as server:
        lines = parse_buffers(server.log_text())
    used = sum(total_mib(lines, kind, "RPC0") for kind in ("model", "KV", "RS", "compute"))
    assert used * MIB <= data["budget_bytes"] * 1.02  # compute is an estimate
