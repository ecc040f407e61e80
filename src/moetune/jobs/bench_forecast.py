"""The speed model's forecast beside each `bench` measurement: every configuration at every
depth, calibrated on the speed points of the model on the machine it ran on (those kept and
the bench's own) without the points of the configuration shown, so each forecast is out of
sample; uncalibrated (from the machine's figures alone) where fewer than two points remain.
`bench` adds it before rendering, `moetune report` computes it again from the saved file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from moetune.core.backends import kind_of
from moetune.core.calibrate import SpeedFit, fit_of, point_forecast, relative_error
from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts
from moetune.core.ram import RamFigure
from moetune.core.settings import Settings
from moetune.core.speed import (
    DeviceFigures,
    ForecastCalibration,
    MachineFigures,
    SpeedLayout,
    forecast,
)
from moetune.errors import MoetuneError
from moetune.jobs.speed import (
    bench_points,
    depth_points,
    measured_of,
    settings_of_args,
    streams_points,
)
from moetune.records.results import BenchForecast, BenchResult, ConfigRun, RowForecast
from moetune.records.speed import SpeedMachine, SpeedModel, SpeedPoint, SpeedSource
from moetune.store.speed import point_digest

NO_PLACEMENT = "no placement to forecast (llama.cpp's --fit chose it, or an -ot target is unknown)"


def devices_of(result: BenchResult) -> tuple[DeviceSpec, ...]:
    """The devices the bench ran on, in llama.cpp's order, as the speed model reads them."""
    machine = result.machine or SpeedMachine()
    names = machine.devices or result.device_names or ([result.device] if result.device else [])
    described = (machine.gpu_info or "").split(", ")
    if len(described) != len(names):
        described = [""] * len(names)
    return tuple(
        DeviceSpec(
            name=name,
            buft=name,
            kind=_kind(name),
            description=description,
        )
        for name, description in zip(names, described, strict=True)
    )


def _kind(name: str) -> str:
    """The backend of a device a bench names (a name of no known backend: a GPU, CUDA's)."""
    kind = kind_of(name)
    return "cuda" if kind == "cpu-like" else kind


def _same(a: SpeedLayout, b: SpeedLayout) -> bool:
    """The same placement and ubatch as the speed model reads them, whatever the context
    (however a source spelled it: ``-ngl 99`` or none, ``-cmoe`` or ``-ot``)."""
    return replace(a, n_cells=0) == replace(b, n_cells=0)


def _measured(point: SpeedPoint) -> bool:
    """A speed a fit and an error can read: finite and above zero."""
    return math.isfinite(point.tps) and point.tps > 0


def _settings(result: BenchResult, found: dict[str, Any]) -> Settings:
    return Settings(
        n_ctx=result.n_ctx,
        type_k=found.get("type_k") or "f16",
        type_v=found.get("type_v") or "f16",
    )


def _config_rows(
    result: BenchResult,
    run: ConfigRun,
    facts: ModelFacts,
    pool: Sequence[SpeedPoint],
    figures: MachineFigures,
    *,
    model: SpeedModel | None,
    streams_fits: dict[str, SpeedFit | None],
) -> list[RowForecast]:
    devices = devices_of(result)
    _, found = settings_of_args(run.args)
    settings = _settings(result, found)
    threads = found.get("n_threads")
    own = measured_of(bench_points_of(result, run), facts, settings, devices)
    layout = own[0].layout if own else None
    others = []
    for point in pool:
        measured = measured_of([point], facts, settings, devices, model=model)
        if measured and not (
            layout is not None and _same(measured[0].layout, layout) and point.n_threads == threads
        ):
            others += measured
    fit: SpeedFit | None = fit_of(others, figures)
    streams_fits[run.name] = fit
    calibration = fit.calibration if fit is not None else ForecastCalibration()
    shown = SpeedModel(file_name=run.name)
    source = SpeedSource(tool="moetune bench", config=run.name)
    rows = []
    for row in (r for r in result.results if r.config == run.name):
        speeds: dict[str, tuple[float | None, float | None]] = {}
        missing: list[str] = []
        for point in depth_points(
            row, run.args, model=shown, machine=SpeedMachine(), source=source, env=run.env
        ):
            measured = measured_of([point], facts, settings, devices)
            if not measured:
                continue
            tps = point_forecast(measured[0], figures, fit)
            error = relative_error(tps, point.tps) if _measured(point) else None
            speeds[point.kind] = (tps, error)
            if fit is None and tps is None:
                missing += _missing(measured[0].layout, figures)
        decode, prefill = speeds.get("generation"), speeds.get("prompt")
        rows.append(
            RowForecast(
                config=row.config,
                depth=row.depth,
                decode_tps=decode[0] if decode else None,
                prefill_tps=prefill[0] if prefill else None,
                decode_error=decode[1] if decode else None,
                prefill_error=prefill[1] if prefill else None,
                calibration=calibration,
                missing=list(dict.fromkeys(missing)),
                note=None if speeds else NO_PLACEMENT,
            )
        )
    return rows


