"""The run loop: plan -> launch -> fill -> measure -> next N -> converge.

The search is pure: it calls a ``measure(n)`` function and never touches a process itself,
so it is tested on recorded figures as well as on a real llama-server. One measurement
calibrates the prediction (the bytes each block's experts take are known exactly, so the
measured-minus-predicted error carries over to every N); bisection is the fallback when a
launch gives no figure (out of memory at load).

Done when the smallest N whose measured peak is within the target is known, and N-1 is over
the target or out of memory (or N is 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pydantic import BaseModel, computed_field

from moetune.errors import DoesNotFitError
from moetune.units import format_bytes, is_noisy


class Attempt(BaseModel):
    """One launch: the N tried, what was predicted and measured, and how it went."""

    n_cpu_moe: int
    predicted_bytes: int
    measured_bytes: int | None
    status: str  # ok | over | oom
    ttft_s: float | None = None  # of the fill: the whole context as one prompt
    prompt_tps: float | None = None  # of the fill
    decode_tps: float | None = None  # median of the timed requests (or the fill's, alone)
    decode_tps_min: float | None = None
    decode_tps_max: float | None = None
    repeats: int = 0  # timed requests behind decode_tps
    log_path: str | None = None
    message: str | None = None
    # several devices: the -ts split and each device's figures (the sums above add them up)
    tensor_split: list[float] = []
    device_predicted: list[int] = []
    device_measured: list[int | None] = []

    @property
    def fits(self) -> bool:
        return self.status == "ok"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def noisy(self) -> bool:
        """The decode speeds of the repeats spread over more than 20 % of their median."""
        return is_noisy(self.decode_tps, self.decode_tps_min, self.decode_tps_max)


def bounds(attempts: list[Attempt]) -> tuple[int, int | None]:
    """(largest N known over, smallest N known to fit)."""
    over = max((a.n_cpu_moe for a in attempts if not a.fits), default=-1)
    fits = min((a.n_cpu_moe for a in attempts if a.fits), default=None)
    return over, fits


def done(attempts: list[Attempt]) -> bool:
    """The smallest fitting N is confirmed: it is 0, or N-1 is known over."""
    over, fits = bounds(attempts)
    return fits is not None and (fits == 0 or over == fits - 1)


class Search(NamedTuple):
    """The state of the search between launches."""

    n_max: int  # --n-cpu-moe value that puts every expert on the CPU
    target_bytes: int
    predict: Callable[[int], int]  # predicted device peak at N

    def error(self, attempts: list[Attempt]) -> int | None:
        """Measured minus predicted, from the latest launch that gave a figure."""
        for attempt in reversed(attempts):
            if attempt.measured_bytes is not None:
                return attempt.measured_bytes - attempt.predicted_bytes
        return None

    def bounds(self, attempts: list[Attempt]) -> tuple[int, int | None]:
        return bounds(attempts)

    def done(self, attempts: list[Attempt]) -> bool:
        return done(attempts)

    def next_n(self, attempts: list[Attempt]) -> int:
        """The next N to launch, strictly between what is known over and what fits."""
        over, fits = self.bounds(attempts)
        high = self.n_max if fits is None else fits - 1
        low = over + 1
        if low > high:
            raise DoesNotFitError(
                f"does not fit in {format_bytes(self.target_bytes)} even with every expert "
                "on the CPU",
                hint="lower --ctx, use --cache-type q4_0, or a smaller quant",
            )
        error = self.error(attempts)
        if error is None:
            return (low + high + 1) // 2 if fits is None else (low + high) // 2
        for n in range(low, high + 1):
            if self.predict(n) + error <= self.target_bytes:
                return n
        return high


def tune(
    search: Search, start_n: int, measure: Callable[[int], Attempt], max_launches: int = 12
) -> list[Attempt]:
    """Launch from ``start_n`` until the smallest fitting N is confirmed; the attempts."""
    attempts = [measure(max(0, min(start_n, search.n_max)))]
    while not search.done(attempts):
        if len(attempts) >= max_launches:
            break
        attempts.append(measure(search.next_n(attempts)))
    return attempts


def best_attempt(attempts: list[Attempt]) -> Attempt | None:
    """The smallest N that fitted."""
    fitting = [a for a in attempts if a.fits]
    return min(fitting, key=lambda a: a.n_cpu_moe) if fitting else None


# --- several devices ----------------------------------------------------------------------------

Split = tuple[tuple[int, ...], tuple[int, ...]]  # (layer counts per device, predicted peaks)


class SplitSearch(NamedTuple):
    """The state of the search over several devices: N, and the split the planner finds for
    it with each device's measured error counted (``plan(n, errors)``: the split of N whose
    predicted peaks plus the errors fit every budget, or None; ``place(n, errors)``: the
    best split of N however it fits, to confirm that N is over)."""

    n_max: int
    budgets: tuple[int, ...]
    plan: Callable[[int, tuple[int, ...]], Split | None]
    place: Callable[[int, tuple[int, ...]], Split]

    def errors(self, attempts: list[Attempt]) -> tuple[int, ...]:
        """Each device's measured minus predicted, from the latest launch that measured it."""
        found = [0] * len(self.budgets)
        seen = [False] * len(self.budgets)
        for attempt in reversed(attempts):
            for i, measured in enumerate(attempt.device_measured):
                if measured is not None and not seen[i]:
                    found[i], seen[i] = measured - attempt.device_predicted[i], True
        return tuple(found)

    def next(self, attempts: list[Attempt]) -> tuple[int, Split]:
        """The next N to launch (strictly between what is over and what fits) and its split."""
        over, fits = bounds(attempts)
        high = self.n_max if fits is None else fits - 1
        low = over + 1
        if low > high:
            raise DoesNotFitError(
                "does not fit every device's budget even with every expert on the CPU",
                hint="lower --ctx, use --cache-type q4_0, add a device, or a smaller quant",
            )
        errors = self.errors(attempts)
        for n in range(low, high + 1):
            if (split := self.plan(n, errors)) is not None:
                return n, split
        return high, self.place(high, errors)

    def done(self, attempts: list[Attempt]) -> bool:
        return done(attempts)


def tune_split(
    search: SplitSearch, measure: Callable[[int, Split], Attempt], max_launches: int = 12
) -> list[Attempt]:
    """Launch until the smallest N whose split fits every device is confirmed by N-1 (at
    its best split) being over; the attempts."""
    attempts: list[Attempt] = []
    while not attempts or not search.done(attempts):
        if len(attempts) >= max_launches:
            break
        n, split = search.next(attempts)
        attempts.append(measure(n, split))
        if attempts[-1].fits and n > 0 and not search.done(attempts):
            errors = search.errors(attempts)
            tighter = search.plan(n - 1, errors) or search.place(n - 1, errors)
            attempts.append(measure(n - 1, tighter))
    return attempts
