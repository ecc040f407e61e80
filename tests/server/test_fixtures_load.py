"""The tiny fixtures are real models: llama-server loads and serves each of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.factory import ARCHS, MOE_ARCHS, make_split, write_model
from support.llama import CPU_PLAIN, Server, completion, running_server


def _assert_generates(server: Server) -> None:
    answer = completion(server.url, "the cat sat on the mat", 8)
    timings = answer.get("timings", {})
    assert timings.get("predicted_n", 0) > 0 or answer.get("content"), answer


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_cpu_only(tiny_models: dict[str, Path], arch: str) -> None:
    with running_server(tiny_models[arch], *CPU_PLAIN) as server:
        _assert_generates(server)
        assert "CPU_Mapped model buffer size" in server.log_text()


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_loads_split_over_rpc(tiny_models: dict[str, Path], rpc: str, arch: str) -> None:
    args = ("--rpc", rpc, "-ngl", "99", "--n-cpu-moe", "2")
    with running_server(tiny_models[arch], *args) as server:
        _assert_generates(server)
        log = server.log_text()
    assert f"RPC0[{rpc}] model buffer size" in log
    assert "CPU_Mapped model buffer size" in log


@pytest.mark.parametrize("expert_type", ["Q8_0", "Q4_K"])
def test_quantized_experts_load(tmp_path: Path, expert_type: str) -> None:
    model = write_model(
        tmp_path / f"qwen3moe-{expert_type}.gguf", "qwen3moe", expert_type=expert_type
    )
    with running_server(model) as server:
        _assert_generates(server)
        ggml_name = expert_type[0].lower() + expert_type[1:]  # "q8_0", "q4_K"
        assert f"- type {ggml_name}:" in server.log_text()


def test_split_shards_load(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    shards = make_split(tiny_models["qwen3moe"], tmp_path / "qwen3moe", max_tensors=20)
    assert len(shards) >= 2
    assert shards[0].name == f"qwen3moe-00001-of-{len(shards):05d}.gguf"
    with running_server(shards[0]) as server:
        _assert_generates(server)
