"""Calibration: the speed model's per-term factors fitted to measured speeds of one model on
one machine (core/speed.py's terms; jobs/ turns speed points into ``Measured``).

Each measurement becomes its placement's terms (``forecast`` at its ubatch, depth and
prompt): a generated token's time is ``sum(term * y_kind) + c_token``, a prompt's
``sum(term * y_kind) + c_ubatch * n_ubatches``. The unknowns are linear:

- a kind whose figure is known on every device (memory bandwidth, host link, FLOP/s):
  ``y = 1 / efficiency`` on the term's time from the figure, bounded ``y >= 1`` (a term cannot
  beat its figure);
- a kind with a figure missing: ``y = 1 / rate`` on the term's amount (bytes or FLOPs), an
  effective rate fitted from the points (how a machine with no profile is calibrated),
  bounded ``y >= 0``; at 0 the term is too fast to show in the points (``negligible``);
- a fixed time per block of the model per generated token and per prompt ubatch, and per hop
  between homes (the layout's ``n_hops``, once per token and per ubatch; a prompt's hops
  only without op offload, where its CPU experts run on the CPU), ``c >= 0``: kernel
  launches (each block's), the copy of the activations and the wait (an RPC device: a
  network round trip), which a pure roofline lacks; kept at 0 unless the points demand it.

Every factor belongs to the machine (its devices, link, RAM, CPU), not to a model: the
points may be of several models (each ``Measured`` laid out with its own model's facts, and
its routing share its architecture's, core/routing.py), and the fit forecasts any model on
that machine. ``Measured.model`` names a point of another model than the one forecast.

Where a model has no points on a machine, ``fitted_forecast`` uses core/prior.py's typical
factors instead: the same fit pooled over public measurements of several models and machines
(``fit_pooled``), each point with its own machine's figures.

Bounded least squares on the relative error of each point's time, solved exactly: every set
of unknowns left free (the rest at their bound) is an unconstrained least squares; of the
feasible ones, the fewest free unknowns whose RMS error is within ``TOLERANCE`` of the best
(so a factor moves off its bound only when the data demands it). Decode points carry the
memory terms, prefill points the link and compute terms too. Combined (``-pg``) points
are left out. The fit's error is leave-one-out: each point forecast by the fit of the others.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from moetune.core.noise import loo_beyond_bound
from moetune.core.prior import PUBLIC_PRIOR, UNCALIBRATED_ERROR, SpeedPrior
from moetune.core.speed import (
    Efficiency,
    Forecast,
    ForecastCalibration,
    Kind,
    MachineFigures,
    SpeedLayout,
    TermTime,
    forecast,
    missing_figures,
    rate_of,
)
from moetune.core.threads import TYPICAL_SINGLE_THREAD_SHARE, effective_threads
from moetune.record import record

KINDS: tuple[Kind, ...] = ("device_memory", "ram", "link", "device_compute", "cpu_compute")
TOKEN_OVERHEAD = "token_overhead"
UBATCH_OVERHEAD = "ubatch_overhead"
HOP_OVERHEAD = "hop_overhead"
THREAD_OVERHEAD = "thread_overhead"
FIXED = (TOKEN_OVERHEAD, UBATCH_OVERHEAD, HOP_OVERHEAD, THREAD_OVERHEAD)
MIN_POINTS = 2
TOLERANCE = 0.002  # RMS relative error a simpler fit may lose against the best one


class Measured(NamedTuple):
    """One measured speed as the fit reads it: the placement's layout (built for its
    ``n_cpu_moe``/``-ot``, ubatch and op offload) and the test."""

    layout: SpeedLayout
    n_prompt: int  # a prompt test: its tokens (0: a generation test)
    n_gen: int
    n_depth: int
    tps: float
    model: str | None = None  # another model's point: its file name (None: the one forecast)
    # a decode of this many concurrent streams (llama-batched-bench's -npl): ``tps`` is all
    # of theirs together, one step (a token of each) a ubatch of that many tokens
    n_streams: int = 1

    @property
    def is_prefill(self) -> bool:
        return self.n_prompt > 0 and self.n_gen == 0

    @property
    def is_decode(self) -> bool:
        return self.n_gen > 0 and self.n_prompt == 0


@record(frozen=True, kw_only=True)
class SpeedFit:
    """The fitted factors: ``efficiency`` where the figure is known, ``rates`` (bytes/s or
    FLOP/s; None: negligible) where it is not, the fixed times (per block of the model per
    token and per ubatch, per hop), and the error; ``own_points`` of the model forecast, the
    rest of ``other_models``."""

    points: int
    decode_points: int
    prefill_points: int
    efficiency: Efficiency
    rates: dict[str, float | None]  # by kind: the fitted effective rate of a figure missing
    token_overhead_s: float = 0.0  # per block of the model, per generated token
    ubatch_overhead_s: float = 0.0  # per block of the model, per prompt ubatch
    hop_overhead_s: float = 0.0
    # per block, per token or ubatch, per thread beyond the first (their barriers: a fit of
    # points that differ in threads; core/threads.py)
    thread_overhead_s: float = 0.0
    fitted: list[str]  # the kinds the points reach (their terms moved something)
    fit_error: float  # RMS relative error of the time on the points themselves
    loo_median_error: float | None = None  # leave-one-out, relative error of tok/s
    loo_max_error: float | None = None
    own_points: int | None = None  # None: every point is of the model forecast
    other_models: tuple[str, ...] = ()  # the file names of the other models' points
    # the share of the RAM figure one thread reads, fitted where the points differ in threads
    # (None: the machine's own, or typical; core/threads.py)
    ram_single_thread_share: float | None = None

    @property
    def trusted(self) -> bool:
        """Whether a forecast uses it: its leave-one-out median error within core/noise.py's
        bound (or too few points to leave one out); else its points disagree."""
        return not loo_beyond_bound(self.loo_median_error)

    @property
    def forecast_error(self) -> float | None:
        """The relative error of a forecast made with it: its leave-one-out median error where
        it is trusted; None where it is not (the forecast is uncalibrated)."""
        return self.loo_median_error if self.trusted else None

    @property
    def calibration(self) -> ForecastCalibration:
        if not self.trusted:
            return ForecastCalibration(
                own_points=self.points if self.own_points is None else self.own_points,
                other_models=self.other_models,
                refused_points=self.points,
                refused_error=self.loo_median_error,
            )
        return ForecastCalibration(
            points=self.points,
            median_error=self.loo_median_error,
            max_error=self.loo_max_error,
            own_points=self.points if self.own_points is None else self.own_points,
            other_models=self.other_models,
        )


class _Row(NamedTuple):
    """One point's regressors (by unknown) and measured time."""

    values: dict[str, float]
    seconds: float


