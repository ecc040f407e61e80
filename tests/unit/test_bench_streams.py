"""bench --parallel: rounds of N concurrent requests summed up (jobs/measure.py
``streams_result``) and kept as a speed point of N streams (jobs/speed.py ``streams_points``)."""

from __future__ import annotations

import pytest

from moetune.jobs.measure import Repeats, repeated_rounds, streams_result
from moetune.jobs.speed import streams_points
from moetune.records.results import Sample
from moetune.records.speed import SpeedMachine, SpeedModel, SpeedSource
from moetune.store.speed import point_digest


def _sample(decode: float, ttft: float) -> Sample:
    return Sample(
        prompt_n=16,
        predicted_n=64,
        ttft_s=ttft,
        prompt_ms=10.0,
        predicted_ms=64_000 / decode,
        prefill_tps=1600.0,
        decode_tps=decode,
        client_prefill_tps=None,
        client_decode_tps=None,
        wall_s=1.0,
        stop_type="limit",
    )


def test_aggregate_is_the_streams_summed_per_stream_their_mean() -> None:
    rounds = [
        [_sample(50, 0.1), _sample(60, 0.3)],
        [_sample(40, 0.2), _sample(40, 0.2)],
        [_sample(45, 0.1), _sample(55, 0.1)],
    ]
    found = streams_result("plan", 2, rounds)
    assert found.streams == 2 and found.prompt_n == 16 and found.predicted_n == 64
    assert found.decode_tps_aggregate.median == 100  # 110, 80, 100
    assert (found.decode_tps_aggregate.min, found.decode_tps_aggregate.max) == (80, 110)
    assert found.decode_tps_per_stream.median == 50  # 55, 40, 50
    assert found.ttft_s is not None
    assert found.ttft_s.median == pytest.approx(0.2)  # 0.2, 0.2, 0.1


def test_a_point_of_n_streams() -> None:
    found = streams_result("plan", 4, [[_sample(30, 0.1)] * 4, [_sample(25, 0.1)] * 4])
    args = ["-m", "m.gguf", "--n-cpu-moe", "3", "-np", "4", "-t", "2"]
    common = {
        "model": SpeedModel(file_name="m.gguf"),
        "machine": SpeedMachine(),
        "source": SpeedSource(tool="moetune bench", config="plan"),
    }
    (point,) = streams_points(found, args, **common)  # type: ignore[arg-type]
    assert point.kind == "generation" and point.n_streams == 4
    assert (point.n_depth, point.n_prompt, point.n_gen) == (16, 0, 64)
    assert point.tps == 110  # the median of 120 and 100
    assert point.samples_tps == [120, 100]
    assert point.placement.n_cpu_moe == 3
    one = point.model_copy(update={"n_streams": 1})
    assert point_digest([one]) != point_digest([point])


def test_rounds_repeat_until_their_aggregates_agree() -> None:
    """Rounds as a depth's requests: at least ``least``, more until the aggregates' spread is
    within the bound, at most ``most``."""
    sums = iter([100, 60, 95, 100, 98, 500])
    asked = Repeats(least=2, most=6, max_spread=0.1)

    def ask() -> list[Sample]:
        total = next(sums)
        return [_sample(total / 2, 0.1), _sample(total / 2, 0.1)]

    rounds, settled = repeated_rounds(ask, asked)
    # every round counts: once 60 is among them they never agree, so all 6 are asked
    assert len(rounds) == 6 and not settled
    calm = iter([100, 104, 200])
    rounds, settled = repeated_rounds(
        lambda: [_sample(next(calm), 0.1)], Repeats(least=2, most=5, max_spread=0.1)
    )
    assert len(rounds) == 2 and settled
