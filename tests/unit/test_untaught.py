"""An architecture moetune has not been taught: ``rnd1`` (a real llama.cpp MoE architecture,
a diffusion model), kept out of core/dims.py's tables on purpose, gets a warning naming it
and ``inspect`` says it is not verified (server/test_untaught.py: the plan never
under-predicts llama.cpp)."""

from __future__ import annotations

from pathlib import Path

from moetune.core import archs
from moetune.core.devices import single_device
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.settings import Settings
from moetune.jobs.loader import load_model_facts
from moetune.report.payloads import inspect_payload

from support.archfix import UNTAUGHT_REAL, write_rnd1


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
