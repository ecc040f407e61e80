"""The speed forecast (core/speed.py) against measured llama-bench speeds, calibrated
(core/calibrate.py) on two placements at two ubatch sizes, and from the figures alone.

1. Public llama-bench sweeps kept under benchmarks/data/public_sweeps/ (each file names its
   source; see its README), of the models whose shapes moetune has as header-only examples
   (examples/models/; tests/support/public_sweeps.py reads them). Each is calibrated on the
   rows of two placements (two ubatch sizes where the sweep has them) and forecasts the rest.
   Uncalibrated: the machine's public figures (a GPU's memory bandwidth, PCIe link and FLOP/s
   from its hardware profile or its source; the RAM's peak only where the source states
   type, rate and channels: otherwise the figure is printed as missing, never guessed), with
   core/prior.py's typical factors fitted again WITHOUT this machine's points (leave one
   machine out), so the figure is what a new machine would see.
2. The test rig: the real llama-bench (``scripts/llama-bin-dir.sh``) on a small qwen3moe
   model (tests/support/factory.py's: 8 blocks, 384 MiB of F16 experts in all) with a
   ``ggml-rpc-server`` device on 127.0.0.1, a sweep of ``--n-cpu-moe`` x ``-ub`` (-p 64
   -n 16), run RIG_ROUNDS times with -r RIG_REPETITIONS (each test's speed the median of
   its samples), calibrated on 2 x 2 configurations. A token of a tinier model takes a few
   milliseconds, most of them this VM's scheduling jitter; here most of a token's time is
   bytes read, as on a real offload.
   Uncalibrated, the RPC device's memory and the CPU's are this host's RAM, measured here
   (hardware/membw.py), with core/prior.py's typical factors as shipped.

Errors are relative errors of tok/s, median and max over the points forecast. The issue's
targets: 15 % calibrated, 35 % uncalibrated; each line says where it is behind. Figures
only, never a timed assertion.

    python benchmarks/speed_forecast.py            # public sweeps and the rig
    python benchmarks/speed_forecast.py --no-rig   # public sweeps only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from moetune.core.calibrate import (
    Measured,
    fit_speed,
    point_forecast,
    relative_error,
)
from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.facts import facts_from_gguf
from moetune.core.prior import PUBLIC_PRIOR, SpeedPrior
from moetune.core.routing import routing_exponent
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, HomeLoad, MachineFigures, SpeedLayout, forecast
from moetune.gguf.split import read_model
from moetune.jobs.speed import measured_of
from moetune.llamacpp.bench_results import parse_bench_text
from moetune.records.speed import SpeedPoint

from support.public_sweeps import ALL_ON_GPU, PUBLIC, SWEEPS, Key, Sweep, fit_prior

CALIBRATED_TARGET = 0.15
UNCALIBRATED_TARGET = 0.35


def _summary(errors: Sequence[float | None]) -> tuple[str, float | None]:
    known = [e for e in errors if e is not None]
    if not known:
        return "n/a", None
    median = statistics.median(known)
    return f"median {median:.1%}, max {max(known):.1%} over {len(known)}", median


def _behind(median: float | None, target: float) -> str:
    if median is None:
        return ""
    return "" if median <= target else f"  <- behind the {target:.0%} target"


# --- coverage: the rows that get a forecast, beside the error -----------------------------------


class Tally:
    """Every error printed of the public sweeps, by kind (``calibrated``, ``uncalibrated``):
    None where a row got no forecast; the summary at the end is their coverage and median
    (the uncalibrated median is core/prior.py's ``UNCALIBRATED_ERROR``)."""

    def __init__(self) -> None:
        self.errors: dict[str, list[float | None]] = {"calibrated": [], "uncalibrated": []}

    def add(self, kind: str, errors: Sequence[float | None]) -> None:
        self.errors.setdefault(kind, []).extend(errors)

    def summary(self) -> list[str]:
        lines = []
        for kind, errors in self.errors.items():
            if not errors:
                continue
            text, median = _summary(errors)
            target = CALIBRATED_TARGET if kind == "calibrated" else UNCALIBRATED_TARGET
            lines.append(
                f"overall {kind + ':':<14}{text}, {coverage(errors)} of the public sweeps"
                + _behind(median, target)
            )
        return lines


TALLY = Tally()


def coverage(errors: Sequence[float | None]) -> str:
    """``coverage 58/60 rows (97%)``: the rows that got a forecast."""
    known = sum(e is not None for e in errors)
    share = known / len(errors) if errors else 0.0
    return f"coverage {known}/{len(errors)} rows ({share:.0%})"


def estimated_note(machine: MachineFigures) -> str:
    """`` (derived: ...; assumed: ...)``: the figures a forecast rests on that no source
    publishes as such (core/figures.py)."""
    from moetune.core.figures import estimated

    parts = [f"{kind}: {', '.join(names)}" for kind, names in estimated(machine.sources).items()]
    return f" ({'; '.join(parts)})" if parts else ""


def evaluate(
    name: str,
    points: Sequence[Measured],
    keys: Sequence[Key],
    calibrate: Sequence[Key],
    machine: MachineFigures,
    *,
    prior: SpeedPrior | None,
    filled: MachineFigures | None = None,
    tally: Tally | None = None,
) -> list[str]:
    """Calibrate on the points of ``calibrate``'s configurations, forecast the others; and
    the uncalibrated forecast of every point from ``prior`` (for a public sweep, a prior
    fitted without this machine's points) on ``filled`` (every figure, derived or assumed
    where none is published; default ``machine``). Each line says its coverage; ``tally``
    keeps the errors for the summary."""
    filled = filled or machine
    train = [m for m, k in zip(points, keys, strict=True) if k in calibrate]
    test = [(m, k) for m, k in zip(points, keys, strict=True) if k not in calibrate]
    if calibrate:
        lines = [
            f"{name}: {len(points)} points, calibrated on {len(train)} ({len(calibrate)} configs)"
        ]
    else:
        lines = [f"{name}: {len(points)} points of one configuration (uncalibrated only)"]
    if calibrate and (len(train) < 2 or not test):
        lines.append("  too few points to calibrate and test")
    elif calibrate:
        fit = fit_speed(train, machine)
        calibrated = [relative_error(point_forecast(m, machine, fit), m.tps) for m, _ in test]
        text, median = _summary(calibrated)
        if tally is not None:
            tally.add("calibrated", calibrated)
        lines.append(
            f"  calibrated:   {text}, {coverage(calibrated)}{_behind(median, CALIBRATED_TARGET)}"
        )
    # the prior never saw this machine: every point of the sweep is out of its sample
    raw = [relative_error(point_forecast(m, filled, None, prior), m.tps) for m in points]
    text, median = _summary(raw)
    if tally is not None:
        tally.add("uncalibrated", raw)
    missing = sorted({f for m in points for f in _missing(m, filled)})
    lines.append(
        f"  uncalibrated: {text}, {coverage(raw)}{_behind(median, UNCALIBRATED_TARGET)}"
        + (f" (missing: {', '.join(missing)})" if missing else "")
        + estimated_note(filled)
    )
    for kind, decode in (("decode", True), ("prefill", False)):
        part = [e for e, m in zip(raw, points, strict=True) if m.is_decode == decode]
        text, _ = _summary(part)
        if part and text != "n/a" and len(part) < len(raw):
            lines.append(f"    {kind:<8}{text}")
    return lines


def _missing(m: Measured, machine: MachineFigures) -> list[str]:
    found = forecast(m.layout, machine, n_prompt=max(m.n_prompt, 1))
    terms = found.decode_terms if m.is_decode else found.prefill_terms
    return [t.figure for t in terms if t.seconds is None]


def public() -> list[str]:
    """Each sweep calibrated on its own two configurations, and uncalibrated from the
    typical factors of the other machines' public points (leave this machine out)."""
    lines = []
    priors: dict[str, SpeedPrior | None] = {}
    for sweep in (*PUBLIC, *ALL_ON_GPU):
        if sweep.machine not in priors:
            try:
                priors[sweep.machine] = fit_prior(without=sweep.machine)
            except ValueError:  # too few points elsewhere
                priors[sweep.machine] = None
        data = sweep.data
        lines += evaluate(
            sweep.file,
            sweep.points(),
            sweep.keys(),
            sweep.calibrate,
            sweep.figures(),
            prior=priors[sweep.machine],
            filled=sweep.filled_figures(),
            tally=TALLY,
        )
        lines.append(f"  ({sweep.note}; source: {data['source']})")
    return lines


# --- the test rig --------------------------------------------------------------------------------

RIG_BLOCKS = 8  # the rig model's blocks
RIG_N = (0, 2, 4, 6, 8)  # --n-cpu-moe, up to every block
RIG_UB = (32, 64, 128)
# what `calibrate --measure` runs on a device whose smallest N is 2: N and every expert on the
# CPU (N = 8), at the smallest and the largest ubatch
RIG_CALIBRATE = ((2, 32), (2, 128), (8, 32), (8, 128))
RIG_ROUNDS = 3  # the whole sweep runs this many times
RIG_REPETITIONS = 3  # and each test this many times in a row (-r); its speed: the median of all
# expert FFN width (= n_embd) of the rig's model: 48 MiB of experts per block, so a token's
# time is mostly bytes read (as on a real offload), not this VM's scheduling jitter
RIG_EMBD = 1024


@contextlib.contextmanager
def _rig() -> Iterator[tuple[Path, str]]:
    from support.factory import write_model
    from support.llama import rpc_server

    with tempfile.TemporaryDirectory(prefix="moetune-speed-") as tmp:
        model = write_model(
            Path(tmp) / "rig-moe.gguf", "qwen3moe", n_layers=RIG_BLOCKS, n_embd=RIG_EMBD
        )
        with rpc_server() as endpoint:
            yield model, endpoint


def _medians(rounds: Sequence[Sequence[SpeedPoint]]) -> list[SpeedPoint]:
    """The first round's points, each with the median of all its test's samples over the
    rounds: a shared machine's load changes over seconds, so one configuration's samples
    agree with each other and not with the next configuration's; rounds spread it over all
    of them."""
    speeds: dict[tuple[object, ...], list[float]] = {}
    for points in rounds:
        for p in points:
            speeds.setdefault(_test_key(p), []).extend(p.samples_tps or [p.tps])
    return [
        p.model_copy(update={"tps": statistics.median(speeds[_test_key(p)])}) for p in rounds[0]
    ]


def _test_key(p: SpeedPoint) -> tuple[object, ...]:
    return (p.placement.n_cpu_moe, p.n_ubatch, p.n_prompt, p.n_gen, p.n_depth)


def rig(rounds: int = RIG_ROUNDS) -> list[str]:
    from moetune.hardware.membw import measure_read_bandwidth

    from support.llama import LlamaBinaryError, bin_path

    try:
        bench = bin_path("llama-bench")
    except LlamaBinaryError as exc:  # no llama.cpp here: say so, print the rest
        return [f"test rig: skipped ({exc})"]
    with _rig() as (model, endpoint):
        argv = [str(bench), "-m", str(model), "-rpc", endpoint, "-t", "1"]
        argv += ["-r", str(RIG_REPETITIONS)]
        argv += ["-ncmoe", ",".join(map(str, RIG_N)), "-ub", ",".join(map(str, RIG_UB))]
        argv += ["-p", "64", "-n", "16", "-o", "jsonl"]
        runs = []
        for _ in range(rounds):
            out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
            runs.append(parse_bench_text(out.stdout, "llama-bench"))
        points = _medians(runs)
        facts = facts_from_gguf(read_model(str(model)))
    device = DeviceSpec(name="RPC0", buft=rpc_buft(endpoint), kind="rpc", description=endpoint)
    settings = Settings(n_ctx=512, type_k="f16", type_v="f16")
    measured = measured_of(points, facts, settings, (device,))
    keys = [(p.placement.n_cpu_moe, p.n_ubatch or 512) for p in points]
    ram = measure_read_bandwidth(256 * 2**20, 1).bytes_per_s  # one thread, as -t 1
    machine = MachineFigures(devices=(DeviceFigures(memory_bytes_per_s=ram),), ram_bytes_per_s=ram)
    filled = rig_figures(device, ram)
    name = (
        f"test rig (qwen3moe, {RIG_BLOCKS} blocks of width {RIG_EMBD}, RPC device on 127.0.0.1, "
        f"RAM {ram / 1e9:.1f} GB/s, "
        f"median of {rounds} rounds x {RIG_REPETITIONS})"
    )
    return evaluate(name, measured, keys, RIG_CALIBRATE, machine, prior=PUBLIC_PRIOR, filled=filled)


def rig_figures(device: DeviceSpec, ram: int) -> MachineFigures:
    """The rig's every figure (jobs/figures.py): the RPC device's memory is this host's RAM,
    measured; its FLOP/s and the CPU's one core's (``-t 1``), assumed (core/figures.py); its
    link the typical RPC network's, assumed."""
    from moetune.core.figures import FigureSource, cpu_flops
    from moetune.core.ram import RamFigure
    from moetune.jobs.figures import machine_figures

    one_core = cpu_flops(1)
    stated = [
        FigureSource(
            figure=f"{device.name} memory bandwidth",
            value=ram,
            provenance="measured",
            basis="this host's RAM, one thread",
            device=0,
            quantity="memory",
        ),
        replace(one_core, figure=f"{device.name} FLOP/s", device=0, quantity="flops"),
    ]
    return machine_figures(
        (device,), (None,), RamFigure(bytes_per_s=ram, source="measured"), cores=1, stated=(stated,)
    )


# --- one calibration per machine: calibrated on one model, forecasting another ----------------

CROSS_TARGET = 0.20  # calibrated on one model's points, forecasting another on the same machine
SAME_MODEL_TARGET = 0.10  # calibrated on the model's own points, over every public sweep

# sweeps of a machine that has sweeps of other models too, beside PUBLIC (same rules)
CROSS_EXTRA = (
    Sweep(
        file="moearc-b580-sycl-gptoss20b-mxfp4-ncmoe-tg.json",
        model="gpt-oss-20b-MXFP4.header.gguf",
        machine="Arc B580 + Core Ultra 7 265K",
        # what `calibrate --measure` runs: every expert on the CPU (N 24) and the smallest N
        # that fits (0, in the next file)
        calibrate=((24, 512),),
        gpu_profile=None,
        note="the same machine, gpt-oss-20b, N 24..14 (two invocations)",
        device="SYCL0",
        skip_first=True,
    ),
    Sweep(
        file="moearc-b580-sycl-gptoss20b-mxfp4-ncmoe-low-tg.json",
        model="gpt-oss-20b-MXFP4.header.gguf",
        machine="Arc B580 + Core Ultra 7 265K",
        calibrate=((0, 512),),
        gpu_profile=None,
        note="the same machine, gpt-oss-20b, N 12..0",
        device="SYCL0",
        skip_first=True,
    ),
)

# sweeps of machines with several models whose model has no example header (examples/models/):
# no layout, no forecast; named so the gap shows
CROSS_NO_HEADER = (
    (
        "Arc B580 + Core Ultra 7 265K",
        "Qwen3.6-35B-A3B",
        "moearc-b580-sycl-qwen36-35b-a3b-q4km-ncmoe-tg.json",
    ),
    (
        "RTX 4080 + Ryzen 7950X",
        "DeepSeek-V2-Lite",
        "ik_llama-pr698-deepseeklite-4080-7950x-cpuexps-ubatch.json",
    ),
    (
        "R9700 + Ryzen 5700X",
        "Qwen3.6-35B-A3B",
        "cicero-r9700-rocm-qwen36-35b-a3b-q5kxl-ncmoe-ubatch.json",
    ),
    (
        "R9700 + Ryzen 5700X",
        "gemma-4-26B-A4B",
        "cicero-r9700-rocm-gemma4-26b-a4b-iq4xs-ncmoe-ubatch.json",
    ),
    (
        "R9700 + Ryzen 5700X",
        "Qwen3.5-122B-A10B",
        "cicero-r9700-rocm-qwen35-122b-a10b-q4kxl-ncmoe-ubatch.json",
    ),
)


class _Unit(NamedTuple):
    """One model's rows on one machine (its sweeps of the same figures together)."""

    machine: str
    model: str
    files: tuple[str, ...]
    figures: MachineFigures
    points: tuple[Measured, ...]
    calibrate: tuple[Measured, ...]  # the points of its calibration configurations


def _units() -> list[_Unit]:
    units: dict[tuple[str, str, str], _Unit] = {}
    known = {sweep.file for sweep in (*PUBLIC, *ALL_ON_GPU)}
    extra = tuple(sweep for sweep in CROSS_EXTRA if sweep.file not in known)
    for sweep in (*PUBLIC, *ALL_ON_GPU, *extra):
        figures = sweep.figures()
        points = [m._replace(model=sweep.model) for m in sweep.points()]
        keys = set(sweep.calibrate)
        calibrate = [m for m, k in zip(points, sweep.keys(), strict=True) if k in keys]
        at = (sweep.machine, sweep.model, repr(figures))
        if at in units:
            unit = units[at]
            units[at] = unit._replace(
                files=(*unit.files, sweep.file),
                points=(*unit.points, *points),
                calibrate=(*unit.calibrate, *calibrate),
            )
        else:
            units[at] = _Unit(
                sweep.machine, sweep.model, (sweep.file,), figures, tuple(points), tuple(calibrate)
            )
    return list(units.values())


def _short(model: str) -> str:
    return model.removesuffix(".header.gguf")


def _cross(train: Sequence[Measured], figures: MachineFigures, test: _Unit) -> list[float | None]:
    fit = fit_speed(train, figures)
    return [relative_error(point_forecast(m, test.figures, fit), m.tps) for m in test.points]


def cross_model() -> list[str]:
    """Each machine with sweeps of two or more models: calibrated on one model's calibration
    configurations (all its points where it has none), forecasting every row of each other
    model; and on every other model's together. The fit's factors are the machine's
    (core/calibrate.py), each point laid out with its own model's facts."""
    lines = ["cross-model calibration (calibrated on one model, forecasting another, same machine)"]
    by_machine: dict[str, list[_Unit]] = {}
    for unit in _units():
        by_machine.setdefault(unit.machine, []).append(unit)
    overall: list[float | None] = []
    for machine, units in by_machine.items():
        if len({u.model for u in units}) < 2:
            continue
        lines.append(f"  {machine}:")
        for source in units:
            train = source.calibrate or source.points
            for target in units:
                if target.model == source.model:
                    continue
                errors = _cross(train, source.figures, target)
                overall += errors
                text, median = _summary(errors)
                lines.append(
                    f"    {_short(source.model)} ({len(train)} points) -> {_short(target.model)}: "
                    f"{text}{_behind(median, CROSS_TARGET)}"
                )
        for target in units:
            others = [u for u in units if u.model != target.model]
            if len(others) < 2:
                continue
            train = tuple(m for u in others for m in (u.calibrate or u.points))
            text, median = _summary(_cross(train, others[0].figures, target))
            lines.append(
                f"    every other model ({len(train)} points) -> {_short(target.model)}: "
                f"{text}{_behind(median, CROSS_TARGET)}"
            )
    text, median = _summary(overall)
    lines.append(f"  cross-model, every pair: {text}{_behind(median, CROSS_TARGET)}")
    for machine, model, file in CROSS_NO_HEADER:
        lines.append(f"  not forecast: {file} ({machine}, {model}): no example header of the model")
    lines += _same_model_overall()
    return lines


def _same_model_overall() -> list[str]:
    """The calibrated error (each sweep on its own calibration configurations) over every
    public sweep's points it was not calibrated on, together."""
    errors: list[float | None] = []
    for sweep in PUBLIC:
        points, keys, figures = sweep.points(), sweep.keys(), sweep.figures()
        train = [m for m, k in zip(points, keys, strict=True) if k in sweep.calibrate]
        test = [m for m, k in zip(points, keys, strict=True) if k not in sweep.calibrate]
        if len(train) < 2 or not test:
            continue
        fit = fit_speed(train, figures)
        errors += [relative_error(point_forecast(m, figures, fit), m.tps) for m in test]
    text, median = _summary(errors)
    return [
        f"same-model calibration, every public sweep together: "
        f"{text}{_behind(median, SAME_MODEL_TARGET)}"
    ]


# --- threads: the public -t sweeps ---------------------------------------------------------------

# (file, example model header, device): the public sweeps over -t of one placement
THREAD_SWEEPS = (
    (
        "moearc-b580-sycl-qwen3-30b-a3b-q4km-ncmoe18-threads-tg.json",
        "Qwen3-30B-A3B-Q4_K_M.header.gguf",
    ),
    ("moearc-b580-sycl-gptoss120b-mxfp4-ncmoe36-threads-tg.json", "gpt-oss-120b-MXFP4.header.gguf"),
)


def thread_sweep(file: str, model: str) -> list[str]:
    """One -t sweep: calibrated on its most threads and half of them (what `calibrate
    --measure` runs), the forecast against measured at each count, and whether the forecast's
    best count measured within the forecast's error of the measured best. The sources state
    no physical cores: the most threads swept are taken as the cores."""
    from dataclasses import replace

    from support.public_sweeps import ROOT, SWEEPS, measured

    data = json.loads((SWEEPS / file).read_text())
    facts = facts_from_gguf(read_model(str(ROOT / "examples" / "models" / model)))
    device = DeviceSpec(name="SYCL0", buft="SYCL0")
    rows = [r for r in data["rows"][1:] if r.get("ts")]  # the first: the warm-up (notes)
    points = [
        m._replace(layout=replace(m.layout, n_threads=r["n_threads"]))
        for r, m in ((r, measured(facts, r, device)) for r in rows)
    ]
    cores = max(r["n_threads"] for r in rows)
    machine = MachineFigures(devices=(DeviceFigures(),), physical_cores=cores)
    train = [m for m in points if m.layout.n_threads in (cores, cores // 2)]
    test = [m for m in points if m not in train]
    lines = [f"-t sweep {file}: {len(points)} points, fitted on -t {cores} and {cores // 2}"]
    if len(train) < 2 or not test:
        return [*lines, "  too few points to calibrate and test"]
    fit = fit_speed(train, machine)
    errors = [relative_error(point_forecast(m, machine, fit), m.tps) for m in test]
    text, error = _summary(errors)
    lines.append(f"  other counts: {text}")
    speeds: dict[int, list[float]] = {}
    forecasts: dict[int, float] = {}
    for m in points:
        t = m.layout.n_threads or cores
        speeds.setdefault(t, []).append(m.tps)
        forecasts[t] = point_forecast(m, machine, fit) or 0.0
    measured_at = {t: statistics.median(v) for t, v in speeds.items()}
    for t in sorted(measured_at):
        lines.append(f"    -t {t:<3} forecast {forecasts[t]:7.2f}  measured {measured_at[t]:7.2f}")
    pick = max(forecasts, key=lambda t: (forecasts[t], -t))
    best = max(measured_at, key=lambda t: measured_at[t])
    gap = 1 - measured_at[pick] / measured_at[best]
    within = error is not None and gap <= error
    lines.append(
        f"  forecast's best -t {pick}: measured {gap:.1%} below the measured best (-t {best}); "
        + ("within" if within else "NOT within")
        + f" its error {error:.1%}"
        if error is not None
        else "its error unknown"
    )
    lines.append(f"  (cores taken as {cores}, the most swept; source: {data['source']})")
    return lines


def threads() -> list[str]:
    lines = []
    for file, model in THREAD_SWEEPS:
        lines += thread_sweep(file, model)
    return lines


# --- the op-offload threshold (GGML_OP_OFFLOAD_MIN_BATCH) -------------------------------------

PR520 = "ik_llama-pr520-deepseeklite-iq4ks-cpuexps-ubatch.json"
# each build's threshold in mainline terms: ik_llama.cpp's main offloads MoE matmuls from a
# 32-token batch (mainline's default), PR 520 from n_expert / n_used * 32 = 64 / 6 * 32 =
# 341.3 tokens, and built with GGML_CUDA_MIN_BATCH_OFFLOAD=64 from 682.7 (the file's notes)
PR520_THRESHOLDS = {
    "main branch": 32,
    "PR 520 (GGML_CUDA_MIN_BATCH_OFFLOAD=32, default)": 342,
    "PR 520 with GGML_CUDA_MIN_BATCH_OFFLOAD=64": 683,
}
# DeepSeek-V2-Lite (the post's "DeepSeek-Lite", 15.76 B parameters) by its published
# configuration, https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json:
# 27 blocks (the first dense, FFN 10944), hidden 2048, 16 heads, no Q compression, KV rank 512
# (+ 64 RoPE), QK 128 + 64 and V 128 per head, 26 MoE blocks of 64 routed experts (6 used,
# FFN 1408) and 2 shared, vocabulary 102400. No header of the file is in the repository, so
# its layout is written here from those numbers; every tensor at IQ4_KS's 4.25 bits per
# weight (the other tensors' types are not posted).
LITE_BYTES_PER_PARAM = 4.25 / 8
LITE_BLOCKS, LITE_MOE, LITE_EMBD, LITE_HEADS = 27, 26, 2048, 16
LITE_EXPERTS = LITE_MOE * 64 * 3 * LITE_EMBD * 1408  # routed, on the CPU (-ot exps=CPU)
LITE_DENSE = (
    LITE_BLOCKS * (LITE_EMBD * LITE_HEADS * 192 + LITE_EMBD * 576 + 512 * LITE_HEADS * 256)
    + LITE_BLOCKS * LITE_HEADS * 128 * LITE_EMBD  # attention output
    + LITE_MOE * (3 * LITE_EMBD * 2 * 1408 + LITE_EMBD * 64)  # shared experts, router
    + 3 * LITE_EMBD * 10944  # the dense block's FFN
)
LITE_HEAD = 102400 * LITE_EMBD


def _lite_layout(n_ubatch: int, threshold: int, n_ctx: int) -> SpeedLayout:
    """DeepSeek-V2-Lite with every routed expert on the CPU, the rest on one CUDA device."""
    size = LITE_BYTES_PER_PARAM
    device = HomeLoad(
        dense_bytes=int(LITE_DENSE * size),
        dense_params=LITE_DENSE,
        head_bytes=int(LITE_HEAD * size),
        head_params=LITE_HEAD,
        kv_cell_bytes=LITE_BLOCKS * 2 * (512 + 64),  # MLA's latent cache, f16
        attn_flops_per_cell=LITE_BLOCKS * 2 * LITE_HEADS * (576 + 512),
    )
    cpu = HomeLoad(expert_bytes=int(LITE_EXPERTS * size), expert_params=LITE_EXPERTS)
    return SpeedLayout(
        devices=(device,),
        cpu=cpu,
        device_names=("CUDA0",),
        n_expert=64,
        n_expert_used=6,
        n_swa=0,
        n_cells=n_ctx,
        n_ubatch=n_ubatch,
        offload_to=0,
        n_hops=2 * LITE_MOE,  # each MoE block: to the CPU's experts and back
        n_blocks=LITE_BLOCKS,
        routing_exponent=routing_exponent("deepseek2"),
        op_offload_min_batch=threshold,
    )


def _pr520_points() -> list[tuple[Measured, str]]:
    data = json.loads((SWEEPS / PR520).read_text())
    found = []
    for row in data["rows"]:
        layout = _lite_layout(row["n_ubatch"], PR520_THRESHOLDS[row["build"]], row["n_prompt"])
        found.append((Measured(layout, row["n_prompt"], 0, 0, float(row["ts"])), row["build"]))
    return found


def threshold() -> list[str]:
    """ik_llama.cpp PR 520's pp4096 rows (every expert on the CPU, ubatch 128..4096, three
    op-offload thresholds): each row forecast by a fit of the other 17 (leave one out; the
    machine is not posted, so every rate is fitted, none is a figure), beside what was
    measured; and at each ubatch the threshold the forecast picks against the fastest one
    measured."""
    points = _pr520_points()
    machine = MachineFigures(devices=(DeviceFigures(),))
    lines = [
        f"op-offload threshold: {PR520} ({len(points)} rows, DeepSeek-V2-Lite IQ4_KS, "
        "pp4096, every expert on the CPU; thresholds 32 / 342 / 683 in mainline terms)",
        "  each row forecast by a fit of the other rows (leave one out)",
        "    -ub  threshold  offloaded  measured  forecast  error",
    ]
    errors: list[float] = []
    by_ubatch: dict[int, list[tuple[int, float, float | None]]] = {}
    for i, (m, _build) in enumerate(points):
        others = [p for j, (p, _) in enumerate(points) if j != i]
        fit = fit_speed(others, machine)
        tps = point_forecast(m, machine, fit, None)
        error = relative_error(tps, m.tps)
        if error is not None:
            errors.append(error)
        layout = m.layout
        by_ubatch.setdefault(layout.n_ubatch, []).append((layout.op_offload_min_batch, m.tps, tps))
        lines.append(
            f"    {layout.n_ubatch:>4}  {layout.op_offload_min_batch:>9}  "
            f"{'yes' if layout.offloads(layout.n_ubatch) else 'no':>9}  {m.tps:>8.1f}  "
            + (f"{tps:>8.1f}  {error:>5.1%}" if tps is not None and error is not None else "?")
        )
    text, median = _summary(errors)
    lines.append(f"  leave-one-out: {text}{_behind(median, CALIBRATED_TARGET)}")
    agree = 0
    for ub, rows in sorted(by_ubatch.items()):
        measured_best = max(rows, key=lambda r: r[1])[0]
        known = [r for r in rows if r[2] is not None]
        forecast_best = max(known, key=lambda r: r[2] or 0.0)[0] if known else None
        # thresholds that put this ubatch on the same side measure the same way: a pick on
        # the measured best's side is right
        same_side = forecast_best is not None and (forecast_best <= ub) == (measured_best <= ub)
        agree += same_side
        lines.append(
            f"    -ub {ub}: fastest measured at threshold {measured_best} "
            f"({'offloaded' if measured_best <= ub else 'CPU'}), forecast picks "
            f"{forecast_best} ({'offloaded' if (forecast_best or 0) <= ub else 'CPU'})"
            + ("" if same_side else "  <- miss")
        )
    lines.append(f"  the forecast picks the measured side at {agree} of {len(by_ubatch)} ubatches")
    lines.append(f"  (source: {json.loads((SWEEPS / PR520).read_text())['source']})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-rig", action="store_true", help="the public sweeps only")
    parser.add_argument("--rounds", type=int, default=RIG_ROUNDS, help="sweeps of the rig")
    args = parser.parse_args()
    for line in (
        public()
        + cross_model()
        + threads()
        + threshold()
        + ([] if args.no_rig else rig(args.rounds))
        + TALLY.summary()
    ):
        print(line)


if __name__ == "__main__":
    main()
