"""One calibration per machine: the points of one model calibrate the forecast of another
(core/calibrate.py's factors and fixed times per block are the machine's), which points are
of the same machine (records/speed.py ``same_machine``), and how a forecast says what
calibrated it (core/speed.py ``ForecastCalibration``)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from moetune.core.calibrate import Measured, fit_speed, fitted_forecast
from moetune.core.speed import (
    Efficiency,
    ForecastCalibration,
    SpeedLayout,
    forecast,
)
from moetune.records.speed import SpeedMachine, same_machine

from support.speed_fit import FIGURES, QWEN, example_facts, example_layout, speed_forecast_lines

# the GPU's memory at its figure: a GPU term nearly constant over N and a fixed time are
# told apart only by noise-free data (tests/unit/test_calibrate.py)
TRUE = Efficiency(device_memory=1.0, ram=0.55, link=0.8, device_compute=0.4, cpu_compute=0.5)
BLOCK_TOKEN_S = 5e-5  # per block of the model, per generated token
GPT_OSS = "gpt-oss-20b-MXFP4.header.gguf"  # 24 blocks


def _decode(layout: SpeedLayout) -> float:
    """What the machine (TRUE, and BLOCK_TOKEN_S per block) decodes at."""
    tps = forecast(layout, FIGURES, depth=64, efficiency=TRUE).decode_tok_s
    assert tps
    return 1 / (1 / tps + BLOCK_TOKEN_S * layout.n_blocks)


def _points(name: str, placements: tuple[int, ...], model: str | None) -> list[Measured]:
    points = []
    for n in placements:
        for ub in (512, 2048):
            layout = example_layout(n, ub, name)
            prefill = forecast(layout, FIGURES, n_prompt=2048, efficiency=TRUE).prefill_tok_s
            assert prefill
            points.append(Measured(layout, 0, 128, 0, _decode(layout), model))
            points.append(Measured(layout, 2048, 0, 0, prefill, model))
    return points


def test_points_of_one_model_forecast_another() -> None:
    """Points of Qwen3-30B-A3B (48 blocks) made with set factors and a fixed time per block:
    the fit finds them, and forecasts gpt-oss-20b (24 blocks, another routing share) on the
    same machine as the machine runs it."""
    assert (example_facts(QWEN).n_layers, example_facts(GPT_OSS).n_layers) == (48, 24)
    fit = fit_speed(_points(QWEN, (8, 24, 40), QWEN), FIGURES)
    assert fit.token_overhead_s == pytest.approx(BLOCK_TOKEN_S, rel=1e-4)
    assert fit.efficiency.ram == pytest.approx(TRUE.ram, rel=1e-4)
    for n in (0, 8, 20):
        layout = example_layout(n, 1024, GPT_OSS)
        got = fitted_forecast(layout, FIGURES, fit, depth=64, n_prompt=4096)
        want = forecast(layout, FIGURES, n_prompt=4096, efficiency=TRUE).prefill_tok_s
        assert got.decode_tok_s == pytest.approx(_decode(layout), rel=1e-3)
        assert got.prefill_tok_s == pytest.approx(want, rel=5e-3)  # within the fit's tolerance
    # a fixed time per token (not per block) would forecast gpt-oss-20b's decode too slow
    per_token = replace(fit, token_overhead_s=fit.token_overhead_s * 48 / 24)
    slow = fitted_forecast(example_layout(8, 1024, GPT_OSS), FIGURES, per_token, depth=64)
    assert slow.decode_tok_s is not None
    assert slow.decode_tok_s < 0.99 * _decode(example_layout(8, 1024, GPT_OSS))


def test_the_label_says_which_models_calibrated_it() -> None:
    other = fit_speed(_points(QWEN, (8, 40), QWEN), FIGURES)
    assert (other.own_points, other.other_models) == (0, (QWEN,))
    assert other.calibration.label.startswith(
        "calibrated on 8 points of 1 other model, leave-one-out error "
    )
    mixed = fit_speed(_points(QWEN, (8, 40), QWEN) + _points(GPT_OSS, (4,), None), FIGURES)
    assert mixed.calibration.own_points == 4
    assert mixed.calibration.other_models == (QWEN,)
    assert mixed.calibration.label.startswith(
        "calibrated on 12 points (4 of this model, 8 of 1 other model), leave-one-out error "
    )
    own = fit_speed(_points(GPT_OSS, (4, 12), None), FIGURES)
    assert own.calibration.own_points == 8 and own.calibration.other_models == ()
    assert own.calibration.label.startswith("calibrated on 8 points, leave-one-out error ")
    two = ForecastCalibration(points=9, own_points=0, other_models=("a.gguf", "b.gguf"))
    assert two.label == "calibrated on 9 points of 2 other models, too few to leave one out"


CPU = "AMD Ryzen 9 7950X 16-Core Processor"
RTX = SpeedMachine(cpu_info=CPU, gpu_info="NVIDIA GeForce RTX 4080", backends=["CUDA"])


@pytest.mark.parametrize(
    ("point", "same"),
    [
        (RTX, True),
        (RTX.model_copy(update={"devices": ["CUDA0"]}), True),  # llama-bench: none named
        (RTX.model_copy(update={"cpu_info": "Intel(R) Core(TM) i9-14900K"}), False),
        (RTX.model_copy(update={"cpu_info": None}), False),  # an unknown CPU is no machine
        (RTX.model_copy(update={"gpu_info": "NVIDIA GeForce RTX 3090"}), False),
        # llama-bench records its build's backends, moetune its devices': not compared
        (RTX.model_copy(update={"backends": ["Vulkan", "RPC"]}), True),
        (RTX.model_copy(update={"gpu_info": None, "backends": []}), True),  # said nothing
    ],
)
def test_same_machine(point: SpeedMachine, same: bool) -> None:
    here = RTX.model_copy(update={"devices": ["CUDA0"]})
    assert same_machine(point, here) is same
    assert same_machine(here, point) is same


def test_a_plan_for_devices_not_found_here_is_this_cpu() -> None:
    """``--vram`` or ``--gpu``: only the CPU is known, every device of it is this machine;
    two GPUs found here are not one of them."""
    cpu_only = SpeedMachine(cpu_info=CPU)
    assert same_machine(RTX, cpu_only)
    two = RTX.model_copy(
        update={"gpu_info": "NVIDIA GeForce RTX 4080, NVIDIA GeForce RTX 4080", "devices": None}
    )
    assert same_machine(two, cpu_only)
    here = RTX.model_copy(update={"devices": ["CUDA0"]})
    assert not same_machine(two.model_copy(update={"devices": ["CUDA0", "CUDA1"]}), here)


def test_the_benchmark_prints_cross_model_calibration() -> None:
    """benchmarks/speed_forecast.py: each pair of models of one machine, every pair together,
    and the same-model calibrated error over every public sweep."""
    lines = speed_forecast_lines()
    start = lines.index(
        "cross-model calibration (calibrated on one model, forecasting another, same machine)"
    )
    pairs = [
        line for line in lines[start:] if re.match(r"^    \S+ \(\d+ points\) -> \S+: median ", line)
    ]
    # the Arc B580 box: Qwen3-30B-A3B, gpt-oss-120b, gpt-oss-20b, each to the two others
    assert len(pairs) == 6
    assert any(
        re.match(r"^  cross-model, every pair: median \d+\.\d%, max", line) for line in lines
    )
    assert any(
        re.match(r"^same-model calibration, every public sweep together: median \d+\.\d%", line)
        for line in lines
    )
