"""A --target-vram above an RPC device's size is refused by every command that takes one, the
size being what llama-server lists for the device (the issue's case: --target-vram 100G on a
23.5 GiB RPC device was planned as a 100 GiB budget); nothing is launched. --force accepts it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from moetune.errors import ExitCode
from moetune.llamacpp.process import find_server, server_info
from moetune.units import TIB, format_bytes

from support.factory import ModelFactory
from support.helpers import assert_one_line_error, moetune

COMMON = ("--ctx", "1024", "--overhead", "0")
TOO_MUCH = "4T"  # more than any machine that runs these tests has as an RPC device


def rpc_total(rpc: str) -> int:
    """RPC0's size as llama-server lists it (what moetune holds the target to)."""
    info = server_info(find_server(None), rpc=(rpc,))
    (device,) = [d for d in info.devices if d.name == "RPC0"]
    assert device.total_bytes < 4 * TIB
    return device.total_bytes


@pytest.mark.parametrize("command", ["plan", "run", "bench"])
def test_a_target_above_the_rpc_device_is_refused(
    command: str, rpc: str, model_factory: ModelFactory, _moetune_home: Path
) -> None:
    model = model_factory("qwen3moe", n_layers=8)
    result = moetune(command, str(model), "--target-vram", TOO_MUCH, *COMMON, "--rpc", rpc)
    line = assert_one_line_error(result, ExitCode.BAD_VALUE)
    size = format_bytes(rpc_total(rpc))
    assert f"--target-vram 4.00 TiB is more than RPC0 ({rpc}) has: {size}" in line, line
    assert "--force" in line
    assert not (_moetune_home / "logs").exists() or not list(
        (_moetune_home / "logs").glob("*.log")
    ), "nothing is launched"


def test_force_plans_it(rpc: str, model_factory: ModelFactory) -> None:
    model = model_factory("qwen3moe", n_layers=8)
    result = moetune(
        "plan", str(model), "--target-vram", TOO_MUCH, *COMMON, "--rpc", rpc, "--force", "--json"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["budget_bytes"] == 4 * TIB and data["fits"], data
    assert re.search(r"--rpc 127\.0\.0\.1:\d+", " ".join(data["command"]))


def test_an_rpc_device_is_not_called_a_gpu(rpc: str, model_factory: ModelFactory) -> None:
    """One RPC device: the memory table names it (RPC0), with no CUDA context."""
    model = model_factory("qwen3moe", n_layers=8)
    result = moetune("plan", str(model), *COMMON, "--rpc", rpc)
    assert result.returncode == 0, result.stderr
    assert "RPC0 total" in result.stdout and "experts on the RPC0" in result.stdout
    assert "| RPC0: " in result.stdout.splitlines()[0]
    assert "CUDA context" not in result.stdout and "GPU" not in result.stdout, result.stdout
