"""The speculative-decoding draft cases (``-md`` with its flags) and moetune's estimate for
each: the unit tests check the draft's part, the server tests hold it to llama-server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moetune.core.extras import with_draft
from moetune.core.memory import MemoryEstimate, Settings, estimate
from moetune.core.placement import Placement
from moetune.jobs.loader import load_model_facts, with_extras


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


def draft_extra(case: Case, draft: Path) -> tuple[str, ...]:
    return with_draft(case.draft_args, str(draft))


def predict_with_draft(case: Case, target: Path, draft: Path) -> MemoryEstimate:
    facts = load_model_facts(target)
    settings = Settings(
        n_ctx=case.n_ctx,
        type_k=case.main_cache,
        type_v=case.main_cache,
        gpu_overhead_bytes=0,
        device_kind="rpc",
    )
    settings, extras = with_extras(settings, facts, draft_extra(case, draft))
    placement = Placement.with_n_cpu_moe(case.n_cpu_moe, n_gpu_layers=99 if case.rpc else 0)
    return estimate(facts, placement, settings, extras=extras)
