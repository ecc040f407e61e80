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
from moetune.core.devices import single_device
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.settings import Settings
from moetune.jobs.loader import load_model_facts
from moetune.llamacpp.log import parse_buffers, total_mib
from moetune.report.payloads import inspect_payload
from moetune.units import MIB

from archfix import ArchCase, Tiny, matrix
from llama import running_server
from test_arch_matrix import flags, predict

UNTAUGHT_REAL = "rnd1"
FORGOTTEN = ("llama4", "gpt-oss", "deepseek2", "qwen35moe")


def write_rnd1(path: Path) -> Path:
    """src/models/rnd1.cpp: qwen3moe-shaped blocks (Q/K norms), non-causal attention."""
    t = Tiny(path, UNTAUGHT_REAL)
    t.keys()
    t.globals()
    for i in range(t.n_layers):
        t.attention(i, qk_norm=True)
        t.moe(i)
    return t.close()


@pytest.fixture
def forget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Replace the FORGOTTEN architectures' records (core/archs.py) by the untaught one."""
    for name in FORGOTTEN:
        monkeypatch.setitem(archs.ARCHS, name, archs.untaught_record(name))
    yield


def test_rnd1_is_untaught() -> None:
    assert UNTAUGHT_REAL not in archs.known_archs()
    assert UNTAUGHT_REAL not in archs.verified_archs()


def test_plan_warns_and_inspect_says_not_verified(tmp_path: Path) -> None:
    facts = load_model_facts(write_rnd1(tmp_path / "rnd1.gguf"))
    assert not facts.dims.known
    request = PlanRequest(
        model_path=str(facts.paths[0]),
        devices=single_device(Settings(n_ctx=4096), 8 << 30),
        settings=Settings(n_ctx=4096),
    )
    result = make_plan(facts, request)
    assert any(UNTAUGHT_REAL in w and "not been taught" in w for w in result.warnings)
    assert inspect_payload(facts)["verified"] is False


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


@pytest.mark.server
def test_untaught_real_architecture_is_covered(tmp_path: Path, rpc: str) -> None:
    _assert_covers(write_rnd1(tmp_path / "rnd1.gguf"), RND1, rpc)


@pytest.mark.server
@pytest.mark.parametrize("arch", FORGOTTEN)
def test_forgotten_architecture_is_covered(
    tmp_path: Path, rpc: str, arch: str, forget: None
) -> None:
    case = matrix()[arch]
    _assert_covers(case.write(tmp_path / f"{arch}.gguf"), case, rpc)
