"""The results of `moetune run` and `moetune bench`, and the pure statistics on them.

Starts nothing and imports no process, HTTP or terminal code: report/ and the store read these.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, PlainSerializer, computed_field, model_validator

from moetune.core.ram import RamFigure
from moetune.core.search import Attempt
from moetune.core.settings import Settings
from moetune.core.speed import ForecastCalibration
from moetune.errors import BadValueError
from moetune.record import jsonable
from moetune.records.fit import FitChoice
from moetune.records.frozen import FrozenModel
from moetune.records.speed import SpeedMachine
from moetune.units import spread

RESULT_KIND = "moetune.bench"

# A run's attempt (a record of the core) as these models hold it: validated from its fields
# (a saved ``noisy`` ignored), written as ``record.jsonable`` writes it (``noisy`` after them).
AttemptField = Annotated[Attempt, PlainSerializer(jsonable)]
RamFigureField = Annotated[RamFigure, PlainSerializer(jsonable)]


# --- run --------------------------------------------------------------------------------------


class ObjectiveLaunch(BaseModel):
    """One of `run --objective`'s extra launches: its candidate, forecast and measurement."""

    n_cpu_moe: int
    n_ubatch: int
    n_threads: int | None = None  # -t (None: the converged launch's)
    forecast_decode_tps: float | None
    forecast_prefill_tps: float | None
    forecast_score: float
    expected_score: float  # the forecast scaled by the converged placement's measured/forecast
    measured_score: float | None  # None: over memory, out of memory, or not measured
    attempt: AttemptField


class ObjectiveRun(BaseModel):
    """`run --objective`: the goal, the converged placement's forecast and measurement, the
    extra launches, the winner (None: the converged placement) and why."""

    goal: str
    n_prompt: int  # the prompt its prefill is forecast and measured for (the fill)
    calibration: str  # what the forecast rests on
    base_n_cpu_moe: int
    base_n_ubatch: int
    base_forecast_score: float | None
    base_forecast_decode_tps: float | None = None
    base_forecast_prefill_tps: float | None = None
    base_measured_score: float | None
    launches: list[ObjectiveLaunch] = []
    winner: int | None = None  # index into ``launches``
    stopped: str
    why: str
    points_added: int = 0  # speed points the extra launches kept


class RecordedOverhead(BaseModel):
    """A device's runtime overhead measured by a run (after the context was filled), and the
    hardware profile of the card it was recorded in."""

    device: str  # CUDA0
    gpu: str  # the card's name, as NVML reports it
    measured_bytes: int  # the server's device memory minus llama.cpp's buffers there
    profile: str | None = None  # the hardware profile's id (None: no profile for the card)
    path: str | None = None  # the user's own profile file it is in
    kept_mib: int | None = None  # what the profile holds now: the largest so far
    recorded: bool = False  # this figure was written (a larger one was already there: False)


class RunResult(BaseModel):
    model: str
    device: str
    probe: str
    target_bytes: int
    settings: Settings
    planned_n_cpu_moe: int
    attempts: list[AttemptField]
    best: AttemptField | None
    command: list[str]
    profile_name: str | None = None  # the tuned profile saved (or confirmed) by this run
    profile_path: str | None = None
    reused_profile: bool = False  # launched from a saved profile instead of tuning
    # several devices: their names and budgets, and the one with the least room at the best
    device_names: list[str] = []
    device_budgets: list[int] = []
    limiting_device: str | None = None
    objective: ObjectiveRun | None = None  # run --objective / --workload
    # runtime overheads measured at the best attempt and recorded in the cards' profiles
    overheads: list[RecordedOverhead] = []
    # the -ot form launched beside the converged N: the weights it keeps on the devices
    # beyond N's form, as planned (0: not launched, it keeps nothing more)
    override_gain_bytes: int = 0


# --- bench ------------------------------------------------------------------------------------


