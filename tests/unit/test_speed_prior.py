"""core/prior.py: the typical factors an uncalibrated forecast uses are what the public
sweeps fit (scripts/speed-prior.py), and a forecast without a fit uses them; core/routing.py:
the routing exponents are what the public copy-all / copy-used pairs fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moetune.core.calibrate import fit_pooled, fitted_forecast, point_forecast
from moetune.core.prior import PUBLIC_PRIOR, SpeedPrior
from moetune.core.routing import ROUTING_EXPONENT, routing_exponent, touched_share
from moetune.core.speed import Efficiency, forecast

from support.public_sweeps import PAIRS, PUBLIC, fit_prior, fit_routing, prior_samples, touched_of


def test_prior_is_what_the_public_sweeps_fit() -> None:
    assert fit_prior() == PUBLIC_PRIOR
    assert PUBLIC_PRIOR.points == len(prior_samples())
    assert PUBLIC_PRIOR.machines >= 3


def test_leaving_a_machine_out_drops_its_points() -> None:
    quadro = next(s for s in PUBLIC if s.gpu_profile == "quadro-rtx5000").machine
    without = prior_samples(without=quadro)
    assert without and all(machine != quadro for machine, _, _ in without)
    assert len(without) < len(prior_samples())


def test_pooled_fit_recovers_known_factors() -> None:
    """Points made from known factors (efficiencies and a fixed time per block) give them
    back: the pooled fit reads each point with its own machine's figures."""
    samples = prior_samples()
    truth = SpeedPrior(
        efficiency=Efficiency(device_memory=0.5, ram=0.8),
        block_token_s=2e-5,
        points=0,
        machines=0,
    )
    made = []
    for _, m, figures in samples:
        speed = point_forecast(m, figures, None, truth)
        assert speed is not None
        made.append((m._replace(tps=speed), figures))
    fit = fit_pooled(made)
    assert fit.efficiency.ram == pytest.approx(0.8, rel=1e-3)
    assert fit.efficiency.device_memory == pytest.approx(0.5, rel=1e-3)
    assert fit.token_overhead_s == pytest.approx(2e-5, rel=1e-3)


def test_uncalibrated_forecast_uses_the_prior() -> None:
    _, m, figures = next(s for s in prior_samples() if s[1].is_decode)
    raw = forecast(m.layout, figures, n_prompt=1)
    typical = fitted_forecast(m.layout, figures, None, n_prompt=1)
    alone = fitted_forecast(m.layout, figures, None, n_prompt=1, prior=None)
    assert alone.decode_tok_s == raw.decode_tok_s
    assert typical.decode_tok_s is not None and raw.decode_tok_s is not None
    assert typical.decode_tok_s < raw.decode_tok_s  # the typical machine is below its figures
    assert typical.calibration.label == "uncalibrated"


def test_pooled_fit_refuses_a_sample_without_its_figures() -> None:
    _, m, figures = prior_samples()[0]
    blind = replace(figures, ram_bytes_per_s=None)
    decode = next(s for s in prior_samples() if s[1].is_decode and s[1].layout.cpu.expert_bytes)
    with pytest.raises(ValueError, match="lacks"):
        fit_pooled([(m, figures), (decode[1], blind)])


def test_routing_is_what_the_pairs_fit() -> None:
    """core/routing.py's exponents are the public copy-all / copy-used pairs' fit; each in
    (0, 1]."""
    assert fit_routing() == ROUTING_EXPONENT
    assert all(0 < a <= 1 for a in ROUTING_EXPONENT.values())


def test_the_pairs_show_gpt_oss_touching_fewer_experts() -> None:
    """Per pair, the share copy used copies of copy all's (the module's derivation): gpt-oss
    well below uniform routing's (which is all of them, 1 - (7/8)^256 = 1 - 1.5e-15), growing
    with the ubatch; DeepSeek-V2-Lite all of them."""
    shares = {pair.file: touched_of(pair) for pair in PAIRS}
    ik_20b = [t.share for t in shares["ik_llama-pr698-gptoss20b-4080-7950x-cpuexps-ubatch.json"]]
    assert ik_20b == sorted(ik_20b)
    assert 0.7 < ik_20b[0] < 0.75  # ubatch 256
    lite = shares["ik_llama-pr698-deepseeklite-4080-7950x-cpuexps-ubatch.json"]
    assert all(t.share == pytest.approx(1.0, abs=0.01) for t in lite)


def test_touched_share_is_bounded_and_grows() -> None:
    """One token touches k/n of the experts whatever the exponent; more tokens more, never
    above all of them."""
    for a in (1.0, *ROUTING_EXPONENT.values()):
        assert touched_share(4, 128, 1, a) == 4 / 128
        shares = [touched_share(4, 128, u, a) for u in (1, 32, 512, 4096, 65536)]
        assert shares == sorted(shares) and shares[-1] <= 1.0
    assert touched_share(4, 128, 512, 0.5) == pytest.approx(1 - (124 / 128) ** (512**0.5))
    assert routing_exponent("qwen3moe") == 1.0
