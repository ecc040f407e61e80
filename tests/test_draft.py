"""A draft model (``-md``) beside the target, against llama-server's own buffers at -lv 4.

llama-server loads the draft after the target (``common_speculative_init_result: loading draft
model``) and prints a second set of buffer lines for it: its weights where ``-ngld``/``-otd``
put them, its own KV cache (``-ctkd``/``-ctvd``, not ``-ctk``), its compute buffer. Speculation
also widens the target's logits to ``n_parallel * (1 + n_max)`` rows. Each term is compared on
its own, so leaving one out fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from moetune.core.extras import parse_extras_flags, with_draft
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import Placement
from moetune.errors import DraftModelError
from moetune.jobs.loader import load_extras, load_model_facts, with_extras
from moetune.llamacpp.log import BufferLine, parse_buffers, total_mib
from moetune.units import MIB

from factory import write_header_only, write_model
from llama import CPU_PLAIN, running_server

DRAFT_MARK = "common_speculative_init_result: loading draft model"


@dataclass(frozen=True)
class Case:
    name: str
    draft_args: tuple[str, ...]  # after -md FILE --spec-type draft-simple
    main_cache: str = "f16"
    n_cpu_moe: int = 0
    n_ctx: int = 4096
    rpc: bool = True


CASES = [
    Case("own-cache-types", ("-ctkd", "q8_0", "-ctvd", "q8_0"), main_cache="q4_0", n_cpu_moe=2),
    Case("moe-draft-experts-on-cpu", ("-ncmoed", "1"), n_ctx=8192),
    Case("draft-on-cpu", ("-ngld", "0", "--spec-draft-n-max", "6")),
    Case("all-on-cpu", ("-ngld", "0"), rpc=False),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("draft")
    target = write_model(root / "target.gguf", "qwen3moe", n_layers=6, n_embd=256)
    draft = write_model(
        root / "draft.gguf", "qwen3moe", n_layers=2, n_embd=128, n_experts=4, seed=1
    )
    return target, draft


def _extra(case: Case, draft: Path) -> tuple[str, ...]:
    return with_draft(case.draft_args, str(draft))


def _predict(case: Case, target: Path, draft: Path) -> MemoryEstimate:
    facts = load_model_facts(target)
    settings = Settings(
        n_ctx=case.n_ctx,
        type_k=case.main_cache,
        type_v=case.main_cache,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
    settings, extras = with_extras(settings, facts, _extra(case, draft))
    placement = Placement.with_n_cpu_moe(case.n_cpu_moe, n_gpu_layers=99 if case.rpc else 0)
    return estimate(facts, placement, settings, extras=extras)


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
        *_extra(case, draft),
    ) as server:
        text = server.log_text()
    assert DRAFT_MARK in text, "llama-server did not load the draft"
    main, _, rest = text.partition(DRAFT_MARK)
    return main, rest


def _mib(lines: list[BufferLine], kind: str, prefix: str) -> float:
    return total_mib(lines, kind, prefix)


def _exact(predicted_bytes: int, printed_mib: float) -> bool:
    return abs(predicted_bytes / MIB - printed_mib) <= 0.005 + 1e-9


@pytest.mark.server
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_draft_matches_llama_server(pair: tuple[Path, Path], rpc: str, case: Case) -> None:
    target, draft = pair
    predicted = _predict(case, target, draft)
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


@pytest.mark.server
def test_speculation_widens_the_targets_logits(pair: tuple[Path, Path]) -> None:
    """Without speculation the target reserves 4 logits rows; drafting 3 tokens, 16."""
    target, draft = pair
    facts = load_model_facts(target)
    plain = Settings(n_ctx=4096, gpu_overhead_bytes=0, device_kind="rpc")
    spec, _ = with_extras(plain, facts, with_draft((), str(draft)))
    assert spec.n_outputs == 16 and plain.n_outputs == 4


def test_draft_memory_is_counted_on_its_device(pair: tuple[Path, Path]) -> None:
    target, draft = pair
    case = CASES[0]
    with_it = _predict(case, target, draft)
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
    assert "draft_weights_bytes" not in without.devices[0].model_dump()
    assert with_it.devices[0].model_dump()["draft_kv_bytes"] == with_it.draft.draft_kv_bytes


def test_a_draft_with_another_vocabulary_is_refused(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    target, _ = pair
    other = write_header_only(tmp_path / "other.gguf", n_vocab=4096, n_merges=10, n_layers=2)
    facts = load_model_facts(target)
    with pytest.raises(DraftModelError, match=r"cannot draft for target\.gguf"):
        load_extras(parse_extras_flags(with_draft((), str(other))), facts)
