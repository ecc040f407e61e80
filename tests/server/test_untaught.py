"""An architecture moetune has not been taught gets a conservative plan that never
under-predicts llama.cpp, a warning naming the architecture, and ``inspect`` says so.

Two kinds of case: ``rnd1`` (a real llama.cpp MoE architecture, a diffusion model whose
create_memory gives it no KV cache), kept out of core/archs.py's records on purpose; and taught
architectures of the matrix whose records are replaced by the untaught one for the test (a
chunked-attention, a sliding-window, an MLA and a hybrid one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from moetune.core import archs
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.units import MIB

from support.archfix import UNTAUGHT_REAL, ArchCase, flags, matrix, predict, write_rnd1
from support.llama import running_server

FORGOTTEN = ("llama4", "gpt-oss", "deepseek2", "qwen35moe")


@pytest.fixture
def forget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Replace the FORGOTTEN architectures' records (core/archs.py) by the untaught one."""
    for name in FORGOTTEN:
        monkeypatch.setitem(archs.ARCHS, name, archs.untaught_record(name))
    yield


RND1 = ArchCase(UNTAUGHT_REAL, "untaught", write_rnd1)


def _assert_covers(model: Path, case: ArchCase, rpc: str) -> None:
    """Every term of the prediction is at least what llama-server logs."""
    predicted = predict(model, case)
    assert not predicted.cache_exact
    with running_server(model, *flags(case, rpc), "--fit", "off") as server:
        lines = parse_buffers(server.log_text())
    logged = {
        "model": total_mib(lines, "model", "RPC0"),
        "kv": total_mib(lines, "KV", "RPC0") + total_mib(lines, "RS", "RPC0"),
        "compute": total_mib(lines, "compute", "RPC0"),
        "host compute": total_mib(lines, "compute", "CPU"),
    }
    mine = {
        "model": predicted.gpu_weights_bytes / MIB,
        "kv": predicted.gpu_kv_bytes / MIB,
        "compute": predicted.gpu_compute_bytes / MIB,
        "host compute": predicted.host_compute_bytes / MIB,
    }
    print(f"\nuntaught {case.arch}: predicted {mine}, logged {logged}")
    for term, value in logged.items():
        assert mine[term] >= value - 0.005, (term, mine, logged)


def test_untaught_real_architecture_is_covered(tmp_path: Path, rpc: str) -> None:
    _assert_covers(write_rnd1(tmp_path / "rnd1.gguf"), RND1, rpc)


@pytest.mark.parametrize("arch", FORGOTTEN)
def test_forgotten_architecture_is_covered(
    tmp_path: Path, rpc: str, arch: str, forget: None
) -> None:
    case = matrix()[arch]
    _assert_covers(case.write(tmp_path / f"{arch}.gguf"), case, rpc)
