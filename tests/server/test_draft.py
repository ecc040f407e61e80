"""A draft model (``-md``) beside the target, against llama-server's own buffers at -lv 4.

llama-server loads the draft after the target (``common_speculative_init_result: loading draft
model``) and prints a second set of buffer lines for it: its weights where ``-ngld``/``-otd``
put them, its own KV cache (``-ctkd``/``-ctvd``, not ``-ctk``), its compute buffer. Speculation
also widens the target's logits to ``n_parallel * (1 + n_max)`` rows. Each term is compared on
its own, so leaving one out fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.extras import with_draft
from moetune.core.memory import Settings
from moetune.jobs.loader import load_model_facts, with_extras
from moetune.llamacpp.log import BufferLine, parse_buffers, total_mib
from moetune.units import MIB

from support.draft import CASES, Case, draft_extra, predict_with_draft
from support.factory import ModelFactory
from support.llama import CPU_PLAIN, running_server

DRAFT_MARK = "common_speculative_init_result: loading draft model"


@pytest.fixture(scope="module")
def pair(model_factory: ModelFactory) -> tuple[Path, Path]:
    target = model_factory("qwen3moe", "target.gguf", n_layers=6, n_embd=256)
    draft = model_factory("qwen3moe", "draft.gguf", n_layers=2, n_embd=128, n_experts=4, seed=1)
    return target, draft


def _logged(case: Case, target: Path, draft: Path, rpc: str) -> tuple[str, str]:
    """The target's part of the log and the draft's. ``-lm none`` (no mmap): with mmap the CPU's
    ``CPU_Mapped`` line is the file range from its first tensor to its last, GPU tensors
    between them included; without, a buffer of exactly its tensors."""
    devices = ["--rpc", rpc] if case.rpc else []
    with running_server(
        target,
        *devices,
        "-ngl",
        "99" if case.rpc else "0",
        "--n-cpu-moe",
        str(case.n_cpu_moe),
        "-c",
        str(case.n_ctx),
        "-ctk",
        case.main_cache,
        "-ctv",
        case.main_cache,
        "-fa",
        "on",
        "--fit",
        "off",
        "-lm",
        "none",
        *CPU_PLAIN,
        *draft_extra(case, draft),
    ) as server:
        text = server.log_text()
    assert DRAFT_MARK in text, "llama-server did not load the draft"
    main, _, rest = text.partition(DRAFT_MARK)
    return main, rest


def _mib(lines: list[BufferLine], kind: str, prefix: str) -> float:
    return total_mib(lines, kind, prefix)


def _exact(predicted_bytes: int, printed_mib: float) -> bool:
    return abs(predicted_bytes / MIB - printed_mib) <= 0.005 + 1e-9


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_draft_matches_llama_server(pair: tuple[Path, Path], rpc: str, case: Case) -> None:
    target, draft = pair
    predicted = predict_with_draft(case, target, draft)
    main_text, draft_text = _logged(case, target, draft, rpc)
    main, mine = parse_buffers(main_text), parse_buffers(draft_text)
    assert predicted.draft is not None
    dr = predicted.draft
    on_device = [d for d in predicted.devices if d.draft_weights_bytes or d.draft_kv_bytes]
    device_weights = sum(d.draft_weights_bytes for d in predicted.devices)
    # weights and KV exact, device and host apart
    assert _exact(device_weights, _mib(mine, "model", "RPC"))
    assert _exact(dr.host_weights_bytes, _mib(mine, "model", "CPU"))
    assert _exact(dr.draft_kv_bytes, _mib(mine, "KV", "RPC"))
    assert _exact(dr.host_kv_bytes, _mib(mine, "KV", "CPU"))
    # compute within 10 % (the replay is exact on these devices: hold it to 0.01 MiB)
    assert _exact(dr.draft_compute_bytes, _mib(mine, "compute", "RPC"))
    assert _exact(dr.host_compute_bytes, _mib(mine, "compute", "CPU"))
    assert bool(on_device) == (case.rpc and case.draft_args[:2] != ("-ngld", "0"))
    # the target's compute reserves a logits row per drafted token and slot
    assert _exact(predicted.gpu_compute_bytes, _mib(main, "compute", "RPC"))
    assert _exact(predicted.host_compute_bytes, _mib(main, "compute", "CPU"))


def test_speculation_widens_the_targets_logits(pair: tuple[Path, Path]) -> None:
    """Without speculation the target reserves 4 logits rows; drafting 3 tokens, 16."""
    target, draft = pair
    facts = load_model_facts(target)
    plain = Settings(n_ctx=4096, gpu_overhead_bytes=0, device_kind="rpc")
    spec, _ = with_extras(plain, facts, with_draft((), str(draft)))
    assert spec.n_outputs == 16 and plain.n_outputs == 4