def _hops(layout: SpeedLayout, n_ubatches: int, decode: bool) -> int:
    """The hops a generated token, or a prompt of ``n_ubatches``, pays."""
    if decode:
        return layout.n_hops
    # a prompt's ubatches whose host weights stay on the CPU (none offloading, or a threshold
    # above the ubatch) pay a hop each
    return 0 if layout.offloads(layout.n_ubatch) else layout.n_hops * n_ubatches


def _terms(m: Measured, machine: MachineFigures) -> tuple[list[TermTime], float, int]:
    """The point's terms (from the figures, at efficiency 1), its measured time and its
    overhead count (tokens or ubatches)."""
    if m.is_decode:
        depth = m.n_depth + m.n_gen // 2  # the middle of the generated tokens
        found = forecast(m.layout, machine, depth=depth, n_prompt=1, streams=m.n_streams)
        return found.decode_terms, m.n_streams / m.tps, 1
    found = forecast(m.layout, machine, depth=m.n_depth, n_prompt=m.n_prompt)
    return found.prefill_terms, m.n_prompt / m.tps, math.ceil(m.n_prompt / m.layout.n_ubatch)


def _known(points: Sequence[Measured], machine: MachineFigures) -> set[Kind]:
    """The kinds whose figure every term of every point has (an efficiency is fitted)."""
    unknown: set[Kind] = set()
    for m in points:
        for term in _terms(m, machine)[0]:
            if term.amount > 0 and term.seconds is None:
                unknown.add(term.kind)
    return set(KINDS) - unknown


def _blocks(layout: SpeedLayout) -> int:
    return max(layout.n_blocks, 1)