def _streams_rows(
    result: BenchResult,
    run: ConfigRun,
    facts: ModelFacts,
    fit: SpeedFit | None,
    figures: MachineFigures,
) -> list[RowForecast]:
    """``bench --parallel``: the forecast of each N's aggregate decode (N streams at their
    prompt), on ``fit`` (the configuration's rows' own)."""
    devices = devices_of(result)
    _, found = settings_of_args(run.args)
    settings = _settings(result, found)
    calibration = fit.calibration if fit is not None else ForecastCalibration()
    source = SpeedSource(tool="moetune bench", config=run.name)
    rows = []
    for streams in run.streams:
        points = streams_points(
            streams,
            run.args,
            model=SpeedModel(file_name=run.name),
            machine=SpeedMachine(),
            source=source,
            env=run.env,
        )
        measured = measured_of(points, facts, settings, devices)
        tps = point_forecast(measured[0], figures, fit) if measured else None
        error = relative_error(tps, points[0].tps) if measured else None
        rows.append(
            RowForecast(
                config=run.name,
                depth=streams.prompt_n,
                decode_tps=tps,
                prefill_tps=None,
                decode_error=error,
                prefill_error=None,
                calibration=calibration,
                note=None if measured else NO_PLACEMENT,
                streams=streams.streams,
            )
        )
    return rows


def bench_points_of(result: BenchResult, run: ConfigRun) -> list[SpeedPoint]:
    """The points of one configuration of ``result``."""
    return [p for p in bench_points(result, None) if p.source.config == run.name]


def _missing(layout: SpeedLayout, figures: MachineFigures) -> list[str]:
    """The figures an uncalibrated forecast of ``layout`` lacks."""
    return forecast(layout, figures).missing


def bench_forecast(
    result: BenchResult,
    facts: ModelFacts,
    kept: Sequence[SpeedPoint] = (),
    figures: MachineFigures | None = None,
    model: SpeedModel | None = None,
) -> BenchForecast:
    """Each measured row's forecast, calibrated on ``kept`` (the points kept on the bench's
    machine: of ``model``, the bench's, and of other models, each laid out with its own
    model's facts) and the bench's own points, without those of the row's configuration."""
    devices = devices_of(result)
    if not devices:
        return BenchForecast(note="no device recorded: nothing to forecast")
    figures = figures or MachineFigures(devices=tuple(DeviceFigures() for _ in devices))
    pool: dict[str, SpeedPoint] = {}
    for point in filter(_measured, (*kept, *bench_points(result, None))):
        pool.setdefault(point_digest([point]), point)
    rows: list[RowForecast] = []
    streams_rows: list[RowForecast] = []
    fits: dict[str, SpeedFit | None] = {}
    for run in result.configs:
        rows += _config_rows(
            result, run, facts, list(pool.values()), figures, model=model, streams_fits=fits
        )
        streams_rows += _streams_rows(result, run, facts, fits.get(run.name), figures)
    return BenchForecast(rows=rows, streams_rows=streams_rows, kept_points=len(kept))


def figures_here(
    devices: Sequence[DeviceSpec], ram: RamFigure | None, cores: int | None = None
) -> MachineFigures:
    """What the machine's figures say (``jobs.figures.machine_figures``): a device's memory
    bandwidth, PCIe link and FP16 FLOP/s from the hardware profile of its name, else the
    typical ones of its class; ``ram`` (``jobs.figures.ram_figure``), else the typical one;
    the CPU's from ``cores`` (None: another machine's, assumed)."""
    from moetune.jobs.figures import device_profiles, machine_figures

    return machine_figures(devices, device_profiles(devices), ram, cores=cores)


def with_forecast(
    result: BenchResult,
    *,
    schema_version: int,
    warn: Callable[[str], None] = lambda text: None,
    facts: ModelFacts | None = None,
) -> BenchResult:
    """``result`` with its forecast: the model read from its file unless ``facts`` are
    given; the points kept on this machine and its figures where it ran here. A bench of
    a running server, or a model file not readable here, gets a note instead."""
    from moetune.hardware.host import cpu_model
    from moetune.jobs.devices import physical_cores
    from moetune.jobs.figures import ram_figure
    from moetune.jobs.loader import load_model_facts
    from moetune.jobs.speed import model_of
    from moetune.jobs.speed_from import machine_points

    model = result.model
    if result.server_url is not None or model is None:
        note = "a running server's bench: no placement to forecast"
        return result.model_copy(update={"forecast": BenchForecast(note=note)})
    if facts is None:
        try:
            facts = load_model_facts(model)
        except (MoetuneError, OSError, ValueError):
            note = f"the model file {model} is not readable here: measurements only"
            return result.model_copy(update={"forecast": BenchForecast(note=note)})
    machine = result.machine
    if machine is None or machine.cpu_info != cpu_model():
        # another machine's: its devices' figures, typical RAM and CPU
        figures = figures_here(devices_of(result), None)
        return result.model_copy(update={"forecast": bench_forecast(result, facts, (), figures)})
    known = model_of(model)
    kept = machine_points(machine, known, warn)
    ram = ram_figure(None, warn=warn)
    figures = figures_here(devices_of(result), ram, physical_cores())
    found = bench_forecast(result, facts, kept, figures, known).model_copy(
        update={"ram_read_bandwidth": ram}
    )
    return result.model_copy(update={"forecast": found})


def saved_results(
    files: Sequence[Path], *, schema_version: int, warn: Callable[[str], None]
) -> BenchResult:
    """Saved bench results read again, each with its forecast made again, compared as one
    (configurations named NAME@FILE where names clash)."""
    from moetune.records.results import merge_results
    from moetune.store.bench import load_result

    results = [
        with_forecast(load_result(path, schema_version), schema_version=schema_version, warn=warn)
        for path in files
    ]
    return merge_results(results, [path.stem for path in files])
