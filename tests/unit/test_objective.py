"""run --objective's candidate choice (core/objective.py), with a fake measure function."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from moetune.core.goal import Goal
from moetune.core.objective import (
    DEFAULT_MARGIN,
    MAX_EXTRA_LAUNCHES,
    Candidate,
    measure_candidates,
)
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.jobs.launch import LaunchSpec
from moetune.jobs.objective import with_ubatch
from moetune.units import Workload

BASE = Candidate(4, 512, 100.0)


def _fake(
    measured: dict[tuple[int, int], float | None],
) -> tuple[list[Candidate], Callable[[Candidate], float | None]]:
    calls: list[Candidate] = []

    def measure(candidate: Candidate) -> float | None:
        calls.append(candidate)
        return measured[(candidate.n_cpu_moe, candidate.n_ubatch)]

    return calls, measure


def test_best_forecast_first_and_the_fastest_measured_wins() -> None:
    candidates = [
        Candidate(5, 1024, 150.0),
        Candidate(6, 2048, 200.0),
        BASE,
        Candidate(4, 4096, None),  # no forecast: never launched
    ]
    calls, measure = _fake({(6, 2048): 60.0, (5, 1024): 70.0})
    # the base measured 50: forecasts are read at half their value (scale 0.5)
    choice = measure_candidates(candidates, BASE, 50.0, measure, error=0.1, goal="prefill")
    assert [(c.n_cpu_moe, c.n_ubatch) for c in calls] == [(6, 2048), (5, 1024)]
    assert [t.expected_score for t in choice.tried] == [100.0, 75.0]
    assert choice.winner == 1  # 70 measured beats the better forecast's 60
    assert "--n-cpu-moe 5 -ub 1024 measured 70 by prefill, +40%" in choice.why
    assert choice.stopped == "every candidate was measured"


def test_stops_when_the_rest_cannot_win() -> None:
    candidates = [Candidate(4, 2048, 300.0), Candidate(4, 1024, 105.0), Candidate(5, 512, 90.0)]
    calls, measure = _fake({(4, 2048): 280.0, (4, 1024): 110.0, (5, 512): 80.0})
    choice = measure_candidates(candidates, BASE, 100.0, measure, error=0.1, goal="prefill")
    # after 280 measured, 105 expected * 1.1 cannot beat it: one launch only
    assert len(calls) == 1
    assert choice.winner == 0
    assert choice.stopped.startswith("the rest cannot win: the best left, --n-cpu-moe 4 -ub 1024,")


def test_the_forecasts_made_again_after_a_launch_decide_the_next() -> None:
    first = [Candidate(4, 2048, 200.0), Candidate(4, 1024, 190.0), Candidate(5, 512, 180.0)]
    # calibrated on the first launch: 1024 now forecast below the base, 5/512 still above
    again = [Candidate(4, 2048, 200.0), Candidate(4, 1024, 60.0), Candidate(5, 512, 150.0)]
    calls, measure = _fake({(4, 2048): 90.0, (4, 1024): 500.0, (5, 512): 95.0})
    rounds: list[int] = []

    def reforecast() -> tuple[list[Candidate], Candidate, float | None]:
        rounds.append(len(calls))
        return again, Candidate(4, 512, 100.0), 0.05

    choice = measure_candidates(
        first, BASE, 100.0, measure, error=0.1, goal="prefill", reforecast=reforecast
    )
    # 5/512 (150) is launched before 4/1024 (60); then 60 * 1.05 cannot beat 100: stop
    assert [(c.n_cpu_moe, c.n_ubatch) for c in calls] == [(4, 2048), (5, 512)]
    assert rounds == [1, 2]
    assert choice.winner is None  # 90 and 95 measured: the base's 100 stays
    assert "the best left, --n-cpu-moe 4 -ub 1024, is expected at 60" in choice.stopped


def test_a_candidate_forecast_within_the_error_is_still_tried() -> None:
    calls, measure = _fake({(4, 1024): 99.0})
    choice = measure_candidates(
        [Candidate(4, 1024, 95.0)],
        BASE,
        100.0,
        measure,
        error=None,
        goal="decode",
    )
    assert 95.0 * (1 + DEFAULT_MARGIN) > 100.0
    assert len(calls) == 1 and choice.winner is None
    assert choice.why.startswith("kept --n-cpu-moe 4 -ub 512: no launch measured a better decode")


def test_at_most_four_extra_launches() -> None:
    candidates = [Candidate(4 + i, 1024, 200.0 - i) for i in range(8)]
    calls, measure = _fake({(c.n_cpu_moe, c.n_ubatch): None for c in candidates})
    choice = measure_candidates(candidates, BASE, 100.0, measure, error=0.1, goal="prefill")
    assert len(calls) == MAX_EXTRA_LAUNCHES == 4
    assert choice.winner is None  # none stayed within memory
    assert choice.stopped == "the limit of 4 extra launches"


def test_the_base_is_not_launched_again_and_an_unmeasured_base_launches_nothing() -> None:
    calls, measure = _fake({})
    choice = measure_candidates([BASE], BASE, 100.0, measure, error=0.1, goal="decode")
    assert calls == [] and choice.tried == []
    choice = measure_candidates(
        [Candidate(4, 2048, 500.0)],
        BASE,
        None,
        measure,
        error=0.1,
        goal="decode",
    )
    assert calls == [] and "was not measured" in choice.why


def test_goal_scores_measured_speeds_as_it_scores_forecasts() -> None:
    assert Goal("prefill").score_of(20.0, 400.0) == 400.0
    assert Goal("decode").score_of(20.0, 400.0) == 20.0
    assert Goal("balanced").score_of(25.0, 400.0) == 100.0
    # 8192 / 4096 + 512 / 32 = 18 s a request
    assert Goal(None, Workload(8192, 512)).score_of(32.0, 4096.0) == 1 / 18
    assert Goal(None, Workload(8192, 512)).score_of(32.0, None) is None


def test_with_ubatch_replaces_the_pass_through_ubatch_and_raises_the_batch() -> None:
    spec = LaunchSpec(
        binary=Path("llama-server"),
        model="m.gguf",
        settings=Settings(n_ctx=8192, n_ubatch=256, n_batch=1024),
        pass_through=("--rpc", "127.0.0.1:1", "-ub", "256", "--batch-size=1024"),
    )
    at = with_ubatch(spec, 2048)
    assert (at.settings.n_ubatch, at.settings.n_batch) == (2048, 2048)
    assert at.pass_through == ("--rpc", "127.0.0.1:1", "-ub", "2048", "-b", "2048")
    args = at.args(Placement.with_n_cpu_moe(3))
    assert args.count("-ub") == 1 and args[args.index("-ub") + 1] == "2048"
    smaller = with_ubatch(spec, 512)  # a larger batch stays
    assert smaller.pass_through[-4:] == ("-ub", "512", "-b", "1024")