def _row(
    m: Measured,
    machine: MachineFigures,
    known: set[Kind],
    pooled: bool = False,
    threads: bool = False,
) -> _Row:
    """The point's regressors, the fixed times per token and per ubatch counted per block of
    the model (so they carry from one model to another); ``threads``: the fixed time per
    thread sync too (points that differ in threads). ``pooled`` (a prior over models and
    machines, core/prior.py): no fixed time per ubatch or hop (fitted on a few machines,
    those explain away one machine's compute and carry to no other:
    benchmarks/speed_forecast.py, leaving a machine out)."""
    terms, seconds, steps = _terms(m, machine)
    values = dict.fromkeys((*KINDS, *FIXED), 0.0)
    for term in terms:
        if term.kind in known:
            values[term.kind] += term.seconds or 0.0
        else:
            values[term.kind] += term.amount / term.share
    if pooled:
        values[TOKEN_OVERHEAD] = float(_blocks(m.layout)) if m.is_decode else 0.0
        return _Row(values, seconds)
    values[TOKEN_OVERHEAD if m.is_decode else UBATCH_OVERHEAD] = float(steps * _blocks(m.layout))
    values[HOP_OVERHEAD] = float(_hops(m.layout, steps, m.is_decode))
    if threads:
        values[THREAD_OVERHEAD] = float(steps * _thread_syncs(m.layout, machine))
    return _Row(values, seconds)


Matrix = Sequence[Sequence[float]]


def _dot(u: Sequence[float], v: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(u, v, strict=True))


def _solve(gram: Matrix, rhs: Sequence[float]) -> list[float] | None:
    """``gram x = rhs`` for a symmetric (scaled) Gram matrix by Gaussian elimination; None when
    it is (nearly) singular: dependent columns."""
    n = len(rhs)
    m = [[*gram[i], rhs[i]] for i in range(n)]
    for k in range(n):
        pivot = max(range(k, n), key=lambda i: abs(m[i][k]))
        if abs(m[pivot][k]) < 1e-10:
            return None
        m[k], m[pivot] = m[pivot], m[k]
        for i in range(k + 1, n):
            f = m[i][k] / m[k][k]
            m[i] = [a - f * b for a, b in zip(m[i], m[k], strict=True)]
    x = [0.0] * n
    for k in reversed(range(n)):
        x[k] = (m[k][n] - sum(m[k][j] * x[j] for j in range(k + 1, n))) / m[k][k]
    return x


class _Normal(NamedTuple):
    """The normal equations of a weighted least squares: ``A'A``, ``A'b``, ``b'b``."""

    gram: list[list[float]]
    rhs: list[float]
    bb: float
    n_rows: int

    @classmethod
    def of(cls, a: Matrix, b: Sequence[float]) -> _Normal:
        n = len(a[0]) if a else 0
        cols = [[row[j] for row in a] for j in range(n)]
        gram = [[_dot(u, v) for v in cols] for u in cols]
        return cls(gram, [_dot(c, b) for c in cols], _dot(b, b), len(b))

    def without(self, row: Sequence[float], b: float) -> _Normal:
        """The same without one row (leave-one-out)."""
        gram = [
            [g - u * v for g, v in zip(line, row, strict=True)]
            for line, u in zip(self.gram, row, strict=True)
        ]
        rhs = [c - u * b for c, u in zip(self.rhs, row, strict=True)]
        return _Normal(gram, rhs, self.bb - b * b, self.n_rows - 1)

    def rms(self, x: Sequence[float]) -> float:
        gx = [_dot(line, x) for line in self.gram]
        rss = _dot(x, gx) - 2 * _dot(x, self.rhs) + self.bb
        return math.sqrt(max(rss, 0.0) / max(self.n_rows, 1))


def solve_bounded(
    a: Matrix, b: Sequence[float], lower: Sequence[float], tolerance: float = TOLERANCE
) -> list[float]:
    """``x >= lower`` minimising ``|a x - b|`` (rows already weighted), exactly: of the
    feasible solutions with some unknowns at their bound and the rest the unconstrained least
    squares, the one with the fewest unknowns off their bound whose RMS residual is within
    ``tolerance`` of the best one."""
    return _solve_normal(_Normal.of(a, b), lower, tolerance)


