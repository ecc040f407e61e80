"""The speed forecast (core/speed.py) against measured llama-bench speeds, calibrated
(core/calibrate.py) on two placements at two ubatch sizes, and from the figures alone.

1. Public llama-bench sweeps kept under benchmarks/data/public_sweeps/ (each file names its
   source; see its README), of the models whose shapes moetune has as header-only examples
   (examples/models/: Qwen3-30B-A3B Q4_K_M, gpt-oss-120b MXFP4). Each is calibrated on the
   rows of two placements (two ubatch sizes where the sweep has them) and forecasts the rest.
   Uncalibrated, the machine's public figures: a GPU's memory bandwidth and PCIe link from
   its hardware profile (src/moetune/profiles_data), the RAM's only where the source says
   it (none of these does: the figure is printed as missing, never guessed).
2. The test rig: the real llama-bench (``scripts/llama-bin-dir.sh``) on a tiny model
   (examples/models/make_tiny.py's) with a ``ggml-rpc-server`` device on 127.0.0.1, a sweep
   of ``--n-cpu-moe`` x ``-ub`` (-p 64 -n 16 -r 2), calibrated on 2 x 2 configurations.
   Uncalibrated, the RPC device's memory and the CPU's are this host's RAM, measured here
   (hardware/membw.py).

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from moetune.core.calibrate import (
    Measured,
    fit_speed,
    point_forecast,
    relative_error,
)
from moetune.core.devices import DeviceSpec, rpc_buft
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures, forecast, placement_layout
from moetune.gguf.split import read_model
from moetune.jobs.plan import machine_figures
from moetune.jobs.speed import measured_of
from moetune.llamacpp.bench_results import parse_bench_text

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "benchmarks" / "data" / "public_sweeps"
EXAMPLES = ROOT / "examples" / "models"
CALIBRATED_TARGET = 0.15
UNCALIBRATED_TARGET = 0.35

Key = tuple[object, int]  # (placement: n_cpu_moe or -ot, ubatch)


@dataclass(frozen=True)
class Sweep:
    """A public sweep, the example header of its model, and its machine's public figures."""

    file: str
    model: str  # examples/models/ header
    calibrate: tuple[Key, ...]  # the configurations the fit is made on
    gpu_profile: str | None  # a hardware profile of its GPU (None: there is none)
    note: str
    keep: Callable[[dict[str, object]], bool] = lambda row: True
    device: str = "CUDA0"
    skip_first: bool = False  # the first row repeats the second's setting: the warm-up (notes)


PUBLIC = (
    Sweep(
        file="moearc-b580-sycl-qwen3-30b-a3b-q4km-ncmoe-tg.json",
        model="Qwen3-30B-A3B-Q4_K_M.header.gguf",
        calibrate=((28, 512), (20, 512)),  # decode only: the ubatch does not change it
        gpu_profile=None,  # Intel Arc B580: no profile
        note="Arc B580 + Core Ultra 7 265K, SYCL; tg64 over --n-cpu-moe",
        device="SYCL0",
        skip_first=True,
    ),
    Sweep(
        file="moearc-b580-sycl-gptoss120b-mxfp4-ncmoe-tg.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        calibrate=((34, 512), (31, 512)),
        gpu_profile=None,
        note="the same machine, gpt-oss-120b; part of the run may have read from disk (notes)",
        device="SYCL0",
        skip_first=True,
    ),
    Sweep(
        file="rtx3090-gptoss120b-f16-ubatch-ncmoe.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        calibrate=((25, 256), (26, 4096)),
        gpu_profile="rtx3090",
        note="RTX 3090, CPU/RAM not given; N and -ub change together; the file is "
        "'F16' (non-expert tensors), the header MXFP4 (the expert bytes match, the rest not)",
    ),
    Sweep(
        file="ik_llama-pr698-gptoss120b-4080-5975wx-cpuexps-ubatch.json",
        model="gpt-oss-120b-MXFP4.header.gguf",
        calibrate=(("exps=CPU", 1024), ("exps=CPU", 4096)),
        gpu_profile="rtx4080",
        note="RTX 4080 + Ryzen 5975WX, ik_llama.cpp PR 698 rows (only used experts copied, as "
        "mainline); one placement, three ubatch sizes",
        keep=lambda row: row["build"] == "PR 698",
    ),
)


def _placement(row: dict[str, object]) -> Placement:
    if row.get("ot") == "exps=CPU":
        return Placement.all_experts_on_cpu()
    n = row["n_cpu_moe"]
    assert isinstance(n, int)
    return Placement.with_n_cpu_moe(n)


def _key(row: dict[str, object]) -> Key:
    ub = row["n_ubatch"]
    assert isinstance(ub, int)
    return (row.get("ot") or row["n_cpu_moe"], ub)


def _int(row: dict[str, object], key: str) -> int:
    """A row's count; 0 where the source gives none."""
    value = row.get(key)
    return value if isinstance(value, int) else 0


