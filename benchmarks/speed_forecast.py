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
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

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
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures, forecast
from moetune.gguf.split import read_model
from moetune.jobs.speed import measured_of
from moetune.llamacpp.bench_results import parse_bench_text
from moetune.records.speed import SpeedPoint

from support.public_sweeps import ALL_ON_GPU, PUBLIC, Key, fit_prior

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-rig", action="store_true", help="the public sweeps only")
    parser.add_argument("--rounds", type=int, default=RIG_ROUNDS, help="sweeps of the rig")
    args = parser.parse_args()
    for line in public() + ([] if args.no_rig else rig(args.rounds)) + TALLY.summary():
        print(line)


if __name__ == "__main__":
    main()
