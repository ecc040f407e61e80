"""When a measurement is too noisy to calibrate on: the two bounds, in one place.

A point's samples (llama-bench's ``samples_ts``, a bench's requests) disagree when their
spread, ``(max - min) / median`` (units.spread), is above ``POINT_SPREAD_BOUND``; a fit's
points disagree when its leave-one-out median error of tok/s (core/calibrate.py) is above
``LOO_ERROR_BOUND``. `calibrate --measure` measures a configuration whose samples disagree
once more, then refuses it, and keeps no point of a measure whose fit is beyond the bound;
a forecast whose fit is beyond it stays uncalibrated (docs/speed.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from moetune.units import NOISY_SPREAD, spread

# The spread bench's report already calls noisy (units.NOISY_SPREAD, 20 %): one word, one
# bound. On the test rig, quiet, a llama-bench test's repetitions agree within a few percent;
# two CPU-bound processes beside it spread them 2x (18.1-38.8 tok/s at N 2, issue 39).
POINT_SPREAD_BOUND = NOISY_SPREAD
# Twice the worst leave-one-out median error the rig's calibration measured on a quiet machine
# (12.8 %, docs/speed.md; the public sweeps 0.3-4.8 %), half of the loaded machine's 50.5 %
# (issue 39): a fit worse than this forecasts worse than the typical factors do uncalibrated
# (the public sweeps' worst median, 36.5 %, is the same order).
LOO_ERROR_BOUND = 0.25


def samples_spread(samples: Sequence[float]) -> float | None:
    """The spread of a measurement's samples, ``(max - min) / median``; None with fewer than
    two (a single sample says nothing of its noise)."""
    if len(samples) < 2:
        return None
    import statistics  # only where there are samples: a plan without points skips it

    return spread(statistics.median(samples), min(samples), max(samples))


def samples_disagree(samples: Sequence[float], bound: float = POINT_SPREAD_BOUND) -> bool:
    """Whether the samples spread beyond ``bound`` (never with fewer than two)."""
    found = samples_spread(samples)
    return found is not None and found > bound


def loo_beyond_bound(error: float | None, bound: float = LOO_ERROR_BOUND) -> bool:
    """Whether a fit's leave-one-out median error is beyond ``bound`` (None: too few points to
    leave one out, which no bound judges)."""
    return error is not None and error > bound


def percent(share: float) -> str:
    """``50 %``, ``4.5 %``: a share as the messages write it."""
    return (f"{share:.0%}" if share >= 0.1 else f"{share:.1%}").replace("%", " %")


def loo_text(error: float, bound: float = LOO_ERROR_BOUND) -> str:
    """``leave-one-out error 50 %, bound 25 %``."""
    return f"leave-one-out error {percent(error)}, bound {percent(bound)}"
