"""A draft model (``-md``) beside the target in moetune's estimate: its memory counted on its
device, another vocabulary refused (server/test_draft.py holds each term to llama-server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from moetune.core.extras import parse_extras_flags, with_draft
from moetune.core.memory import Settings, estimate
from moetune.core.placement import Placement
from moetune.errors import DraftModelError
from moetune.jobs.loader import load_extras, load_model_facts
from moetune.record import jsonable

from support.draft import CASES, predict_with_draft
from support.factory import ModelFactory, write_header_only


@pytest.fixture(scope="module")
def pair(model_factory: ModelFactory) -> tuple[Path, Path]:
    target = model_factory("qwen3moe", "target.gguf", n_layers=6, n_embd=256)
    draft = model_factory("qwen3moe", "draft.gguf", n_layers=2, n_embd=128, n_experts=4, seed=1)
    return target, draft


def test_draft_memory_is_counted_on_its_device(pair: tuple[Path, Path]) -> None:
    target, draft = pair
    case = CASES[0]
    with_it = predict_with_draft(case, target, draft)
    facts = load_model_facts(target)
    without = estimate(
        facts,
        Placement.with_n_cpu_moe(case.n_cpu_moe),
        Settings(
            n_ctx=case.n_ctx,
            type_k=case.main_cache,
            type_v=case.main_cache,
            gpu_overhead_bytes=0,
            device_kind="rpc",
        ),
    )
    assert with_it.draft is not None and without.draft is None
    extra = with_it.draft.draft_weights_bytes + with_it.draft.draft_kv_bytes
    assert with_it.gpu_bytes - without.gpu_bytes >= extra > 0
    assert "draft_weights_bytes" not in jsonable(without.devices[0])
    assert jsonable(with_it.devices[0])["draft_kv_bytes"] == with_it.draft.draft_kv_bytes


def test_a_draft_with_another_vocabulary_is_refused(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    target, _ = pair
    other = write_header_only(tmp_path / "other.gguf", n_vocab=4096, n_merges=10, n_layers=2)
    facts = load_model_facts(target)
    with pytest.raises(DraftModelError, match=r"cannot draft for target\.gguf"):
        load_extras(parse_extras_flags(with_draft((), str(other))), facts)
