"""What a speed frontier is ordered by: ``--objective decode|prefill|balanced`` or
``--workload PROMPT:GEN`` (time per request = prompt / prefill + gen / decode)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from moetune.errors import BadValueError
from moetune.units import Workload

if TYPE_CHECKING:
    from moetune.core.speed import Forecast

# what plan's forecast is for: llama-bench's defaults, a 512-token prompt and decode at depth 0
FORECAST_PROMPT = 512
FORECAST_DEPTH = 0
Objective = Literal["decode", "prefill", "balanced"]
OBJECTIVES: tuple[Objective, ...] = ("decode", "prefill", "balanced")


# "balanced": llama-bench's default test, pp512 then tg128, as one request
BALANCED = Workload(512, 128)


class Goal(NamedTuple):
    """What the frontier is ordered by: an objective, or a workload's time per request."""

    objective: Objective | None = None  # None: ``workload``
    workload: Workload | None = None

    @property
    def name(self) -> str:
        if self.workload is not None:
            return f"workload {self.workload.n_prompt}:{self.workload.n_gen}"
        return self.objective or "decode"

    @property
    def n_prompt(self) -> int:
        """The prompt the prefill forecast is for."""
        return self.workload.n_prompt if self.workload else FORECAST_PROMPT

    @property
    def depth(self) -> int:
        """The depth the decode forecast is at: a workload's tokens come after its prompt."""
        return self.workload.n_prompt if self.workload else FORECAST_DEPTH

    def score(self, found: Forecast) -> float | None:
        """Higher is better: tok/s, or requests per second; None where a figure is missing."""
        decode, prefill = found.decode_tok_s, found.prefill_tok_s
        if self.workload is None and self.objective == "decode":
            return decode
        if self.workload is None and self.objective == "prefill":
            return prefill
        seconds = request_seconds(found, self.workload or BALANCED)
        return None if seconds is None else 1 / seconds


def goal_of(objective: str | None, workload: Workload | None) -> Goal:
    """The goal of ``--objective`` or ``--workload`` (a workload when both; default decode)."""
    if workload is not None:
        return Goal(None, workload)
    return Goal(parse_objective(objective or "decode"))


def request_seconds(found: Forecast, workload: Workload) -> float | None:
    """Time per request: prompt / prefill + gen / decode."""
    decode, prefill = found.decode_tok_s, found.prefill_tok_s
    if not decode or (workload.n_prompt and not prefill):
        return None
    return (workload.n_prompt / prefill if prefill else 0.0) + workload.n_gen / decode


def parse_objective(text: str) -> Objective:
    """``decode``, ``prefill`` or ``balanced``."""
    for objective in OBJECTIVES:
        if text == objective:
            return objective
    raise BadValueError(f"not an objective: {text!r}", hint="decode, prefill or balanced")