def _measured(facts: ModelFacts, row: dict[str, object], device: DeviceSpec) -> Measured:
    ub, n_prompt = _int(row, "n_ubatch"), _int(row, "n_prompt")
    # a generation row whose length the source does not give: taken at depth 0
    n_gen = _int(row, "n_gen") or (0 if n_prompt else 1)
    batch = max(_int(row, "n_batch") or 2048, ub)
    settings = Settings(n_ctx=max(n_prompt + n_gen, 512), n_ubatch=ub, n_batch=batch)
    layout = placement_layout(facts, _placement(row), settings, (device,))
    tps = row["ts"]
    assert isinstance(tps, (int, float))
    return Measured(layout, n_prompt, n_gen, _int(row, "n_depth"), float(tps))


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


def evaluate(
    name: str,
    points: Sequence[Measured],
    keys: Sequence[Key],
    calibrate: Sequence[Key],
    machine: MachineFigures,
) -> list[str]:
    """Calibrate on the points of ``calibrate``'s configurations, forecast the others; and
    the uncalibrated forecast of the same others."""
    train = [m for m, k in zip(points, keys, strict=True) if k in calibrate]
    test = [(m, k) for m, k in zip(points, keys, strict=True) if k not in calibrate]
    lines = [f"{name}: {len(points)} points, calibrated on {len(train)} ({len(calibrate)} configs)"]
    if len(train) < 2 or not test:
        return [*lines, "  too few points to calibrate and test"]
    fit = fit_speed(train, machine)
    calibrated = [relative_error(point_forecast(m, machine, fit), m.tps) for m, _ in test]
    text, median = _summary(calibrated)
    lines.append(f"  calibrated:   {text}{_behind(median, CALIBRATED_TARGET)}")
    raw = [relative_error(point_forecast(m, machine, None), m.tps) for m, _ in test]
    text, median = _summary(raw)
    missing = sorted({f for m, _ in test for f in _missing(m, machine)})
    lines.append(
        f"  uncalibrated: {text}{_behind(median, UNCALIBRATED_TARGET)}"
        + (f" (missing: {', '.join(missing)})" if missing else "")
    )
    return lines


def _missing(m: Measured, machine: MachineFigures) -> list[str]:
    found = forecast(m.layout, machine, n_prompt=max(m.n_prompt, 1))
    terms = found.decode_terms if m.is_decode else found.prefill_terms
    return [t.figure for t in terms if t.seconds is None]


def public() -> list[str]:
    lines = []
    for sweep in PUBLIC:
        data = json.loads((SWEEPS / sweep.file).read_text())
        rows = data["rows"][1:] if sweep.skip_first else data["rows"]
        rows = [r for r in rows if sweep.keep(r) and r.get("ts")]
        facts = facts_from_gguf(read_model(str(EXAMPLES / sweep.model)))
        device = DeviceSpec(name=sweep.device, buft=sweep.device)
        points = [_measured(facts, r, device) for r in rows]
        machine = machine_figures(1, sweep.gpu_profile, None)
        lines += evaluate(sweep.file, points, [_key(r) for r in rows], sweep.calibrate, machine)
        lines.append(f"  ({sweep.note}; source: {data['source']})")
    return lines


# --- the test rig --------------------------------------------------------------------------------

RIG_N = (0, 2, 4, 6, 8)
RIG_UB = (32, 64, 128)
RIG_CALIBRATE = ((2, 32), (2, 128), (6, 32), (6, 128))


@contextlib.contextmanager
def _rig() -> Iterator[tuple[Path, str]]:
    from support.factory import write_model
    from support.llama import rpc_server

    with tempfile.TemporaryDirectory(prefix="moetune-speed-") as tmp:
        model = write_model(Path(tmp) / "tiny-moe.gguf", "qwen3moe", n_layers=8)
        with rpc_server() as endpoint:
            yield model, endpoint


def rig() -> list[str]:
    from moetune.hardware.membw import measure_read_bandwidth

    from support.llama import LlamaBinaryError, bin_path

    try:
        bench = bin_path("llama-bench")
    except LlamaBinaryError as exc:  # no llama.cpp here: say so, print the rest
        return [f"test rig: skipped ({exc})"]
    with _rig() as (model, endpoint):
        argv = [str(bench), "-m", str(model), "-rpc", endpoint, "-t", "1", "-r", "2"]
        argv += ["-ncmoe", ",".join(map(str, RIG_N)), "-ub", ",".join(map(str, RIG_UB))]
        argv += ["-p", "64", "-n", "16", "-o", "jsonl"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
        points = parse_bench_text(out.stdout, "llama-bench")
        facts = facts_from_gguf(read_model(str(model)))
    device = DeviceSpec(name="RPC0", buft=rpc_buft(endpoint), kind="rpc", description=endpoint)
    settings = Settings(n_ctx=512, type_k="f16", type_v="f16")
    measured = measured_of(points, facts, settings, (device,))
    keys = [(p.placement.n_cpu_moe, p.n_ubatch or 512) for p in points]
    ram = measure_read_bandwidth(256 * 2**20, 1).bytes_per_s  # one thread, as -t 1
    machine = MachineFigures(devices=(DeviceFigures(memory_bytes_per_s=ram),), ram_bytes_per_s=ram)
    name = f"test rig (tiny qwen3moe, RPC device on 127.0.0.1, RAM {ram / 1e9:.1f} GB/s)"
    return evaluate(name, measured, keys, RIG_CALIBRATE, machine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-rig", action="store_true", help="the public sweeps only")
    args = parser.parse_args()
    for line in public() + ([] if args.no_rig else rig()):
        print(line)


if __name__ == "__main__":
    main()
