"""`run --objective`: which of the frontier's candidates to launch once memory has converged,
when to stop, and which measured one wins.

Each candidate's forecast is read relative to the converged placement's: its expected score
is its forecast scaled by the converged one's measured over forecast score, so a forecast
that is off by a constant factor still ranks right. Candidates are launched best forecast
first, at most ``MAX_EXTRA_LAUNCHES``, the forecasts made again after each launch (its
points calibrate them); the search stops when the next one's expected score,
raised by the forecast's error, cannot beat the best measured (the rest forecast less). The
winner is the best measured score among the launches that stayed within memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from moetune.record import record

MAX_EXTRA_LAUNCHES = 4
# the forecast's relative error where its fit has no leave-one-out figure (fewer than three
# points): a launch is tried unless it is forecast to lose by more than this
DEFAULT_MARGIN = 0.10


@record(frozen=True)
class Candidate:
    """A placement run can launch: ``--n-cpu-moe n_cpu_moe -ub n_ubatch`` (``-t threads``)."""

    n_cpu_moe: int
    n_ubatch: int
    forecast: float | None  # the goal's score, forecast (None: the forecast cannot rank it)
    threads: int | None = None  # -t (None: the converged launch's)


@record(kw_only=True)
class Tried:
    """One extra launch: its candidate, the forecast, the expected and the measured score."""

    n_cpu_moe: int
    n_ubatch: int
    forecast_score: float
    expected_score: float  # the forecast scaled by the converged placement's measured/forecast
    measured_score: float | None  # None: over memory, out of memory, or a speed not measured
    threads: int | None = None  # -t (None: the converged launch's)


@record(kw_only=True)
class Choice:
    """The launches made, the winner (None: the converged placement stays) and why."""

    tried: list[Tried]
    winner: int | None  # index into ``tried``
    stopped: str  # why no further candidate was launched
    why: str


def label(n_cpu_moe: int, n_ubatch: int, threads: int | None = None) -> str:
    return f"--n-cpu-moe {n_cpu_moe} -ub {n_ubatch}" + (f" -t {threads}" if threads else "")


# after each launch: the candidates, the converged placement and the error forecast again
# (calibrated on the points the launches added)
Reforecast = Callable[[], tuple[Sequence[Candidate], Candidate, float | None]]


def _key(candidate: Candidate) -> tuple[int, int, int | None]:
    return candidate.n_cpu_moe, candidate.n_ubatch, candidate.threads


def measure_candidates(
    candidates: Sequence[Candidate],
    base: Candidate,
    base_score: float | None,
    measure: Callable[[Candidate], float | None],
    *,
    error: float | None,
    goal: str,
    limit: int = MAX_EXTRA_LAUNCHES,
    reforecast: Reforecast | None = None,
) -> Choice:
    """Launch (``measure``) the candidates best forecast first, beside ``base`` (the converged
    placement, measured at ``base_score``); ``error``: the forecast's relative error (None:
    ``DEFAULT_MARGIN``); ``reforecast``: the forecasts again after each launch."""
    here = label(base.n_cpu_moe, base.n_ubatch)
    if not base_score or not base.forecast:
        why = f"kept {here}: " + (
            f"its {goal} was not measured" if not base_score else f"no forecast of its {goal}"
        )
        return Choice(tried=[], winner=None, stopped="nothing to compare with", why=why)
    tried: list[Tried] = []
    done = {_key(base)}
    best, winner = base_score, None
    stopped = "every candidate was measured"
    while True:
        if not base.forecast:
            stopped = f"no forecast of {here}'s {goal}"
            break
        margin = DEFAULT_MARGIN if error is None else error
        scale = base_score / base.forecast
        others = [c for c in candidates if c.forecast is not None and _key(c) not in done]
        if not others:
            break
        candidate = max(others, key=lambda c: c.forecast or 0.0)
        expected = (candidate.forecast or 0.0) * scale
        if expected * (1 + margin) <= best:
            stopped = (
                f"the rest cannot win: the best left, {label(*_key(candidate))}, is expected "
                f"at {expected:.4g}; {margin:.0%} more would not beat the best measured "
                f"{best:.4g}"
            )
            break
        if len(tried) >= limit:
            stopped = f"the limit of {limit} extra launches"
            break
        measured = measure(candidate)
        done.add(_key(candidate))
        tried.append(
            Tried(
                n_cpu_moe=candidate.n_cpu_moe,
                n_ubatch=candidate.n_ubatch,
                threads=candidate.threads,
                forecast_score=candidate.forecast or 0.0,
                expected_score=expected,
                measured_score=measured,
            )
        )
        if measured is not None and measured > best:
            best, winner = measured, len(tried) - 1
        if reforecast is not None:
            candidates, base, error = reforecast()
    if winner is None:
        why = f"kept {here}: no launch measured a better {goal} than its {base_score:.4g}"
    else:
        won = tried[winner]
        gain = best / base_score - 1
        why = (
            f"{label(won.n_cpu_moe, won.n_ubatch, won.threads)} measured {best:.4g} by {goal}, "
            f"{gain:+.0%} over {here}'s {base_score:.4g}"
        )
    return Choice(tried=tried, winner=winner, stopped=stopped, why=why)
