"""`moetune plan`: output, JSON, bad input, and the planned command on a real device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moetune.errors import ExitCode
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from factory import ARCHS, MOE_ARCHS
from helpers import EXAMPLE_QWEN, cli, moetune
from llama import running_server

QWEN = str(EXAMPLE_QWEN)
TINY = ["--ram", "1G", "--headroom", "0", "--overhead", "0", "--ctx", "4096"]


def plan(*args: str) -> tuple[int, str]:
    code, out, _ = cli("plan", *args)
    return code, out


def test_main_job_example_prints_the_plan() -> None:
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G")
    assert code == 0, out
    for words in ("--n-cpu-moe", "-ot ", "GPU total", "RAM total", "llama-server -m", "--fit off"):
        assert words in out


def test_json_keys() -> None:
    code, out = plan(QWEN, "--vram", "16G", "--ram", "64G", "--json")
    assert code == 0, out
    data = json.loads(out)
    keys = ["schema_version", "n_cpu_moe", "override_tensor", "command", "gpu_bytes",
            "gpu_weights_bytes", "gpu_kv_bytes", "gpu_compute_bytes", "gpu_overhead_bytes",
            "cpu_weights_bytes", "budget_bytes", "fits"]  # fmt: skip
    assert all(key in data for key in keys)
    assert data["fits"] is True and data["n_cpu_moe"] > 0
    parts = ("gpu_weights_bytes", "gpu_kv_bytes", "gpu_compute_bytes", "gpu_overhead_bytes")
    assert data["gpu_bytes"] == sum(data[k] for k in parts)
    assert data["gpu_bytes"] <= data["budget_bytes"]
    assert data["command"][0] == "llama-server"
    assert all(rule.endswith("=CPU") for rule in data["override_tensor"])


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--vram", "24Q"], ExitCode.BAD_VALUE, "not a size"),
        (["--vram", "24G", "--ctx", "0"], ExitCode.BAD_VALUE, "context must be positive"),
        (["--vram", "24G", "--ctx", "lots"], ExitCode.BAD_VALUE, "not a context size"),
        (["--vram", "24G", "--cache-type", "q3_z"], ExitCode.BAD_VALUE, "cache type"),
        (["--vram", "2G"], ExitCode.DOES_NOT_FIT, "does not fit"),
        ([], ExitCode.NO_GPU, "no GPU"),
    ],
)
def test_bad_input_is_one_clear_line(args: list[str], code: ExitCode, words: str) -> None:
    result = moetune("plan", QWEN, "--ram", "64G", *args)
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_context_beyond_training_warns() -> None:
    code, out = plan(QWEN, "--vram", "24G", "--ram", "64G", "--ctx", "65536")
    assert code == 0
    assert "beyond the training context 40960" in out


def test_ctx_max_at_a_given_n() -> None:
    code, out = plan(QWEN, "--vram", "16G", "--ram", "64G", "--ctx", "max", "--n-cpu-moe", "40",
                     "--json")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["n_cpu_moe"] == 40 and data["n_ctx"] % 256 == 0 and data["n_ctx"] <= 40960


@pytest.mark.parametrize("arch", ARCHS)
def test_plan_on_every_fixture(tiny_models: dict[str, Path], arch: str) -> None:
    code, out = plan(str(tiny_models[arch]), "--vram", "30M", *TINY)
    assert code == 0, out
    if arch == "qwen3":
        assert "dense model" in out
    else:
        assert "--n-cpu-moe" in out and "-ot " in out


@pytest.mark.server
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
