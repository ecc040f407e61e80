"""Typical factors for a machine moetune has not measured: how far below its figures
llama.cpp runs, and its fixed times, fitted once on public llama-bench measurements of
machines whose figures are public (benchmarks/data/public_sweeps/, each with its source).

An uncalibrated forecast (no speed point of this model on this machine) times each term
from the machine's figures with these efficiencies, and adds a generated token's fixed time
per block of the model (kernel launches, the activations' copies, the waits). No fixed time
per prompt ubatch or per hop: fitted on a few machines, they explained away one machine's
compute and carried to no other.
A calibration on the user's own points replaces all of it. The values are written by
``scripts/speed-prior.py`` (a pooled fit, core/calibrate.py ``fit_pooled``); a test refits
them from the data and fails when they drift. benchmarks/speed_forecast.py measures the
error of a prior fitted without the machine it forecasts (leave one machine out).
"""

from __future__ import annotations

from moetune.core.speed import Efficiency
from moetune.record import record, require


@record(frozen=True, kw_only=True)
class SpeedPrior:
    """Efficiencies (of each kind's figure) and fixed times, and what they rest on."""

    efficiency: Efficiency
    block_token_s: float  # per block of the model, per generated token
    points: int  # the public measurements it is fitted on
    machines: int  # ... of this many machines

    def __post_init__(self) -> None:
        for name in ("block_token_s", "points", "machines"):
            require(self, name, getattr(self, name) >= 0, "0 or more")


# scripts/speed-prior.py prints this from benchmarks/data/public_sweeps/
PUBLIC_PRIOR = SpeedPrior(
    efficiency=Efficiency(
        device_memory=0.452, ram=0.676, link=0.534, device_compute=0.232, cpu_compute=1.0, points=40
    ),
    block_token_s=0.0,
    points=40,
    machines=6,
)

# benchmarks/speed_forecast.py prints this: the median relative error of tok/s of an
# uncalibrated forecast over every row of the public sweeps, each machine's forecast made with
# a prior fitted without its points (leave one machine out) and with its figures as a new
# machine would have them (published, derived, or assumed from core/figures.py's classes);
# what an uncalibrated forecast says it may be off by. A test recomputes it.
UNCALIBRATED_ERROR = 0.099
