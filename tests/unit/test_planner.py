"""Planner properties on the fixtures and the header-only examples (pure: no server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from moetune.core.devices import single_device
from moetune.core.facts import ModelFacts
from moetune.core.memory import Settings, estimate
from moetune.core.placement import EXPS_REGEX, Override, Placement, split_weights
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.planner import DeviceBudgets, max_context, plan_n_cpu_moe, plan_override
from moetune.errors import DoesNotFitError
from moetune.jobs.loader import load_model_facts
from moetune.units import GIB, MIB

from support.factory import ARCHS, write_header_only
from support.helpers import EXAMPLE_GPT_OSS, EXAMPLE_QWEN

QWEN = EXAMPLE_QWEN
GPT_OSS = EXAMPLE_GPT_OSS


def test_public_fit_data_point(tmp_path: Path) -> None:
    """tools/fit-params/README.md: experts of blocks 14-47 and the output layer on the CPU,
    ctx 4096 f16 KV -> CUDA0 model 17904 MiB, context 384 MiB (printed as whole MiB).

    That README was made by an older build where ``-ngl 48`` meant "all 48 blocks, output on
    the CPU"; in build 11434 the same flag keeps block 0 on the CPU and puts the output layer
    on the GPU, so the placement is given here by rules, not by -ngl."""
    facts = load_model_facts(write_header_only(tmp_path / "qwen3-30b-f16.gguf", quant="F16"))
    experts = Override(rf"blk\.(1[4-9]|[2-3][0-9]|4[0-7]){EXPS_REGEX}")
    placement = Placement(overrides=(Override(r"^output\."), Override(r"^output_norm\."), experts))
    memory = estimate(facts, placement, Settings(n_ctx=4096, type_k="f16", type_v="f16"))
    assert int(memory.gpu_weights_bytes / MIB) == 17904
    assert memory.gpu_kv_bytes == 384 * MIB


@pytest.fixture(scope="module")
def all_facts(tiny_models: dict[str, Path]) -> dict[str, ModelFacts]:
    facts = {arch: load_model_facts(tiny_models[arch]) for arch in ARCHS}
    facts["qwen3-30b"] = load_model_facts(QWEN)
    facts["gpt-oss-120b"] = load_model_facts(GPT_OSS)
    return facts


def _settings(facts: ModelFacts) -> Settings:
    big = facts.total_bytes > GIB
    return Settings(
        n_ctx=32768 if big else 4096,
        type_k="q8_0",
        type_v="q8_0",
        gpu_overhead_bytes=512 * MIB if big else 0,
    )


def _budgets(facts: ModelFacts, settings: Settings) -> list[int]:
    low = estimate(facts, Placement.all_experts_on_cpu(), settings).gpu_bytes
    high = estimate(facts, Placement(), settings).gpu_bytes
    return [low + (high - low) * k // 9 for k in range(10)]


@pytest.mark.parametrize(
    "name",
    ["qwen3moe", "gpt-oss", "deepseek2", "glm4moe", "qwen35moe", "qwen3-30b", "gpt-oss-120b"],
)
def test_smallest_n_and_ot_plan(all_facts: dict[str, ModelFacts], name: str) -> None:
    facts = all_facts[name]
    settings = _settings(facts)
    for budget in _budgets(facts, settings):
        plan = plan_n_cpu_moe(facts, DeviceBudgets.one(budget, settings), settings)
        n = plan.placement.n_cpu_moe
        assert n is not None
        assert plan.memory.gpu_bytes <= budget
        if n > 0:  # N is the smallest: N-1 does not fit
            assert estimate(facts, Placement.with_n_cpu_moe(n - 1), settings).gpu_bytes > budget
        alt = plan_override(facts, DeviceBudgets.one(budget, settings), settings)
        assert alt.memory.gpu_bytes <= budget
        assert alt.memory.gpu_weights_bytes >= plan.memory.gpu_weights_bytes
        # the -ot rules, applied by regex, give exactly the estimate the search used
        assert estimate(facts, alt.placement, settings) == alt.memory
        # routers, shared experts, attention and norms never leave the GPU
        split = split_weights(facts, alt.placement)
        full = split_weights(facts, Placement())
        assert split.gpu_other_bytes == full.gpu_other_bytes


@pytest.mark.parametrize("name", ["qwen3moe", "gpt-oss", "deepseek2", "qwen35moe", "qwen3-30b"])
def test_a_search_over_a_known_n_finds_the_same_n(
    all_facts: dict[str, ModelFacts], name: str
) -> None:
    """``over`` (the plan's N at a larger ubatch: -ub 2048's hint) gallops up from it and
    finds the N the whole range's search finds, whether ``over`` fits there or not."""
    facts = all_facts[name]
    settings = _settings(facts)
    bigger = replace(settings, n_ubatch=2048, n_batch=2048)
    for budget in _budgets(facts, settings)[1:]:
        target = DeviceBudgets.one(budget, bigger)
        try:
            whole = plan_n_cpu_moe(facts, target, bigger).placement.n_cpu_moe
        except DoesNotFitError:
            continue
        assert whole is not None
        for over in {0, max(whole - 3, 0), max(whole - 1, 0), whole, facts.n_layers - 1}:
            found = plan_n_cpu_moe(facts, target, bigger, over=over)
            assert found.placement.n_cpu_moe == whole, (budget, over)