def _solve_normal(
    eq: _Normal,
    lower: Sequence[float],
    tolerance: float = TOLERANCE,
    last: Sequence[bool] = (),
) -> list[float]:
    """``solve_bounded`` on the normal equations, on unit-norm columns (few unknowns: the
    enumeration costs nothing next to the rows; an all-zero column stays at its bound). Of
    as many unknowns off their bound, those with fewer of ``last`` (the fixed times: kept at
    0 unless the points demand them) win within ``tolerance``."""
    n = len(lower)
    norm = [math.sqrt(max(eq.gram[j][j], 0.0)) for j in range(n)]
    later = [j < len(last) and last[j] for j in range(n)]
    found: list[tuple[int, int, float, list[float]]] = []
    for size in range(n + 1):
        for free in itertools.combinations(range(n), size):
            x = [0.0 if j in free else lower[j] for j in range(n)]
            if free:
                if any(norm[j] <= 0 for j in free):
                    continue
                fixed = [j for j in range(n) if j not in free]
                rhs = [
                    (eq.rhs[i] - sum(eq.gram[i][j] * x[j] for j in fixed)) / norm[i] for i in free
                ]
                unit = [[eq.gram[i][j] / (norm[i] * norm[j]) for j in free] for i in free]
                sol = _solve(unit, rhs)
                if sol is None:
                    continue  # a smaller set reaches the same residual
                values = [v / norm[j] for j, v in zip(free, sol, strict=True)]
                if any(v < lower[j] - 1e-12 for j, v in zip(free, values, strict=True)):
                    continue
                for j, v in zip(free, values, strict=True):
                    x[j] = v
            found.append((size, sum(later[j] for j in free), eq.rms(x), x))
    best = min(f[2] for f in found)
    return min((f for f in found if f[2] <= best + tolerance), key=lambda f: f[:3])[3]


def _usable(m: Measured) -> bool:
    return (m.is_decode or m.is_prefill) and m.tps > 0


def usable(points: Sequence[Measured]) -> list[Measured]:
    """The points a fit reads: decode and prefill tests (not combined ones) with a speed."""
    return [m for m in points if _usable(m)]


def fit_of(points: Sequence[Measured], machine: MachineFigures) -> SpeedFit | None:
    """``fit_speed``, or None where there are fewer than two usable points (uncalibrated)."""
    return fit_speed(points, machine) if len(usable(points)) >= MIN_POINTS else None


def fit_speed(points: Sequence[Measured], machine: MachineFigures) -> SpeedFit:
    """The factors of ``points`` (two at least, decode or prefill ones) on ``machine``'s
    figures, with the leave-one-out error."""
    used = usable(points)
    if len(used) < MIN_POINTS:
        raise ValueError(f"a fit needs {MIN_POINTS} decode or prefill points, got {len(used)}")
    machine = machine.without("assumed")  # an assumed figure: its effective rate is fitted
    if _thread_counts(used, machine) > 1:
        return _fit_threads(used, machine)
    return _fit([(m, machine) for m in used], _known(used, machine), pooled=False)


def fit_pooled(samples: Sequence[tuple[Measured, MachineFigures]]) -> SpeedFit:
    """One fit over measurements of several models and machines, each with its machine's
    figures: the efficiency of each kind (a sample lacking a figure one of its terms needs
    is an error) and a fixed time per block of the model per generated token
    (``token_overhead_s``, per block): what core/prior.py keeps."""
    used = [(m, machine) for m, machine in samples if _usable(m)]
    if len(used) < MIN_POINTS:
        raise ValueError(f"a fit needs {MIN_POINTS} decode or prefill points, got {len(used)}")
    for m, machine in used:
        lacking = [t.figure for t in _terms(m, machine)[0] if t.amount > 0 and t.seconds is None]
        if lacking:
            raise ValueError(f"a pooled sample lacks {', '.join(lacking)}")
    return _fit(used, set(KINDS), pooled=True)