class Stat(FrozenModel):
    """Median and range of the repeats of one figure, and that range as a share of the
    median (``spread``, derived: a saved one is read again from the range)."""

    median: float
    min: float
    max: float

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and "spread" in data:
            return {key: value for key, value in data.items() if key != "spread"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def spread(self) -> float | None:
        """``(max - min) / median`` (None: the median is not above 0)."""
        return spread(self.median, self.min, self.max)

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat | None:
        """None when no value is known."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return cls(median=statistics.median(known), min=min(known), max=max(known))


class Sample(FrozenModel):
    """One request, raw: the server's timings and what the client measured."""

    prompt_n: int
    predicted_n: int
    ttft_s: float | None  # client: request sent -> first token
    prompt_ms: float  # server
    predicted_ms: float  # server
    prefill_tps: float  # server: prompt_n / prompt_ms
    decode_tps: float  # server: predicted_n / predicted_ms
    client_prefill_tps: float | None  # prompt_n / ttft_s
    client_decode_tps: float | None  # (predicted_n - 1) / (last chunk - first token)
    wall_s: float
    stop_type: str | None


class DepthResult(FrozenModel):
    """One configuration at one depth: medians and ranges over the repeats, and the samples.

    Requests are repeated until they agree (their spread within a bound: ``settled``) or a
    limit comes first (not settled: the range is wider than the bound).
    """

    config: str
    depth: int
    ttft_s: Stat | None
    prefill_tps: Stat
    decode_tps: Stat
    client_decode_tps: Stat | None
    device_bytes: int | None  # device memory after this depth's requests (probe)
    samples: list[Sample]
    settled: bool = True


class StreamsResult(FrozenModel):
    """``bench --parallel N``: rounds of N requests sent at once to one server (each on its own
    slot, the same prompt and tokens generated), the decode tok/s of each stream by the
    server's timings: their sum (all the streams together) and their mean (one stream's), and
    the client's time to first token (each round's mean), medians and ranges over the rounds."""

    config: str
    streams: int
    prompt_n: int  # each request's prompt tokens
    predicted_n: int  # each request's generated tokens
    decode_tps_aggregate: Stat
    decode_tps_per_stream: Stat
    ttft_s: Stat | None
    rounds: list[list[Sample]]  # each round's requests
    # the rounds' aggregates agreed within --max-spread (False: --max-repeats or --max-time
    # came first)
    settled: bool = True


class ConfigRun(FrozenModel):
    """One configuration: how it was launched and how that went."""

    name: str
    status: Literal["ok", "skipped", "failed"]
    description: str
    args: list[str]  # llama-server arguments, without the binary
    # the variables set for it beside them (GGML_OP_OFFLOAD_MIN_BATCH); empty: none
    env: dict[str, str] = {}
    predicted_bytes: int | None
    peak_device_bytes: int | None
    load_s: float | None
    fit: FitChoice | None = None
    message: str | None = None
    log_path: str | None = None
    device_peaks: list[int | None] = []  # several devices: each one's peak
    warmup: Sample | None = None  # the untimed request before the timed ones
    memory_note: str | None = None  # why the device memory is not known
    streams: list[StreamsResult] = []  # bench --parallel: each N measured


class Verdict(FrozenModel):
    """The fastest configuration at one depth by one figure, and by how much; noisy (no
    winner) when another configuration's range reaches the fastest one's."""

    depth: int
    metric: Literal["decode_tps", "prefill_tps"]
    winner: str
    runner_up: str | None
    winner_median: float
    runner_up_median: float | None
    ratio: float | None  # winner's median / runner-up's
    within_noise: bool  # the min-max range of another configuration reaches the winner's
    winner_stat: Stat | None = None  # the winner's median and range
    # the configurations whose range reaches the winner's, fastest first, with theirs
    overlapping: list[str] = []
    overlapping_stats: list[Stat] = []


class RowForecast(FrozenModel):
    """The speed model's forecast of one configuration at one depth, beside what was measured:
    calibrated on the points kept on this machine without this configuration's (out of sample),
    else from the machine's figures alone."""

    config: str
    depth: int
    decode_tps: float | None  # None: a figure is missing, or no placement to forecast
    prefill_tps: float | None
    decode_error: float | None  # |forecast - measured| / measured
    prefill_error: float | None
    calibration: ForecastCalibration = ForecastCalibration()
    missing: list[str] = []  # the figures an uncalibrated forecast lacks
    note: str | None = None  # why there is no forecast
    # bench --parallel: the decode of this many concurrent streams, ``decode_tps`` all of
    # theirs together (1: a depth's row)
    streams: int = 1


class BenchForecast(FrozenModel):
    """The forecast of every measured row (``note``: why there is none, e.g. the model file is
    not readable here)."""

    rows: list[RowForecast] = []
    streams_rows: list[RowForecast] = []  # bench --parallel: each configuration at each N
    kept_points: int = 0  # the points of the model kept on this machine it drew on
    note: str | None = None
    ram_read_bandwidth: RamFigureField | None = None  # the RAM figure it used, its source


class BenchResult(FrozenModel):
    kind: Literal["moetune.bench"] = "moetune.bench"
    created: str
    moetune_version: str
    model: str | None
    server_url: str | None
    endpoint: str
    n_ctx: int
    n_predict: int
    repeats: int  # timed requests per depth at the least, and how many of the last must agree
    depths: list[int]
    device: str | None
    device_total_bytes: int | None
    budget_bytes: int | None
    probe: str | None
    probe_includes_overhead: bool
    shortest_prompt: int | None = None  # tokens of the shortest prompt (chat: the template's)
    image: str | None = None  # the image file sent with every request (bench --image)
    # several devices: their names and budgets (device, budget_bytes: all together)
    device_names: list[str] = []
    device_budgets: list[int] = []
    configs: list[ConfigRun]
    results: list[DepthResult]
    verdicts: list[Verdict]
    # where it ran and with which llama.cpp (what its speed points keep); None: not known
    machine: SpeedMachine | None = None
    llama_cpp_build: int | None = None
    llama_cpp_commit: str | None = None
    forecast: BenchForecast | None = None  # None: not forecast (jobs/bench_forecast.py)
    # how long each depth was repeated (None: exactly ``repeats``, a result of an older moetune)
    max_repeats: int | None = None
    max_spread: float | None = None  # the bound on the last ``repeats`` requests' spread
    max_time_s: float | None = None  # no further repeat of a depth after this long


def steady(samples: Sequence[Sample], least: int, max_spread: float) -> bool:
    """At least ``least`` samples, and they agree: the spread of their decode and of their
    prefill tok/s is at most ``max_spread``."""
    if len(samples) < max(least, 1):
        return False
    for stat in (
        Stat.of([s.decode_tps for s in samples]),
        Stat.of([s.prefill_tps for s in samples]),
    ):
        if stat is None or stat.spread is None or stat.spread > max_spread:
            return False
    return True


def summarize(
    config: str,
    depth: int,
    samples: Sequence[Sample],
    device_bytes: int | None,
    *,
    settled: bool = True,
) -> DepthResult:
    """Medians and ranges of ``samples`` (at least one)."""
    if not samples:
        raise ValueError("summarize needs at least one sample")
    prefill = Stat.of([s.prefill_tps for s in samples])
    decode = Stat.of([s.decode_tps for s in samples])
    assert prefill is not None and decode is not None  # every sample has them
    return DepthResult(
        config=config,
        depth=depth,
        ttft_s=Stat.of([s.ttft_s for s in samples]),
        prefill_tps=prefill,
        decode_tps=decode,
        client_decode_tps=Stat.of([s.client_decode_tps for s in samples]),
        device_bytes=device_bytes,
        samples=list(samples),
        settled=settled,
    )


def _verdict(
    depth: int, metric: Literal["decode_tps", "prefill_tps"], rows: Sequence[DepthResult]
) -> Verdict:
    ranked = sorted(rows, key=lambda r: getattr(r, metric).median, reverse=True)
    best: Stat = getattr(ranked[0], metric)
    if len(ranked) == 1:
        return Verdict(
            depth=depth,
            metric=metric,
            winner=ranked[0].config,
            runner_up=None,
            winner_median=best.median,
            runner_up_median=None,
            ratio=None,
            within_noise=False,
            winner_stat=best,
        )
    second: Stat = getattr(ranked[1], metric)
    ratio = best.median / second.median if second.median > 0 else None
    reaching = [r for r in ranked[1:] if getattr(r, metric).max >= best.min]
    return Verdict(
        depth=depth,
        metric=metric,
        winner=ranked[0].config,
        runner_up=ranked[1].config,
        winner_median=best.median,
        runner_up_median=second.median,
        ratio=ratio,
        within_noise=bool(reaching),
        winner_stat=best,
        overlapping=[r.config for r in reaching],
        overlapping_stats=[getattr(r, metric) for r in reaching],
    )


def verdicts(results: Sequence[DepthResult]) -> list[Verdict]:
    """Per depth, the fastest configuration in decode and in prefill tok/s (higher wins).

    Noisy (no winner) when the winner's slowest repeat is no faster than another
    configuration's fastest: their ranges overlap.
    """
    found: list[Verdict] = []
    for depth in sorted({r.depth for r in results}):
        rows = [r for r in results if r.depth == depth]
        found += [_verdict(depth, "decode_tps", rows), _verdict(depth, "prefill_tps", rows)]
    return found


def capped_depths(depths: Sequence[int], n_ctx: int, n_predict: int, minimum: int) -> list[int]:
    """Depths that fit one request in ``n_ctx`` (prompt + n_predict + 1 < n_ctx), ascending.

    A depth beyond the context becomes the deepest that fits; one below ``minimum`` (the
    chat template's own tokens, or 1) becomes ``minimum``.
    """
    if n_predict < 1:
        raise BadValueError(f"--n-predict must be at least 1, got {n_predict}")
    if any(d < 0 for d in depths) or not depths:
        raise BadValueError("--depths needs one or more depths of 0 tokens or more")
    cap = n_ctx - n_predict - 1
    if cap < minimum:
        raise BadValueError(
            f"context {n_ctx} has no room for a prompt and {n_predict} generated tokens",
            hint="raise --ctx or lower --n-predict",
        )
    return sorted({max(minimum, min(d, cap)) for d in depths})


def merge_results(results: Sequence[BenchResult], labels: Sequence[str]) -> BenchResult:
    """Several saved results as one (configurations renamed ``name@label`` where names clash)."""
    if len(results) == 1:
        return results[0]
    names = [c.name for r in results for c in r.configs]
    runs: list[ConfigRun] = []
    rows: list[DepthResult] = []
    forecasts: list[RowForecast] = []
    notes: list[str] = []
    for result, label in zip(results, labels, strict=True):
        rename = {
            c.name: f"{c.name}@{label}" if names.count(c.name) > 1 else c.name
            for c in result.configs
        }
        runs += [c.model_copy(update={"name": rename[c.name]}) for c in result.configs]
        rows += [
            r.model_copy(update={"config": rename.get(r.config, r.config)}) for r in result.results
        ]
        if result.forecast is not None:
            forecasts += [
                f.model_copy(update={"config": rename.get(f.config, f.config)})
                for f in result.forecast.rows
            ]
            notes += [f"{label}: {result.forecast.note}"] if result.forecast.note else []
    depths = sorted({d for r in results for d in r.depths})
    forecast = None
    if any(r.forecast is not None for r in results):
        forecast = BenchForecast(
            rows=forecasts,
            kept_points=max(r.forecast.kept_points for r in results if r.forecast is not None),
            note="; ".join(notes) or None,
        )
    update = {"configs": runs, "results": rows, "verdicts": verdicts(rows), "depths": depths}
    return results[0].model_copy(update={**update, "forecast": forecast})
