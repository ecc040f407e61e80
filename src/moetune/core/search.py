"""The run loop: plan -> launch -> fill -> measure -> next N -> converge.

One search for one device or several (one device is a list of one). It is pure: it calls a
``measure(n, split)`` function and never touches a process itself, so it is tested on recorded
figures as well as on a real llama-server. One measurement calibrates the prediction of each
device (the bytes each block's experts take are known exactly, so the measured-minus-predicted
error carries over to every N, and the split of N is found again with it counted); bisection
is the fallback when a launch gives no figure (out of memory at load).

Done when the smallest N whose measured peaks are within the budgets is known, and N-1 is over
a budget or out of memory (or N is 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import ClassVar

from moetune.errors import DoesNotFitError
from moetune.record import record
from moetune.units import format_bytes, is_noisy


@record(frozen=True, kw_only=True)
class Attempt:
    """One launch: the N tried, what was predicted and measured, and how it went (its JSON
    adds ``noisy``; records/results.py's models nest it and write it the same). The ``-ot``
    form's launch (``override_tensor``: its rules, as the command writes them) keeps the N
    of the ``--n-cpu-moe`` form it was planned beside, at whose split it is."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("noisy",)

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
    tensor_split: list[float] = field(default_factory=list)
    device_predicted: list[int] = field(default_factory=list)
    device_measured: list[int | None] = field(default_factory=list)
    # each device's runtime overhead, where its probe sees the process's whole use (NVML):
    # that use minus llama.cpp's own buffers on the device, after the context was filled
    device_overhead: list[int | None] = field(default_factory=list)
    n_ubatch: int | None = None  # run --objective's launches: the -ub tried (None: the run's)
    override_tensor: list[str] = field(default_factory=list)  # the -ot form's rules ([]: N's)

    @property
    def fits(self) -> bool:
        return self.status == "ok"

    @property
    def noisy(self) -> bool:
        """The decode speeds of the repeats spread over more than 20 % of their median."""
        return is_noisy(self.decode_tps, self.decode_tps_min, self.decode_tps_max)


def bounds(attempts: list[Attempt]) -> tuple[int, int | None]:
    """(largest N known over, smallest N known to fit), of the ``--n-cpu-moe`` launches."""
    plain = [a for a in attempts if not a.override_tensor]
    over = max((a.n_cpu_moe for a in plain if not a.fits), default=-1)
    fits = min((a.n_cpu_moe for a in plain if a.fits), default=None)
    return over, fits


def done(attempts: list[Attempt]) -> bool:
    """The smallest fitting N is confirmed: it is 0, or N-1 is known over."""
    over, fits = bounds(attempts)
    return fits is not None and (fits == 0 or over == fits - 1)


Split = tuple[tuple[int, ...], tuple[int, ...]]  # (layer counts per device, predicted peaks)
Plan = Callable[[int, tuple[int, ...]], Split | None]
Place = Callable[[int, tuple[int, ...]], Split]


def _figures(attempt: Attempt) -> tuple[list[int], list[int | None]]:
    """An attempt's predicted and measured peak per device (one device: its sums)."""
    if attempt.device_predicted:
        return attempt.device_predicted, attempt.device_measured
    return [attempt.predicted_bytes], [attempt.measured_bytes]


@record(frozen=True)
class Search:
    """The state of the search between launches, over one or more devices: N, and the split
    the planner finds for it with each device's measured error counted (``plan(n, errors)``:
    the split of N whose predicted peaks plus the errors fit every budget, or None;
    ``place(n, errors)``: the best split of N however it fits, to launch it all the same)."""

    n_max: int  # --n-cpu-moe value that puts every expert on the CPU
    budgets: tuple[int, ...]
    plan: Plan
    place: Place

    @classmethod
    def one(cls, n_max: int, budget_bytes: int, predict: Callable[[int], int]) -> Search:
        """One device whose predicted peak at N is ``predict(n)``."""

        def plan(n: int, errors: tuple[int, ...]) -> Split | None:
            peak = predict(n)
            return ((1,), (peak,)) if peak + errors[0] <= budget_bytes else None

        return cls(n_max, (budget_bytes,), plan, lambda n, errors: ((1,), (predict(n),)))

    def errors(self, attempts: list[Attempt]) -> tuple[int, ...] | None:
        """Each device's measured minus predicted, from the latest launch that measured it
        (0 for a device never measured; None: no launch gave a figure yet)."""
        found = [0] * len(self.budgets)
        seen = [False] * len(self.budgets)
        for attempt in reversed(attempts):
            predicted, measured = _figures(attempt)
            for i, figure in enumerate(measured):
                if figure is not None and not seen[i]:
                    found[i], seen[i] = figure - predicted[i], True
        return tuple(found) if any(seen) else None

    def bounds(self, attempts: list[Attempt]) -> tuple[int, int | None]:
        return bounds(attempts)

    def done(self, attempts: list[Attempt]) -> bool:
        return done(attempts)

    def split(self, n: int, errors: tuple[int, ...] | None = None) -> Split:
        """The split to launch N at: the one that fits with the errors counted, else the best."""
        counted = errors or (0,) * len(self.budgets)
        return self.plan(n, counted) or self.place(n, counted)

    def next(self, attempts: list[Attempt]) -> tuple[int, Split]:
        """The next N to launch, strictly between what is known over and what fits, and its
        split; bisection while no launch gave a figure (out of memory at load)."""
        over, fits = self.bounds(attempts)
        high = self.n_max if fits is None else fits - 1
        low = over + 1
        if low > high:
            raise DoesNotFitError(
                f"does not fit {self._budgets()} even with every expert on the CPU",
                hint="lower --ctx, use --cache-type q4_0, add a device, or a smaller quant",
            )
        errors = self.errors(attempts)
        if errors is None:
            n = (low + high + 1) // 2 if fits is None else (low + high) // 2
            return n, self.split(n)
        for n in range(low, high + 1):
            if (found := self.plan(n, errors)) is not None:
                return n, found
        return high, self.place(high, errors)

    def _budgets(self) -> str:
        if len(self.budgets) == 1:
            return f"in {format_bytes(self.budgets[0])}"
        return "every device's budget"


def tune(
    search: Search, start_n: int, measure: Callable[[int, Split], Attempt], max_launches: int = 12
) -> list[Attempt]:
    """Launch from ``start_n`` until the smallest N whose split fits every device is
    confirmed by N-1 (at its best split) being over; the attempts."""
    start = max(0, min(start_n, search.n_max))
    attempts = [measure(start, search.split(start))]
    while not search.done(attempts):
        if len(attempts) >= max_launches:
            break
        attempts.append(measure(*search.next(attempts)))
    return attempts


def best_attempt(attempts: list[Attempt]) -> Attempt | None:
    """The smallest N that fitted; the ``-ot`` form launched beside it where that fitted too
    (run launches it only where it keeps more on the devices)."""
    fitting = [a for a in attempts if a.fits]
    return min(fitting, key=lambda a: (a.n_cpu_moe, not a.override_tensor)) if fitting else None
