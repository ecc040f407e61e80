"""core/calibrate.py: the speed model's factors fitted to points that core/speed itself
generated with set factors (the solver must find them again), the bounds, the minimum of two
points, leave-one-out, and a machine whose figures are unknown (effective rates)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moetune.core.calibrate import (
    Measured,
    fit_speed,
    fitted_forecast,
    point_forecast,
    solve_bounded,
)
from moetune.core.devices import DeviceSpec
from moetune.core.figures import FigureSource
from moetune.core.placement import Override, Placement
from moetune.core.settings import Settings
from moetune.core.speed import (
    DeviceFigures,
    Efficiency,
    MachineFigures,
    forecast,
    placement_layout,
)

from support.speed_fit import FIGURES, example_facts, example_layout

TRUE = Efficiency(device_memory=0.7, ram=0.55, link=0.8, device_compute=0.4, cpu_compute=0.5)


def _points(
    efficiency: Efficiency,
    placements: tuple[int, ...] = (8, 24, 40),
    ubatches: tuple[int, ...] = (512, 2048),
    token_s: float = 0.0,
) -> list[Measured]:
    """A decode point (tg128) and a prefill point (pp2048) per placement and ubatch, their
    speeds from core/speed with ``efficiency`` (and ``token_s`` more per generated token)."""
    points = []
    for n in placements:
        for ub in ubatches:
            layout = example_layout(n, ub)
            decode = forecast(layout, FIGURES, depth=64, efficiency=efficiency).decode_tok_s
            prefill = forecast(layout, FIGURES, n_prompt=2048, efficiency=efficiency).prefill_tok_s
            assert decode and prefill
            points.append(Measured(layout, 0, 128, 0, 1 / (1 / decode + token_s)))
            points.append(Measured(layout, 2048, 0, 0, prefill))
    return points


def test_recovers_set_factors() -> None:
    """Points made with known efficiencies: the fit finds each one, no fixed time, and
    forecasts its own points (and those left out) exactly."""
    fit = fit_speed(_points(TRUE), FIGURES)
    for kind in ("device_memory", "ram", "link"):
        assert getattr(fit.efficiency, kind) == pytest.approx(getattr(TRUE, kind), rel=1e-6)
    assert fit.token_overhead_s == 0
    assert fit.ubatch_overhead_s == 0
    assert fit.points == 12
    assert (fit.decode_points, fit.prefill_points) == (6, 6)
    assert fit.rates == {}
    assert fit.loo_median_error == pytest.approx(0, abs=1e-6)
    assert fit.loo_max_error is not None and fit.loo_max_error < 1e-3
    other = example_layout(32, 1024)
    want = forecast(other, FIGURES, n_prompt=4096, efficiency=TRUE)
    got = fitted_forecast(other, FIGURES, fit, n_prompt=4096)
    assert got.decode_tok_s == pytest.approx(want.decode_tok_s, rel=1e-6)
    assert got.prefill_tok_s == pytest.approx(want.prefill_tok_s, rel=1e-3)
    assert got.calibration.points == 12
    assert got.calibration.label.startswith("calibrated on 12 points, leave-one-out error 0.0 %")


def test_fixed_time_only_when_the_data_demands_it() -> None:
    """2 ms more per generated token than any bandwidth explains: a fixed time per token,
    found again (per block of the model's 48); without it (above) the fixed time stays 0.
    (The GPU's memory at its figure: a GPU term nearly constant over N and a fixed time are
    told apart only by noise-free data, and the fit prefers the factor at its bound.)"""
    true = replace(TRUE, device_memory=1.0)
    fit = fit_speed(_points(true, token_s=0.002), FIGURES)
    assert example_facts().n_layers == 48
    assert fit.token_overhead_s == pytest.approx(0.002 / 48, rel=1e-4)
    assert fit.efficiency.ram == pytest.approx(TRUE.ram, rel=1e-4)
    assert fit.efficiency.device_memory == 1.0


def test_factors_stay_within_their_bounds() -> None:
    """Measured faster than the figures allow: the efficiencies stop at 1 (a term cannot beat
    its figure) and nothing goes negative."""
    fast = [m._replace(tps=m.tps * 3) for m in _points(Efficiency())]
    fit = fit_speed(fast, FIGURES)
    for kind in ("device_memory", "ram", "link", "device_compute", "cpu_compute"):
        assert 0 < getattr(fit.efficiency, kind) <= 1
    assert fit.token_overhead_s >= 0 and fit.ubatch_overhead_s >= 0
    assert fit.loo_max_error is not None and fit.loo_max_error > 0.5  # it cannot reach them


def test_solver_against_brute_force() -> None:
    """The exact bounded least squares: the unconstrained optimum when it is feasible, the
    bound when it is not."""
    a = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    x = solve_bounded(a, [2.0, 3.0, 5.0], [0.0, 0.0])
    assert x == pytest.approx([2.0, 3.0])
    x = solve_bounded(a, [-2.0, 3.0, 1.0], [0.0, 0.0])
    assert x[0] == 0  # its optimum (-1.67) is below the bound
    assert x[1] == pytest.approx((3 + 1) / 2)


def test_two_points_at_least() -> None:
    """One point is not a fit; two are, with no leave-one-out error (one left is too few)."""
    points = [m for m in _points(TRUE) if m.is_decode]
    with pytest.raises(ValueError, match="needs 2"):
        fit_speed(points[:1], FIGURES)
    two = fit_speed([points[0], points[2]], FIGURES)
    assert two.points == 2
    assert two.loo_median_error is None
    assert two.calibration.label == "calibrated on 2 points, too few to leave one out"
    assert "link" not in two.fitted  # decode points reach no link


def test_leave_one_out_is_the_error_of_the_others_fit() -> None:
    """Noise on one point: its leave-one-out error is its error against the others' fit."""
    points = [m for m in _points(TRUE) if m.is_decode]
    noisy = [*points[:-1], points[-1]._replace(tps=points[-1].tps * 1.2)]
    fit = fit_speed(noisy, FIGURES)
    others = fit_speed(noisy[:-1], FIGURES)
    alone = point_forecast(noisy[-1], FIGURES, others)
    assert alone is not None
    assert fit.loo_max_error == pytest.approx(abs(alone - noisy[-1].tps) / noisy[-1].tps)
    assert fit.loo_max_error == pytest.approx(1 - 1 / 1.2, rel=1e-3)


def test_unknown_figures_become_effective_rates() -> None:
    """No figure at all: the fit returns the effective rates (figure x efficiency) the points
    were made with, and the forecast needs no figure any more."""
    blind = MachineFigures(devices=(DeviceFigures(),))
    fit = fit_speed(_points(TRUE), blind)
    assert fit.rates["device_memory"] == pytest.approx(1e12 * 0.7, rel=1e-6)
    assert fit.rates["ram"] == pytest.approx(60e9 * 0.55, rel=1e-6)
    assert fit.rates["link"] == pytest.approx(25e9 * 0.8, rel=1e-6)
    assert forecast(example_layout(32, 512), blind).decode_tok_s is None
    got = fitted_forecast(example_layout(32, 512), blind, fit)
    want = forecast(example_layout(32, 512), FIGURES, efficiency=TRUE)
    assert got.missing == []
    assert got.decode_tok_s == pytest.approx(want.decode_tok_s, rel=1e-6)


def test_hops_between_homes() -> None:
    """Block by block, its other weights' home then its experts': every expert on the GPU, no
    hop; --n-cpu-moe 2, blocks 0 and 1 go GPU -> CPU -> GPU (4 hops); every expert on the CPU,
    2 per block (96); on two devices the split between them adds one."""
    facts = example_facts()
    settings = Settings(n_ctx=4096)
    one = (DeviceSpec(),)
    assert example_layout(0, 512).n_hops == 0
    assert example_layout(2, 512).n_hops == 4
    assert placement_layout(facts, Placement.all_experts_on_cpu(), settings, one).n_hops == 96
    two = (DeviceSpec(name="CUDA0", buft="CUDA0"), DeviceSpec(name="CUDA1", buft="CUDA1"))
    split = Placement.with_n_cpu_moe(2, tensor_split=(1.0, 1.0))
    assert placement_layout(facts, split, settings, two).n_hops == 5


def test_a_fixed_time_per_hop() -> None:
    """0.1 ms more per hop of a generated token: found again as the time per hop. Under
    --n-cpu-moe the hops grow with the RAM's bytes (both with N); only the down projections
    of blocks 0..15 on the CPU (a third of their bytes, as many hops) tell them apart."""
    one = (DeviceSpec(),)
    settings = Settings(n_ctx=8192)
    down = tuple(Override(f"blk\\.{i}\\.ffn_down_exps") for i in range(16))
    placements = [Placement.with_n_cpu_moe(n) for n in (8, 24, 40)] + [Placement(overrides=down)]
    points = []
    for placement in placements:
        layout = placement_layout(example_facts(), placement, settings, one)
        tps = forecast(layout, FIGURES, depth=64, efficiency=TRUE).decode_tok_s
        assert tps
        points.append(Measured(layout, 0, 128, 0, 1 / (1 / tps + 1e-4 * layout.n_hops)))
    fit = fit_speed(points, FIGURES)
    assert fit.hop_overhead_s == pytest.approx(1e-4, rel=1e-4)
    assert fit.efficiency.ram == pytest.approx(TRUE.ram, rel=1e-4)
    assert fit.token_overhead_s == 0


def test_a_fit_of_assumed_figures_keeps_the_thread_terms_cores() -> None:
    """A calibration fits an effective rate for an assumed figure (``without("assumed")``);
    the cores and the single-thread share stay, so that a point measured at -t 1 of 2 cores
    is read at half the CPU, as its forecast is (they were dropped: the fit read it at all
    of it and a -t 1 forecast of four streams on the rig came out 35 % slow)."""
    cpu = FigureSource(
        figure="CPU FLOP/s", value=1e11, provenance="assumed", basis="typical", quantity="cpu"
    )
    machine = MachineFigures(
        devices=(DeviceFigures(),),
        ram_bytes_per_s=5e10,
        cpu_flops_per_s=1e11,
        physical_cores=2,
        ram_single_thread_share=0.4,
        sources=(cpu,),
    )
    fitted = machine.without("assumed")
    assert fitted.cpu_flops_per_s is None and fitted.ram_bytes_per_s == 5e10
    assert fitted.physical_cores == 2 and fitted.ram_single_thread_share == 0.4
    assert fitted.sources == ()