def _fit(
    used: Sequence[tuple[Measured, MachineFigures]],
    known: set[Kind],
    *,
    pooled: bool,
    threads: bool = False,
) -> SpeedFit:
    rows = [_row(m, machine, known, pooled, threads) for m, machine in used]
    names = [k for k in (*KINDS, *FIXED) if any(r.values[k] for r in rows)]
    a = [[r.values[k] / r.seconds for k in names] for r in rows]
    ones = [1.0] * len(rows)
    lower = [1.0 if k in known else 0.0 for k in names]
    last = [k in FIXED for k in names]
    eq = _Normal.of(a, ones)
    y = dict(zip(names, _solve_normal(eq, lower, last=last), strict=True))
    errors = [e for e in _loo_errors(eq, a, lower, last) if e is not None]
    eff = {k: 1 / y[k] for k in KINDS if k in known and k in y}
    rates: dict[str, float | None] = {
        k: (1 / y[k] if y[k] > 0 else None) for k in KINDS if k not in known and k in y
    }
    points = [m for m, _ in used]
    import statistics  # a fit's only use of it: a plan without measured points skips its import

    return SpeedFit(
        points=len(points),
        decode_points=sum(m.is_decode for m in points),
        prefill_points=sum(m.is_prefill for m in points),
        efficiency=Efficiency(**eff, points=len(points)),
        rates=rates,
        token_overhead_s=y.get(TOKEN_OVERHEAD, 0.0),
        ubatch_overhead_s=y.get(UBATCH_OVERHEAD, 0.0),
        hop_overhead_s=y.get(HOP_OVERHEAD, 0.0),
        thread_overhead_s=y.get(THREAD_OVERHEAD, 0.0),
        fitted=[k for k in KINDS if k in y],
        fit_error=eq.rms(list(y.values())),
        loo_median_error=statistics.median(errors) if errors else None,
        loo_max_error=max(errors) if errors else None,
        own_points=sum(m.model is None for m in points),
        other_models=tuple(sorted({m.model for m in points if m.model is not None})),
    )


def _loo_errors(
    eq: _Normal, a: Matrix, lower: Sequence[float], last: Sequence[bool] = ()
) -> list[float | None]:
    """Each point's relative error of tok/s, forecast by the fit of the others (rows of time
    over measured time: the forecast's tok/s over the measured is ``1 / (row . x)``); None
    where the others do not reach one of its terms whose figure is missing, or too few."""
    if eq.n_rows <= MIN_POINTS:
        return []
    errors: list[float | None] = []
    for row in a:
        others = eq.without(row, 1.0)
        x = _solve_normal(others, lower, last=last)
        unreached = any(v and others.gram[j][j] <= 0 and lower[j] == 0 for j, v in enumerate(row))
        ratio = _dot(row, x)
        errors.append(None if unreached or ratio <= 0 else abs(1 / ratio - 1))
    return errors


def relative_error(forecast_tps: float | None, measured_tps: float) -> float | None:
    return None if forecast_tps is None else abs(forecast_tps - measured_tps) / measured_tps


def point_forecast(
    m: Measured,
    machine: MachineFigures,
    fit: SpeedFit | None,
    prior: SpeedPrior | None = PUBLIC_PRIOR,
) -> float | None:
    """The forecast tok/s of ``m``'s test (from ``prior`` where ``fit`` is None)."""
    depth = m.n_depth + m.n_gen // 2 if m.is_decode else m.n_depth
    found = fitted_forecast(
        m.layout,
        machine,
        fit,
        depth=depth,
        n_prompt=max(m.n_prompt, 1),
        prior=prior,
        streams=m.n_streams,
    )
    if not m.is_decode:
        return found.prefill_tok_s
    return None if found.decode_tok_s is None else found.decode_tok_s * m.n_streams


def prior_fit(prior: SpeedPrior) -> SpeedFit:
    """``prior`` as a fit of no points: its efficiencies, and its fixed time per block."""
    return SpeedFit(
        points=0,
        decode_points=0,
        prefill_points=0,
        efficiency=replace(prior.efficiency, points=0),
        rates={},
        token_overhead_s=prior.block_token_s,
        fitted=list(KINDS),
        fit_error=0.0,
    )


def _retimed(terms: Sequence[TermTime], fit: SpeedFit) -> list[TermTime]:
    out = []
    for term in terms:
        seconds = term.seconds
        if term.kind in fit.rates:
            rate = fit.rates[term.kind]
            seconds = 0.0 if rate is None or term.amount <= 0 else term.amount / (rate * term.share)
        elif term.kind in fit.fitted and seconds is not None:
            seconds /= getattr(fit.efficiency, term.kind)
        out.append(replace(term, seconds=seconds))
    return out


def _overhead(what: str, count: int, seconds: float, figure: str) -> list[TermTime]:
    if seconds <= 0 or count <= 0:
        return []
    return [
        TermTime(term=what, kind="overhead", amount=count, seconds=count * seconds, figure=figure)
    ]


