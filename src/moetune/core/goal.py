"""What a speed frontier is ordered by: ``--objective decode|prefill|balanced`` or
``--workload PROMPT:GEN`` (time per request = prompt / prefill + gen / decode).

``decode``: tok/s at depth 0; ``prefill``: tok/s of a ``LONG_PROMPT`` (as long as the largest
``-ub`` candidate, so that every ubatch is told apart: a 512-token prompt is one ubatch of any
of them); ``balanced``: the geometric mean of both (a gain in either counts the same).
Under ``--parallel N`` (N concurrent streams, core/speed.py): ``throughput``, the decode tok/s
of all N streams together; ``latency``, one stream's (what ``decode`` is too; at one stream
both are decode)."""

from __future__ import annotations

from math import sqrt
from typing import TYPE_CHECKING, Literal

from moetune.errors import BadValueError
from moetune.record import record
from moetune.units import Workload

if TYPE_CHECKING:
    from moetune.core.settings import Settings
    from moetune.core.speed import Forecast

# what plan's forecast is for: llama-bench's defaults, a 512-token prompt and decode at depth 0
FORECAST_PROMPT = 512
FORECAST_DEPTH = 0
UBATCHES = (512, 1024, 2048, 4096)  # the frontier's -ub candidates
LONG_PROMPT = max(UBATCHES)
Objective = Literal["decode", "prefill", "balanced", "throughput", "latency"]
OBJECTIVES: tuple[Objective, ...] = ("decode", "prefill", "balanced", "throughput", "latency")
DECODE_OBJECTIVES: tuple[Objective, ...] = ("decode", "throughput", "latency")


@record(frozen=True)
class Goal:
    """What the frontier is ordered by: an objective, or a workload's time per request."""

    objective: Objective | None = None  # None: ``workload``
    workload: Workload | None = None
    prompt: int | None = None  # the prompt a prefill is forecast for (run: its fill)

    @property
    def name(self) -> str:
        if self.workload is not None:
            return f"workload {self.workload.n_prompt}:{self.workload.n_gen}"
        return self.objective or "decode"

    @property
    def n_prompt(self) -> int:
        """The prompt the prefill forecast is for."""
        if self.prompt is not None:
            return self.prompt
        if self.workload is not None:
            return self.workload.n_prompt
        decode = self.objective is None or self.objective in DECODE_OBJECTIVES
        return FORECAST_PROMPT if decode else LONG_PROMPT

    @property
    def depth(self) -> int:
        """The depth the decode forecast is at: a workload's tokens come after its prompt."""
        return self.workload.n_prompt if self.workload else FORECAST_DEPTH

    def score(self, found: Forecast) -> float | None:
        """Higher is better: tok/s, their geometric mean, or requests per second; None where
        a figure is missing."""
        return self.score_of(found.decode_tok_s, found.prefill_tok_s, streams=found.streams)

    def score_of(
        self, decode: float | None, prefill: float | None, *, streams: int = 1
    ) -> float | None:
        """``score`` of a decode (one stream's, of ``streams`` concurrent ones) and a prefill
        speed (forecast or measured)."""
        if self.objective == "throughput":
            return None if decode is None else decode * max(streams, 1)
        if self.workload is not None:
            seconds = workload_seconds(decode, prefill, self.workload)
            return None if seconds is None else 1 / seconds
        if self.objective == "prefill":
            return prefill
        if self.objective == "balanced":
            return sqrt(decode * prefill) if decode and prefill else None
        return decode


def goal_of(objective: str | None, workload: Workload | None) -> Goal:
    """The goal of ``--objective`` or ``--workload`` (a workload when both; default decode)."""
    if workload is not None:
        return Goal(None, workload)
    return Goal(parse_objective(objective or "decode"))


def check_workload(workload: Workload | None, settings: Settings) -> None:
    """BadValueError where one request of ``workload`` (its prompt and the tokens it
    generates) does not fit the context a request gets: the whole context, or with an
    explicit ``--parallel N`` (its own cache per slot) one slot's share of it. Refused rather
    than capped: a forecast for a shorter request is not the one asked for."""
    if workload is None:
        return
    need = workload.n_prompt + workload.n_gen
    shared = settings.kv_unified or settings.n_seq == 1
    room = settings.n_ctx if shared else settings.n_ctx // settings.n_seq
    if need <= room:
        return
    where = (
        f"the context of {settings.n_ctx} tokens"
        if shared
        else f"one slot's context of {room} tokens ({settings.n_ctx} over {settings.n_seq} slots)"
    )
    raise BadValueError(
        f"--workload {workload.n_prompt}:{workload.n_gen} needs {need} tokens, more than {where}",
        hint="raise --ctx, or give a shorter workload",
    )


def request_seconds(found: Forecast, workload: Workload) -> float | None:
    """Time per request: prompt / prefill + gen / decode."""
    return workload_seconds(found.decode_tok_s, found.prefill_tok_s, workload)


def workload_seconds(
    decode: float | None, prefill: float | None, workload: Workload
) -> float | None:
    """Time per request at these speeds (None where one the workload needs is missing)."""
    if not decode or (workload.n_prompt and not prefill):
        return None
    return (workload.n_prompt / prefill if prefill else 0.0) + workload.n_gen / decode


def parse_objective(text: str) -> Objective:
    """``decode``, ``prefill``, ``balanced``, ``throughput`` or ``latency``."""
    for objective in OBJECTIVES:
        if text == objective:
            return objective
    raise BadValueError(
        f"not an objective: {text!r}", hint="decode, prefill, balanced, throughput or latency"
    )
