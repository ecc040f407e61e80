"""`moetune calibrate FILE...`: read measured speeds (llama-bench's ``-o json``/``-o jsonl``,
moetune's own bench results) and keep them as speed points; `calibrate --measure MODEL`:
run the real llama-bench at a few placements that fit and import its rows the same way.
Returns data; report/calibrate.py renders it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from moetune.core.calibrate import SpeedFit
from moetune.core.command import command_env, env_words
from moetune.core.devices import DeviceSpec
from moetune.core.extras import Extras
from moetune.core.facts import ModelFacts
from moetune.core.noise import (
    LOO_ERROR_BOUND,
    POINT_SPREAD_BOUND,
    loo_text,
    percent,
    samples_disagree,
    samples_spread,
)
from moetune.core.placement import ALL_LAYERS, Placement
from moetune.core.planner import DeviceBudgets, OffloadPlan, fixed_split, largest, plan_n_cpu_moe
from moetune.core.settings import Settings
from moetune.core.threads import second_thread_count
from moetune.errors import BadValueError, DoesNotFitError, ModelFileError
from moetune.jobs.devices import host_ram, split_endpoints
from moetune.jobs.speed import bench_points, model_of, with_threshold
from moetune.llamacpp.bench_results import BenchRows, parse_bench_rows
from moetune.record import record
from moetune.records.results import RESULT_KIND
from moetune.records.speed import (
    CalibrateResult,
    FitCheck,
    ImportedFile,
    SpeedMachine,
    SpeedPoint,
    Tool,
)
from moetune.store.bench import load_result
from moetune.store.files import parse_json, read_text
from moetune.store.speed import SpeedStore
from moetune.units import Ctx, Sizes

if TYPE_CHECKING:
    from moetune.jobs.launch import LaunchSpec

# the largest measurements file read, checked before it is read: 25,000 rows of llama-bench's
# -o json (about 1.3 KB a row), 2.5 times the 10,000 issue 38 imports in 15 s; an import holds
# every point at once: 590 MB at the cap, 23 s (benchmarks/import_speed.py, docs/benchmarks.md)
MAX_TEXT_BYTES = 32 << 20


def _refuse_binary_or_large(path: Path) -> Callable[[bytes, int], None]:
    """Refuse a file from its first bytes and its size, before reading all of it: a GGUF's
    magic (a model passed by mistake), a NUL byte, which no JSON text has, or a size past
    ``MAX_TEXT_BYTES``."""

    def check(head: bytes, size: int) -> None:
        if head.startswith(b"GGUF"):
            raise BadValueError(f"{path} is a GGUF model, not measurements", hint=_HINT)
        if b"\0" in head:
            raise BadValueError(f"{path} is not UTF-8 text", hint=_HINT)
        if size > MAX_TEXT_BYTES:
            raise BadValueError(
                f"{path} is {size / (1 << 20):,.1f} MiB, more than the "
                f"{MAX_TEXT_BYTES >> 20} MiB a measurements file may be",
                hint="split it, or import only the rows you want",
            )

    return check


def read_text_file(path: Path) -> str:
    """A file's UTF-8 text; one clear error when it cannot be read, is not text or is larger
    than ``MAX_TEXT_BYTES``."""
    try:
        return read_text(path, _refuse_binary_or_large(path))
    except FileNotFoundError:
        raise ModelFileError(f"cannot read {path}: no such file") from None
    except UnicodeDecodeError:
        raise BadValueError(f"{path} is not UTF-8 text", hint=_HINT) from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None


_HINT = "pass llama-bench -o json or -o jsonl, or a `moetune bench` result"


def _is_bench_result(text: str) -> bool:
    if not text.lstrip().startswith("{"):  # an array of llama-bench's is not parsed twice
        return False
    try:
        data = parse_json(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("kind") == RESULT_KIND


def _with_identity(points: list[SpeedPoint]) -> list[SpeedPoint]:
    """llama-bench's points with moetune's identity of each model file found here."""
    paths = {p.model.path for p in points if p.model.path}
    models = {path: model_of(path) for path in paths}  # each header read once, not per row
    found = []
    for point in points:
        here = models.get(point.model.path) if point.model.path else None
        if here is None or here.header_sha256 is None:
            found.append(point)
            continue
        update = {"file_bytes": here.file_bytes, "header_sha256": here.header_sha256}
        found.append(point.model_copy(update={"model": point.model.model_copy(update=update)}))
    return found


def read_rows(path: Path, schema_version: int) -> tuple[Tool, BenchRows]:
    """The points of one file: which tool wrote it, its measurements and the rows refused."""
    text = read_text_file(path)
    if _is_bench_result(text):
        points = bench_points(load_result(path, schema_version), str(path))
        if not points:
            raise BadValueError(
                f"{path} has no measurements of a placement moetune launched",
                hint="a bench of --server-url or one that measured nothing has none",
            )
        return "moetune bench", BenchRows(points)
    rows = parse_bench_rows(text, str(path))
    return "llama-bench", BenchRows(_with_identity(rows.points), rows.refused, rows.refusals)


def read_points(path: Path, schema_version: int) -> tuple[Tool, list[SpeedPoint]]:
    """The points of one file: which tool wrote it, and its measurements (rows refused left
    out)."""
    tool, rows = read_rows(path, schema_version)
    return tool, rows.points


def _imported(
    path: Path, tool: Tool, rows: BenchRows, saved: Path | None, known: bool
) -> ImportedFile:
    return ImportedFile(
        file=str(path),
        tool=tool,
        points=rows.points,
        saved_path=None if saved is None else str(saved),
        already_saved=known,
        refused=rows.refused,
        refusals=list(rows.refusals),
    )


def import_files(
    paths: Sequence[Path],
    *,
    schema_version: int,
    store: SpeedStore | None = None,
    warn: Callable[[str], None] = lambda text: None,
) -> CalibrateResult:
    """Read every file first (one bad file: its error, nothing kept), then keep each one's
    points; the same points imported again are not kept twice."""
    store = store or SpeedStore()
    read = [(path, *read_rows(path, schema_version)) for path in paths]
    files = []
    for path, tool, rows in read:
        saved, known = store.save(rows.points, f"{tool.split()[-1]}-{path.stem}")
        imported = _imported(path, tool, rows, saved, known)
        disagreeing = [noise_of(p) for p in _disagreeing(rows.points)]
        files.append(imported.model_copy(update={"disagreeing": disagreeing}))
    return CalibrateResult(files=files, store=str(store.root), total_points=len(store.points(warn)))


# --- calibrate --measure: llama-bench at a few placements that fit ----------------------------

BENCH_NAME = "llama-bench"
UBATCHES = (512, 2048)


@record(frozen=True)
class BenchRun:
    """One llama-bench invocation: a placement at a micro-batch size (and a thread count
    other than the measure's)."""

    placement: Placement
    n_ubatch: int
    threads: int | None = None  # None: the measure's (BenchKnobs.threads)

    @property
    def n_cpu_moe(self) -> int:
        return self.placement.n_cpu_moe or 0

    def describe(self) -> str:
        threads = f", -t {self.threads}" if self.threads else ""
        return f"--n-cpu-moe {self.n_cpu_moe}, -ub {self.n_ubatch}{threads}"


@record(frozen=True)
class BenchKnobs:
    """What every run of a measure shares: the test's tokens and repetitions, the threads,
    the cache types and flash attention, the RPC servers."""

    n_prompt: int
    n_gen: int
    repetitions: int
    threads: int | None
    settings: Settings
    rpc: tuple[str, ...] = ()


def measure_ubatches(n_prompt: int, wanted: Sequence[int] = UBATCHES) -> tuple[int, ...]:
    """The micro-batch sizes to measure: ``wanted`` at most the prompt (a larger one would
    process the same single ubatch), each distinct, smallest first."""
    if n_prompt < 1:
        raise BadValueError(f"the prompt must be at least 1 token, got {n_prompt}")
    return tuple(sorted({min(ub, n_prompt) for ub in wanted}))


def further_placement(
    facts: ModelFacts,
    budgets: DeviceBudgets,
    settings: Settings,
    n: int,
    *,
    ram_bytes: int | None,
    extras: Extras | None = None,
) -> OffloadPlan | None:
    """The second placement: every block's experts on the CPU, the far end of the frontier
    plan forecasts, so the fitted slope spans every placement between the two (two a few
    blocks apart let one slow measurement tilt it); else the largest N whose CPU side the
    ``ram_bytes`` available hold (experts read from disk would measure the disk). None when
    that is ``n`` itself."""

    plans: dict[int, OffloadPlan] = {}

    def held(m: int) -> bool:
        if m not in plans:
            plans[m] = fixed_split(facts, budgets, settings, m, extras=extras)
        return ram_bytes is None or plans[m].memory.host_bytes <= ram_bytes

    if facts.n_layers <= n:
        return None
    # the CPU side grows with N: the largest N it still holds, every block's first
    found = largest(n + 1, facts.n_layers, held, top_first=True)
    return None if found is None else plans[found]


def choose_runs(
    facts: ModelFacts,
    budgets: DeviceBudgets,
    settings: Settings,
    ubatches: Sequence[int],
    *,
    ram_bytes: int | None = None,
    extras: Extras | None = None,
) -> list[BenchRun]:
    """At each micro-batch size: the smallest ``--n-cpu-moe`` N the plan gives at it, and
    ``further_placement`` of it (one placement where N is already every layer, or where the
    RAM holds no more). A size where nothing fits is left out; DoesNotFitError when nothing
    fits at any."""
    if not facts.is_moe:
        raise BadValueError(
            "calibrate --measure places experts: a dense model has none",
            hint="run llama-bench yourself and import it with `moetune calibrate FILE`",
        )
    runs: list[BenchRun] = []
    failure: DoesNotFitError | None = None
    for ub in ubatches:
        at = replace(settings, n_ubatch=ub, n_batch=max(settings.n_batch, ub))
        try:
            smallest = plan_n_cpu_moe(facts, budgets, at, extras=extras)
        except DoesNotFitError as exc:
            failure = failure or exc
            continue
        runs.append(BenchRun(smallest.placement, ub))
        n = smallest.placement.n_cpu_moe or 0
        further = further_placement(facts, budgets, at, n, ram_bytes=ram_bytes, extras=extras)
        if further is not None:
            runs.append(BenchRun(further.placement, ub))
    if not runs:
        assert failure is not None
        raise failure
    return runs


def with_thread_run(runs: Sequence[BenchRun], threads: int | None) -> list[BenchRun]:
    """``runs`` and each placement again at a second thread count (core/threads.py
    ``second_thread_count``: half of ``threads``), at the smallest micro-batch size, so the
    fit sees the thread term at two placements (one point at the other count alone leaves
    nothing to forecast it from when it is left out: its leave-one-out error is the thread
    term itself); none where ``threads`` is unknown or 1."""
    other = second_thread_count(threads) if threads else None
    if other is None or not runs:
        return list(runs)
    least_ub = min(run.n_ubatch for run in runs)
    at = [run for run in runs if run.n_ubatch == least_ub]
    placements = sorted({run.n_cpu_moe: run for run in at}.values(), key=lambda r: r.n_cpu_moe)
    return [*runs, *(BenchRun(run.placement, run.n_ubatch, threads=other) for run in placements)]


def bench_argv(tool: Path, model: str, run: BenchRun, knobs: BenchKnobs) -> list[str]:
    """llama-bench's argv for ``run``: one test of each kind, ``-o jsonl``, the placement
    and settings moetune's commands use (``-ngl 99 -fa on -ctk -ctv``), ``-ts a/b`` on
    several devices (llama-bench separates its values by ``/``)."""
    argv = [str(tool), "-m", model, "-o", "jsonl"]
    argv += ["-p", str(knobs.n_prompt), "-n", str(knobs.n_gen), "-r", str(knobs.repetitions)]
    return argv + placement_args(run, knobs, llama_bench=True)


BATCHED_NAME: Tool = "llama-batched-bench"
BATCHED_PROMPT = 64  # each stream's prompt before it generates: run's 64-token prompt


@record(frozen=True)
class BatchedRun:
    """``calibrate --measure --parallel``: llama-batched-bench at one placement (the first
    run's), ``streams`` sequences at once for each, repeated as llama-bench's tests are; its
    points of ``machine`` (its rows name neither the model, the placement nor the machine)."""

    tool: Path
    streams: tuple[int, ...]
    machine: SpeedMachine


def placement_args(run: BenchRun, knobs: BenchKnobs, *, llama_bench: bool = False) -> list[str]:
    """llama-server's flags (llama-batched-bench's too: both read common/arg.cpp) for the
    placement and settings of ``run``: what batched_points reads back; ``llama_bench``:
    llama-bench's spelling of them (its own parser: ``-rpc``, ``-ts a/b``)."""
    settings, place = knobs.settings, run.placement
    argv = ["-ngl", "99" if place.n_gpu_layers >= ALL_LAYERS else str(place.n_gpu_layers)]
    argv += ["-fa", "on" if settings.flash_attn else "off"]
    argv += ["-ctk", settings.type_k, "-ctv", settings.type_v]
    argv += ["-ub", str(run.n_ubatch), "-b", str(max(settings.n_batch, run.n_ubatch))]
    argv += ["--n-cpu-moe", str(run.n_cpu_moe)]
    threads = run.threads or knobs.threads
    if threads:
        argv += ["-t", str(threads)]
    if knobs.rpc:
        argv += ["-rpc" if llama_bench else "--rpc", ",".join(knobs.rpc)]
    if place.tensor_split:
        split = "/" if llama_bench else ","
        argv += ["-ts", split.join(str(int(v)) for v in place.tensor_split)]
    return argv


def batched_argv(
    tool: Path, model: str, run: BenchRun, knobs: BenchKnobs, streams: Sequence[int]
) -> list[str]:
    """llama-batched-bench's argv: ``-npl`` the ``streams``, each a ``BATCHED_PROMPT``-token
    prompt then ``knobs.n_gen`` tokens, a context that holds the most streams' (each its own
    cells), ``--output-format jsonl``, at the placement of ``run``."""
    ctx = max(streams) * (BATCHED_PROMPT + knobs.n_gen)
    argv = [str(tool), "-m", model, "--output-format", "jsonl", "-c", str(ctx)]
    argv += ["-npp", str(BATCHED_PROMPT), "-ntg", str(knobs.n_gen)]
    argv += ["-npl", ",".join(str(n) for n in streams)]
    return [*argv, *placement_args(run, knobs)]


def measure_key(argvs: Sequence[Sequence[str]], devices: Sequence[str]) -> str:
    """What names a measure: its runs' arguments (not the tool's path) and the devices; the
    same measure again replaces the points of the last one."""
    text = "\n".join([" ".join(a[1:]) for a in argvs] + list(devices))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _test_name(point: SpeedPoint) -> str:
    """llama-bench's name of a test: ``pp64``, ``tg4``, ``pp64+tg4``."""
    tests = [
        f"pp{point.n_prompt}" if point.n_prompt else "",
        f"tg{point.n_gen}" if point.n_gen else "",
    ]
    streams = f" x{point.n_streams} streams" if point.n_streams > 1 else ""
    return "+".join(t for t in tests if t) + streams


def _disagreeing(points: Sequence[SpeedPoint]) -> list[SpeedPoint]:
    """The points whose samples spread beyond core/noise.py's bound."""
    return [p for p in points if samples_disagree(p.samples_tps)]


def noise_of(point: SpeedPoint) -> str:
    """``tg4 at --n-cpu-moe 8, -ub 32, -t 2: 2 samples 18.1-38.8 tok/s, spread 73 % (bound
    20 %)``."""
    found = samples_spread(point.samples_tps) or 0.0
    low, high = min(point.samples_tps), max(point.samples_tps)
    where = [point.source.config or f"--n-cpu-moe {point.placement.n_cpu_moe}"]
    where += [f"-ub {point.n_ubatch}"] if point.n_ubatch else []
    where += [f"-t {point.n_threads}"] if point.n_threads else []
    return (
        f"{_test_name(point)} at {', '.join(where)}: {len(point.samples_tps)} samples "
        f"{low:.1f}-{high:.1f} tok/s, spread {percent(found)} (bound {percent(POINT_SPREAD_BOUND)})"
    )


def _run_points(text: str) -> list[SpeedPoint]:
    """The points of one llama-bench run's rows (none where they do not read: the whole
    file's reading says why)."""
    try:
        return parse_bench_rows(text, BENCH_NAME).points
    except BadValueError:
        return []


FitChecker = Callable[[Sequence[SpeedPoint], str], FitCheck | None]


def measure_model(
    model: str,
    runs: Sequence[BenchRun],
    knobs: BenchKnobs,
    *,
    tool: Path,
    devices: Sequence[str],
    schema_version: int,
    out_dir: Path,
    on_event: Callable[[str], None],
    timeout_s: float,
    store: SpeedStore | None = None,
    warn: Callable[[str], None] = lambda text: None,
    check: FitChecker | None = None,
    batched: BatchedRun | None = None,
) -> CalibrateResult:
    """Run llama-bench for each of ``runs`` in turn, keep their rows in one ``-o jsonl`` file
    under ``out_dir``, and import it as `calibrate FILE` does; the points replace those of the
    same measure made before (the same runs on the same devices). ``batched``: then
    llama-batched-bench at the first run's placement, ``knobs.repetitions`` times, its rows
    kept beside (``-batched.jsonl``) and its points among the measure's (``batched_points``).

    Noise (core/noise.py): a run whose samples disagree is run once more, and its points
    still disagreeing are refused (``noisy``); ``check`` (the points, and the prefix of the
    store's files they replace) fits them with the points kept for this machine, and where
    its leave-one-out error is beyond the bound, or every point was refused, nothing is
    kept: the result says why (``refused``)."""
    from moetune.llamacpp.process import run_tool

    store = store or SpeedStore()
    argvs = [bench_argv(tool, model, run, knobs) for run in runs]
    if batched is not None:
        argvs.append(batched_argv(batched.tool, model, runs[0], knobs, batched.streams))
    # the op-offload threshold llama-bench runs with (its rows do not record it)
    env = command_env(knobs.settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{BENCH_NAME}-{Path(model).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = out_dir / f"{stem}.jsonl"

    def bench(index: int) -> str:
        part = out_dir / f".{stem}-{index + 1}.jsonl"
        try:
            run_tool(argvs[index], part, timeout_s, env=env)
            return read_text_file(part)
        finally:
            part.unlink(missing_ok=True)

    rows: list[str] = []
    for index, run in enumerate(runs):
        on_event(f"{BENCH_NAME} {index + 1}/{len(runs)}: {run.describe()}")
        rows.append(bench(index))
    # a run whose samples disagree: measured once more (once: a loaded machine stays loaded)
    again = [i for i, text in enumerate(rows) if _disagreeing(_run_points(text))]
    remeasured = []
    for count, index in enumerate(again, 1):
        why = "; ".join(noise_of(p) for p in _disagreeing(_run_points(rows[index])))
        remeasured.append(why)
        on_event(
            f"{BENCH_NAME} again {count}/{len(again)}: {runs[index].describe()} (its samples"
            " disagree)"
        )
        rows[index] = bench(index)
    path.write_text("".join(text if text.endswith("\n") else text + "\n" for text in rows))
    tool_name, read = read_rows(path, schema_version)
    if batched is not None:
        found = _batched(
            model,
            runs[0],
            knobs,
            batched,
            argv=argvs[-1],
            stem=out_dir / stem.replace(BENCH_NAME, BATCHED_NAME, 1),
            timeout_s=timeout_s,
            on_event=on_event,
        )
        read = replace(read, points=[*read.points, *found])
    if (threshold := knobs.settings.op_offload_min_batch) is not None:
        read = replace(read, points=[with_threshold(p, threshold) for p in read.points])
    noisy = [noise_of(p) for p in _disagreeing(read.points)]
    read = replace(read, points=[p for p in read.points if not samples_disagree(p.samples_tps)])
    same = f"measure-{measure_key(argvs, [*devices, *env_words(env)])}-"
    fit = check(read.points, same) if check is not None and read.points else None
    refused = None
    if not read.points:
        refused = (
            "not calibrated: the machine was too noisy (every test's samples disagreed beyond "
            f"{percent(POINT_SPREAD_BOUND)}, measured twice)"
        )
    elif fit is not None and not fit.within:
        assert fit.median_error is not None
        refused = f"not calibrated: the machine was too noisy ({loo_text(fit.median_error)})"
    saved: Path | None = None
    known = False
    if refused is None:
        saved, known = store.save(read.points, same + stem, replacing=same)
    imported = _imported(path, tool_name, read, saved, known)
    imported = imported.model_copy(update={"remeasured": remeasured, "noisy": noisy})
    return CalibrateResult(
        files=[imported],
        store=str(store.root),
        total_points=len(store.points(warn)),
        fit=fit,
        refused=refused,
    )


def _batched(
    model: str,
    run: BenchRun,
    knobs: BenchKnobs,
    batched: BatchedRun,
    *,
    argv: Sequence[str],
    stem: Path,
    timeout_s: float = 1800.0,
    on_event: Callable[[str], None] = lambda text: None,
) -> list[SpeedPoint]:
    """llama-batched-bench ``argv`` run ``knobs.repetitions`` times; its rows kept in
    ``stem``.jsonl, their points (``batched_points``) at ``run``'s placement."""
    from moetune.jobs.speed import batched_points
    from moetune.llamacpp.batched_bench import parse_batched_rows
    from moetune.llamacpp.process import run_tool
    from moetune.records.speed import SpeedSource

    env = command_env(knobs.settings)
    texts: list[str] = []
    for index in range(knobs.repetitions):
        on_event(f"{BATCHED_NAME} {index + 1}/{knobs.repetitions}: {run.describe()}")
        part = stem.with_name(f".{stem.name}-{index + 1}.jsonl")
        try:
            run_tool(argv, part, timeout_s, env=env)
            texts.append(read_text_file(part))
        finally:
            part.unlink(missing_ok=True)
    path = stem.with_suffix(".jsonl")
    path.write_text("".join(text if text.endswith("\n") else text + "\n" for text in texts))
    runs = [parse_batched_rows(text, str(path)) for text in texts]
    source = SpeedSource(
        tool=BATCHED_NAME, file=str(path), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")
    )
    return batched_points(
        runs,
        placement_args(run, knobs),
        model=model_of(model),
        machine=batched.machine,
        source=source,
        env=env,
    )


def fit_check(kept: int, fit: SpeedFit | None) -> FitCheck | None:
    """``fit`` (None: fewer than two points to fit), ``kept`` of its points kept before,
    against the bound."""
    if fit is None:
        return None
    return FitCheck(
        points=fit.points,
        kept_points=kept,
        median_error=fit.loo_median_error,
        max_error=fit.loo_max_error,
        bound=LOO_ERROR_BOUND,
        within=fit.trusted,
    )


def machine_checker(
    facts: ModelFacts, spec: LaunchSpec, devices: Sequence[DeviceSpec], warn: Callable[[str], None]
) -> FitChecker:
    """The check of a measure's points as a forecast on this machine would fit them (as
    jobs/speed_from.py ``machine_points`` finds them): with the points kept for it (of every
    model whose file is readable here, but those the measure replaces), on the machine's
    figures (jobs/figures.py, as `run --objective` has them)."""

    def check(points: Sequence[SpeedPoint], replacing: str) -> FitCheck | None:
        from moetune.core.calibrate import fit_of
        from moetune.jobs.devices import physical_cores
        from moetune.jobs.figures import device_profiles, machine_figures, ram_figure
        from moetune.jobs.speed import machine_here, measured_of
        from moetune.records.speed import same_machine

        here, model = machine_here(devices), model_of(spec.model)
        stored = SpeedStore().points(warn, leaving=replacing)
        kept = [p for p in stored if same_machine(p.machine, here)]
        ram = ram_figure(None, warn=warn)
        figures = machine_figures(devices, device_profiles(devices), ram, cores=physical_cores())
        new = measured_of(points, facts, spec.settings, devices, model=model)
        old = measured_of(kept, facts, spec.settings, devices, model=model)
        return fit_check(len(old), fit_of([*new, *old], figures))

    return check


@record(frozen=True)
class MeasureRequest:
    """``moetune calibrate --measure MODEL``: the model, the devices and budget to plan for,
    and the tests."""

    model: str
    headroom_bytes: Sizes
    server: str | None = None
    rpc: str | None = None
    target_bytes: Sizes | None = None
    force: bool = False  # --force: a target above a device's memory is meant
    overhead: Sizes | None = None
    ctx: Ctx | None = None
    cache_type: str = "q8_0"
    ubatches: tuple[int, ...] = UBATCHES
    n_prompt: int | None = None  # None: the largest ubatch (each ubatch size then counts)
    n_gen: int = 64
    repetitions: int = 2
    threads: int | None = None  # None: the physical cores
    timeout_s: float = 1800.0  # per llama-bench run
    parallel: tuple[int, ...] = ()  # --parallel: llama-batched-bench's -npl (none: not run)


def measure(
    req: MeasureRequest,
    *,
    schema_version: int,
    on_event: Callable[[str], None],
    warn: Callable[[str], None],
) -> CalibrateResult:
    """Plan the placements as `run` would (the devices here and ``--rpc``, the budget, the
    context), run llama-bench beside llama-server at each, and keep its points."""
    from moetune.jobs.launch import prepare_launch
    from moetune.jobs.models import launch_spec
    from moetune.llamacpp.process import find_tool
    from moetune.store.paths import bench_dir

    if req.repetitions < 1 or req.n_gen < 0:
        raise BadValueError("--repetitions must be at least 1 and --n-gen 0 or more")
    n_prompt = req.n_prompt if req.n_prompt is not None else max(req.ubatches)
    ubatches = measure_ubatches(n_prompt, req.ubatches)
    facts, spec = launch_spec(req.model, (), server=req.server, cache_type=req.cache_type)
    tool = find_tool(spec.binary, BENCH_NAME)
    spec, setup = prepare_launch(
        facts,
        spec,
        ctx=req.ctx,
        target_bytes=req.target_bytes,
        headroom_bytes=req.headroom_bytes,
        overhead=req.overhead,
        rpc=req.rpc,
        warn=warn,
        force=req.force,
    )
    runs = choose_runs(
        facts,
        setup.device_budgets,
        spec.settings,
        ubatches,
        ram_bytes=host_ram(None)[1],
        extras=spec.extras,
    )
    knobs = BenchKnobs(
        n_prompt=n_prompt,
        n_gen=req.n_gen,
        repetitions=req.repetitions,
        threads=req.threads or spec.threads,
        settings=spec.settings,
        rpc=split_endpoints(req.rpc),
    )
    runs = with_thread_run(runs, knobs.threads)
    batched = None
    if req.parallel:
        from moetune.jobs.speed import machine_here

        streams = tuple(sorted(set(req.parallel)))
        batched = BatchedRun(
            find_tool(spec.binary, BATCHED_NAME), streams, machine_here(setup.devices)
        )
    return measure_model(
        spec.model,
        runs,
        knobs,
        tool=tool,
        devices=[d.name for d in setup.devices],
        schema_version=schema_version,
        out_dir=bench_dir(),
        on_event=on_event,
        timeout_s=req.timeout_s,
        warn=warn,
        check=machine_checker(facts, spec, setup.devices, warn),
        batched=batched,
    )