def fitted_forecast(
    layout: SpeedLayout,
    machine: MachineFigures,
    fit: SpeedFit | None,
    *,
    depth: int = 0,
    n_prompt: int = 512,
    prefill_depth: int | None = None,
    prior: SpeedPrior | None = PUBLIC_PRIOR,
    streams: int | None = None,
) -> Forecast:
    """``forecast`` with ``fit``'s factors, rates and fixed times; where ``fit`` is None
    (uncalibrated), or not trusted (its points disagree: the calibration says so),
    ``prior``'s typical ones (None: the figures alone, every efficiency 1). ``streams``: the
    decode of that many concurrent streams, a step's fixed times paid once for all of them."""
    if fit is not None and not fit.trusted:
        refused = fit.calibration
        found = fitted_forecast(
            layout,
            machine,
            None,
            depth=depth,
            n_prompt=n_prompt,
            prefill_depth=prefill_depth,
            prior=prior,
            streams=streams,
        )
        return replace(found, calibration=refused)
    if fit is not None and fit.ram_single_thread_share is not None:
        machine = replace(machine, ram_single_thread_share=fit.ram_single_thread_share)
    found = forecast(
        layout,
        machine,
        depth=depth,
        n_prompt=n_prompt,
        prefill_depth=prefill_depth,
        streams=streams,
    )
    if fit is None and prior is None:
        return found
    figure, expected = "calibration", None
    if fit is None:
        assert prior is not None
        fit, figure = prior_fit(prior), "typical (public measurements)"
        expected = UNCALIBRATED_ERROR
    blocks = _blocks(layout)
    per_token = _overhead("fixed time per token", 1, fit.token_overhead_s * blocks, figure)
    n_ubatches = math.ceil(n_prompt / layout.n_ubatch)
    per_ubatch = _overhead(
        "fixed time per ubatch", n_ubatches, fit.ubatch_overhead_s * blocks, figure
    )
    decode_hops = _overhead("hops", _hops(layout, 1, True), fit.hop_overhead_s, figure)
    prefill_hops = _overhead("hops", _hops(layout, n_ubatches, False), fit.hop_overhead_s, figure)
    syncs = _thread_syncs(layout, machine)
    decode_syncs = _overhead("thread syncs", syncs, fit.thread_overhead_s, figure)
    prefill_syncs = _overhead("thread syncs", syncs * n_ubatches, fit.thread_overhead_s, figure)
    decode = _retimed(found.decode_terms, fit) + per_token + decode_hops + decode_syncs
    prefill = _retimed(found.prefill_terms, fit) + per_ubatch + prefill_hops + prefill_syncs
    missing = missing_figures(decode, prefill)
    return found.with_decode(
        rate_of(1, decode),
        prefill_tok_s=rate_of(n_prompt, prefill),
        decode_terms=decode,
        prefill_terms=prefill,
        missing=missing,
        calibration=fit.calibration,
        expected_error=expected,
    )


# --- the thread term: fitted where the points differ in threads ----------------------------------

# the shares of the RAM figure one thread reads that a fit tries (core/threads.py's law is not
# linear in it): 0.05 to 1 in steps of 25 %, the machine's own or typical share besides
THREAD_SHARES = (*(round(0.05 * 1.25**i, 4) for i in range(14)), 1.0)


def _thread_counts(points: Sequence[Measured], machine: MachineFigures) -> int:
    """How many distinct thread counts (at most the physical cores) the points ran at."""
    found = {effective_threads(m.layout.n_threads, machine.physical_cores) for m in points}
    found.discard(None)
    return len(found)


def _fit_threads(used: Sequence[Measured], machine: MachineFigures) -> SpeedFit:
    """``fit_speed`` where the points differ in threads: the share of the RAM figure one thread
    reads is fitted too, the one of ``THREAD_SHARES`` (and the machine's own) whose fit has the
    least RMS error; the others' factors are fitted at it."""
    shares = sorted(
        {*THREAD_SHARES, machine.ram_single_thread_share or TYPICAL_SINGLE_THREAD_SHARE}
    )
    best: SpeedFit | None = None
    for share in shares:
        at = replace(machine, ram_single_thread_share=share)
        found = _fit([(m, at) for m in used], _known(used, at), pooled=False, threads=True)
        if best is None or found.fit_error < best.fit_error - 1e-9:
            best = replace(found, ram_single_thread_share=share)
    assert best is not None
    return best


def _thread_syncs(layout: SpeedLayout, machine: MachineFigures) -> int:
    """The barriers beyond one thread's a token or a ubatch waits at: a block's ops each end at
    one, which every thread reaches: blocks x (threads - 1); 0 where they are unknown."""
    used = effective_threads(layout.n_threads, machine.physical_cores)
    return 0 if used is None else max(layout.n_blocks, 1) * (used - 1)
