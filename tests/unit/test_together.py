"""Several models planned together (core/together.py): the split of the devices' budgets by
the weighted forecast, the sum within every budget with each process's overhead counted, and
an RPC device that plans them one at a time."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.goal import Goal
from moetune.core.plan import PlanRequest, make_plan
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures
from moetune.core.together import (
    RPC_ONE_AT_A_TIME,
    TogetherPlan,
    candidates,
    parse_weights,
    plan_together,
)
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.split import read_model
from moetune.record import jsonable
from moetune.units import GIB, MIB

from support.helpers import EXAMPLE_QWEN, EXAMPLES

GPT_OSS_20B = EXAMPLES / "gpt-oss-20b-MXFP4.header.gguf"
SETTINGS = Settings(n_ctx=32768, type_k="q8_0", type_v="q8_0")
GPU = DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=1e14)
FULL = MachineFigures(devices=(GPU,), ram_bytes_per_s=60e9, cpu_flops_per_s=1e12)
DECODE = Goal("decode")


@cache
def _facts(path: str) -> ModelFacts:
    return facts_from_gguf(read_model(path))


def _request(devices: tuple[DeviceSpec, ...], ram: int = 128 * GIB) -> PlanRequest:
    return PlanRequest(
        model_path="m.gguf",
        devices=devices,
        headrooms=(GIB,),
        settings=SETTINGS,
        ram_total_bytes=ram,
        physical_cores=8,
        figures=FULL,
    )


def _models(
    devices: tuple[DeviceSpec, ...], ram: int = 128 * GIB
) -> list[tuple[str, ModelFacts, PlanRequest]]:
    return [
        (path.name, _facts(str(path)), replace(_request(devices, ram), model_path=path.name))
        for path in (EXAMPLE_QWEN, GPT_OSS_20B)
    ]


RTX_4090 = (DeviceSpec(total_bytes=24 * GIB),)


def _value(plan: TogetherPlan, weights: tuple[float, float]) -> float:
    return sum(
        w * (m.score or 0) / (m.alone_score or 1) for w, m in zip(weights, plan.models, strict=True)
    )


def test_the_sum_fits_each_model_its_own_placement_overhead_per_process() -> None:
    """Qwen3-30B and gpt-oss-20b on a 24 GiB card: each alone fills it (19+ and 12 GiB at its
    fastest), together their peaks add up within the 23 GiB budget, each with its own 512 MiB
    runtime overhead (two processes), each placement its own command."""
    found = plan_together(_models(RTX_4090), DECODE)
    assert found.together and found.models_max == 2
    budget = 23 * GIB
    assert found.device_budgets == [budget]
    peaks = [m.device_bytes[0] for m in found.models]
    assert found.device_sums == [sum(peaks)]
    assert sum(peaks) <= budget
    for m in found.models:
        assert m.plan.fits
        assert m.plan.first.memory.gpu_overhead_bytes == 512 * MIB  # once per model
        assert m.device_bytes == [d.total_bytes for d in m.plan.first.memory.devices]
    alone = [make_plan(f, r) for _, f, r in _models(RTX_4090)]
    assert sum(p.first.memory.gpu_bytes for p in alone) > budget  # alone they would not fit
    assert found.models[0].plan.first.command != found.models[1].plan.first.command


def test_the_split_is_the_weighted_best_not_equal_shares() -> None:
    """The split maximises the weighted sum of each model's forecast relative to its best
    alone: weighting Qwen3 up gives it more of the card and a faster forecast, and each split
    is the best by its own weights (no other combination of the candidates that fits scores
    higher)."""
    models = _models(RTX_4090)
    equal = plan_together(models, DECODE)
    qwen_first = plan_together(models, DECODE, (4.0, 1.0))
    assert qwen_first.models[0].device_bytes[0] > equal.models[0].device_bytes[0]
    assert (qwen_first.models[0].score or 0) > (equal.models[0].score or 0)
    assert (qwen_first.models[1].score or 0) < (equal.models[1].score or 0)
    assert [m.share for m in equal.models] != [8, 8]  # not equal shares
    options = [candidates(f, r, DECODE) for _, f, r in models]
    for weights, chosen in (((1.0, 1.0), equal), ((4.0, 1.0), qwen_first)):
        best = _value(chosen, weights)
        for a in options[0]:
            for b in options[1]:
                if a.device_bytes[0] + b.device_bytes[0] <= 23 * GIB:
                    value = sum(
                        w * (c.score or 0) / (o[-1].score or 1)
                        for w, c, o in zip(weights, (a, b), options, strict=True)
                    )
                    assert value <= best + 1e-9


def test_the_ram_is_shared_too() -> None:
    """The models' host bytes add up within the RAM: with too little RAM for both at their
    smallest placements (each fits alone), no split fits."""
    models = _models(RTX_4090, ram=8 * GIB)
    for _, facts, req in models:
        assert make_plan(facts, req).fits
    with pytest.raises(DoesNotFitError, match="do not fit together"):
        plan_together(models, DECODE)


def test_too_small_a_card_for_both() -> None:
    with pytest.raises(DoesNotFitError):
        plan_together(_models((DeviceSpec(total_bytes=3 * GIB),)), DECODE)


def test_an_rpc_device_plans_them_one_at_a_time() -> None:
    """ggml-rpc-server serves one process at a time: with an RPC device each model is planned
    alone with the whole budget, the result says so and asks for --models-max 1."""
    rpc = (
        DeviceSpec(name="RPC0", buft="RPC0", kind="rpc", overhead_bytes=0, total_bytes=24 * GIB),
    )
    found = plan_together(_models(rpc), DECODE)
    assert not found.together and found.models_max == 1
    assert found.warnings == [RPC_ONE_AT_A_TIME] and found.reason == RPC_ONE_AT_A_TIME
    for m, (_, facts, req) in zip(found.models, _models(rpc), strict=True):
        assert m.plan.first.command == make_plan(facts, req).first.command
    doc = jsonable(found)
    assert doc["together"] is False and doc["models_max"] == 1


def test_weights() -> None:
    assert parse_weights(None, 3) == (1.0, 1.0, 1.0)
    assert parse_weights("2, 1", 2) == (2.0, 1.0)
    for bad in ("1", "1,x", "0,1", "inf,1", "-1,2"):
        with pytest.raises(BadValueError):
            parse_weights(bad, 2)
    with pytest.raises(BadValueError, match="two models"):
        plan_together(_models(RTX_4090)[:1], DECODE)