def test_below_the_non_expert_weights_does_not_fit(all_facts: dict[str, ModelFacts]) -> None:
    facts = all_facts["qwen3-30b"]
    settings = _settings(facts)
    floor = estimate(facts, Placement.all_experts_on_cpu(), settings).gpu_bytes
    with pytest.raises(DoesNotFitError, match="does not fit"):
        plan_n_cpu_moe(facts, DeviceBudgets.one(floor - 1, settings), settings)
    with pytest.raises(DoesNotFitError):
        plan_override(facts, DeviceBudgets.one(floor - 1, settings), settings)


def test_max_context_is_the_largest_that_fits(all_facts: dict[str, ModelFacts]) -> None:
    facts = all_facts["qwen3-30b"]
    settings = _settings(facts)
    placement = Placement.with_n_cpu_moe(30)
    budget = 12 * GIB
    found = max_context(facts, DeviceBudgets.one(budget, settings), settings, n_cpu_moe=30)
    best = found[0] if found else None
    assert best is not None and best % 256 == 0
    at = replace(settings, n_ctx=best)
    assert estimate(facts, placement, at).gpu_bytes <= budget
    if best < (facts.context_length or 0):
        above = replace(settings, n_ctx=best + 256)
        assert estimate(facts, placement, above).gpu_bytes > budget


def test_make_plan_for_a_24g_card(all_facts: dict[str, ModelFacts]) -> None:
    facts = all_facts["qwen3-30b"]
    request = PlanRequest(
        model_path=str(QWEN),
        devices=single_device(_settings(facts), 24 * GIB),
        settings=_settings(facts),
        ram_total_bytes=64 * GIB,
        ram_available_bytes=48 * GIB,
        physical_cores=8,
    )
    result = make_plan(facts, request)
    assert result.fits
    assert result.budget_bytes == 24 * GIB - request.headrooms[0]
    assert result.recommended.memory.gpu_bytes <= result.budget_bytes
    assert result.ram.status == "ok"
    command = result.recommended.command
    assert command[:2] == ["llama-server", "-m"] and command[-2:] == ["--fit", "off"]
    assert "-t" in command and command[command.index("-t") + 1] == "8"


def test_dense_model_gets_a_layer_plan(all_facts: dict[str, ModelFacts]) -> None:
    facts = all_facts["qwen3"]
    settings = _settings(facts)
    full = estimate(facts, Placement(), settings)
    target = full.gpu_bytes - full.gpu_weights_bytes // 2
    request = PlanRequest(
        model_path="m.gguf",
        devices=single_device(settings, target),
        headrooms=(0,),
        settings=settings,
    )
    result = make_plan(facts, request)
    assert not result.is_moe and result.alternative is None
    assert 0 < result.recommended.n_gpu_layers < facts.n_layers + 1
    assert "--n-cpu-moe" not in result.recommended.command
    assert result.recommended.memory.gpu_bytes <= target


def test_ram_is_checked(all_facts: dict[str, ModelFacts]) -> None:
    facts = all_facts["gpt-oss-120b"]
    base = PlanRequest(
        model_path="m", devices=single_device(_settings(facts), 24 * GIB), settings=_settings(facts)
    )
    tight = make_plan(
        facts,
        replace(base, ram_total_bytes=64 * GIB, ram_available_bytes=30 * GIB),
    )
    assert tight.ram.status == "warn" and "page" in tight.ram.message
    small = make_plan(
        facts,
        replace(base, ram_total_bytes=32 * GIB, ram_available_bytes=30 * GIB),
    )
    assert small.ram.status == "fail" and not small.fits
