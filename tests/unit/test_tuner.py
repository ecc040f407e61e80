"""The search on synthetic measurements: converges to the smallest fitting N in few launches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from moetune.core.search import Attempt, Search, Split, best_attempt, tune
from moetune.errors import DoesNotFitError

MIB = 1 << 20
N_LAYERS = 48
LAYER = 300 * MIB  # experts of one block
BASE = 3000 * MIB  # everything else on the GPU


def predicted(n: int) -> int:
    return BASE + (N_LAYERS - n) * LAYER


def device(
    error: int, target: int, oom_above: int | None = None
) -> Callable[[int, Split], Attempt]:
    """A device whose real peak is the prediction plus ``error``; OOM past ``oom_above``."""

    def measure(n: int, split: Split) -> Attempt:
        real = predicted(n) + error
        if oom_above is not None and real > oom_above:
            return Attempt(
                n_cpu_moe=n, predicted_bytes=predicted(n), measured_bytes=None, status="oom"
            )
        status = "ok" if real <= target else "over"
        return Attempt(
            n_cpu_moe=n, predicted_bytes=predicted(n), measured_bytes=real, status=status
        )

    return measure


TARGET = 12 * 1024 * MIB


def truth(error: int, target: int = TARGET) -> int:
    return min(n for n in range(N_LAYERS + 1) if predicted(n) + error <= target)


@pytest.mark.parametrize("error", [-700 * MIB, -250 * MIB, 0, 1, 120 * MIB, 299 * MIB, 900 * MIB])
@pytest.mark.parametrize("start_offset", [-3, -1, 0, 1, 4])
def test_converges_in_three_launches(error: int, start_offset: int) -> None:
    search = Search.one(N_LAYERS, TARGET, predicted)
    start = truth(0) + start_offset
    attempts = tune(search, start, device(error, TARGET))
    best = best_attempt(attempts)
    assert best is not None and best.n_cpu_moe == truth(error)
    assert len(attempts) <= 3, [a.n_cpu_moe for a in attempts]
    if best.n_cpu_moe > 0:
        assert any(a.n_cpu_moe == best.n_cpu_moe - 1 and not a.fits for a in attempts)


def test_oom_without_a_figure_falls_back_to_bisection() -> None:
    search = Search.one(N_LAYERS, TARGET, predicted)
    error = 400 * MIB
    attempts = tune(search, 0, device(error, TARGET, oom_above=TARGET))
    best = best_attempt(attempts)
    assert best is not None and best.n_cpu_moe == truth(error)
    assert attempts[0].status == "oom"
    assert len(attempts) <= 8


def test_cannot_fit_even_with_every_expert_on_the_cpu() -> None:
    search = Search.one(N_LAYERS, BASE - 1, predicted)
    with pytest.raises(DoesNotFitError, match="every expert"):
        tune(search, N_LAYERS - 2, device(0, BASE - 1))


def test_everything_fits_at_zero() -> None:
    search = Search.one(N_LAYERS, predicted(0) + 1, predicted)
    attempts = tune(search, 0, device(0, predicted(0) + 1))
    assert [a.n_cpu_moe for a in attempts] == [0]


def _at(n: int, status: str, rules: list[str] | None = None) -> Attempt:
    return Attempt(
        n_cpu_moe=n,
        predicted_bytes=predicted(n),
        measured_bytes=predicted(n),
        status=status,
        override_tensor=rules or [],
    )


def test_the_ot_form_beside_n_wins_where_it_fits() -> None:
    """run's -ot launch keeps the N it was planned beside: where it fits it is the best, where
    it is over N's form stays, and it never moves what the search knows of N."""
    rules = ["blk\\.4\\.ffn_(up|down)_(ch|)exps=CPU"]
    converged = [_at(5, "ok"), _at(4, "over")]
    fitted = best_attempt([*converged, _at(5, "ok", rules)])
    assert fitted is not None and fitted.override_tensor == rules
    over = [*converged, _at(5, "over", rules)]
    kept = best_attempt(over)
    assert kept is not None and kept.n_cpu_moe == 5 and not kept.override_tensor
    search = Search.one(N_LAYERS, TARGET, predicted)
    assert search.bounds(over) == (4, 5) and search.done(over)
