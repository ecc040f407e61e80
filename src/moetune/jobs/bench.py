"""`moetune bench` without the terminal: the configurations to compare, launching each, measuring
depths x repeats, and the verdict.  Returns data; report/bench.py renders it.

Configurations (each launched alone, with the same context, cache type and pass-through flags):

- ``plan``: moetune's ``--n-cpu-moe N`` for the device budget (planner.plan_n_cpu_moe);
- ``fit``: no placement flags and ``--fit on``: llama.cpp places tensors itself.  With
  ``--target-vram`` it gets ``--fit-target`` = the device's free memory minus that budget (fit
  aims at a margin of *free* memory, common/fit.cpp); otherwise llama.cpp's default margin.
  What it chose is read from its log (``parse_fit_log``);
- ``cpu-moe``: ``-cmoe``, every routed expert on the CPU;
- ``layers``: classic ``-ngl K``, K the most layers that fit the same budget (planner.plan_layers);
- ``gpu-only``: everything on the device, run only where the estimate fits the budget.

Each is launched at every ``--ubatch`` size and ``--threads`` count asked for (named
``plan-ub2048-t8`` where several were asked), planned again at that size.

A configuration that cannot be placed is recorded as ``skipped`` with the reason; one whose
llama-server fails (out of memory, exits) as ``failed``, and the bench goes on with the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, NamedTuple, TypedDict

from moetune import __version__
from moetune.core.command import command_env
from moetune.core.facts import ModelFacts
from moetune.core.placement import ALL_LAYERS, Placement
from moetune.core.planner import fixed_split, floor_plan, plan_layers, plan_n_cpu_moe
from moetune.errors import BadValueError, DoesNotFitError, ServerFailedError
from moetune.jobs.launch import DeviceSetup, LaunchSpec
from moetune.jobs.measure import BenchRequests, Prompts, Repeats, measure_depths, measure_streams
from moetune.jobs.names import CONFIG_NAMES, ENDPOINTS, MAX_THREADS, MAX_UBATCH
from moetune.jobs.speed import machine_of
from moetune.jobs.status import NO_STATUS, LiveStatus, StatusSink, probe_reader, sampling
from moetune.llamacpp.client import ServerClient
from moetune.llamacpp.log import parse_fit_log
from moetune.llamacpp.memprobe import MemoryProbe
from moetune.llamacpp.process import RunningServer
from moetune.record import record
from moetune.records.results import (
    BenchResult,
    ConfigRun,
    DepthResult,
    Sample,
    capped_depths,
    verdicts,
)
from moetune.units import Ctx, Sizes, counts_option, format_bytes, parse_tokens, shown

Event = Callable[[str], None]


def parse_depths(text: str) -> list[int]:
    """``--depths 0,4096,16k``: token counts (``k`` = 1024)."""
    depths: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            depths.append(parse_tokens(part))
        except BadValueError as exc:  # not a token count, or above units.MAX_TOKENS
            raise BadValueError(
                f"not a depth: {shown(part)} ({exc.message})", hint="e.g. --depths 0,4096,16k"
            ) from None
    return depths


def parse_configs(text: str) -> list[str]:
    """``--configs plan,fit``: known names, in the order given, without repeats."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in CONFIG_NAMES]
    if unknown or not names:
        raise BadValueError(
            f"unknown configuration {', '.join(unknown) or '(none)'}",
            hint=f"choose from {','.join(CONFIG_NAMES)}",
        )
    return list(dict.fromkeys(names))


# --- the configurations ---------------------------------------------------------------------


@record(frozen=True)
class ConfigSpec:
    """One configuration to launch (``skip``: why it is not launched)."""

    name: str
    description: str
    args: tuple[str, ...] = ()
    predicted_bytes: int | None = None
    skip: str | None = None
    fit_target_mib: int | None = None
    variant: str = ""  # ``-ub2048-t8``: the ubatch and threads of one of several
    n_ubatch: int = 512  # its micro-batch (the warm-up's prompt is longer than one)
    # the variables set for it beside its flags (core.command.command_env: the op-offload
    # threshold), as LaunchSpec.start sets them
    env: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """The configuration's name in the results: its name and variant."""
        return self.name + self.variant


Builder = Callable[[ModelFacts, LaunchSpec, DeviceSetup], ConfigSpec]


def _ts(placement: Placement) -> str:
    """`` -ts a,b`` on several devices (one device: nothing)."""
    counts = [str(int(c)) for c in placement.tensor_split]
    return f" -ts {','.join(counts)}" if counts else ""


def _plan_spec(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup) -> ConfigSpec:
    if not facts.is_moe:
        return ConfigSpec("plan", "--n-cpu-moe", skip="a dense model has no experts")
    try:
        plan = plan_n_cpu_moe(facts, setup.device_budgets, spec.settings, extras=spec.extras)
    except DoesNotFitError as exc:
        return ConfigSpec("plan", "--n-cpu-moe", skip=exc.message)
    about = f"--n-cpu-moe {plan.placement.n_cpu_moe or 0}{_ts(plan.placement)}"
    return ConfigSpec("plan", about, tuple(spec.args(plan.placement)), plan.memory.gpu_bytes)


def fit_description(margins: Sequence[int] | None) -> str:
    """The fit configuration as the results describe it: ``-fitt``'s margins with their
    unit (``--fit on -fitt 1024,2048 (MiB kept free)``), which llama.cpp's syntax leaves out."""
    if not margins:
        return "--fit on"
    return f"--fit on -fitt {','.join(map(str, margins))} (MiB kept free)"


def _fit_spec(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup) -> ConfigSpec:
    margins = setup.fit_targets_mib  # None: llama.cpp's default margin
    about = fit_description(margins)
    first = margins[0] if margins and len(margins) == 1 else None
    return ConfigSpec("fit", about, tuple(spec.fit_args(margins)), fit_target_mib=first)


def _cpu_moe_spec(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup) -> ConfigSpec:
    if not facts.is_moe:
        return ConfigSpec("cpu-moe", "-cmoe", skip="a dense model has no experts")
    plan = floor_plan(facts, setup.device_budgets, spec.settings, extras=spec.extras)
    placement = Placement(tensor_split=plan.placement.tensor_split)
    args = spec.args(placement, ("-cmoe",))
    return ConfigSpec("cpu-moe", f"-cmoe{_ts(placement)}", tuple(args), plan.memory.gpu_bytes)


def _layers_spec(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup) -> ConfigSpec:
    try:
        plan = plan_layers(facts, setup.device_budgets, spec.settings, extras=spec.extras)
    except DoesNotFitError as exc:
        return ConfigSpec("layers", "-ngl", skip=exc.message)
    ngl = plan.placement.n_gpu_layers
    if ngl > facts.n_layers:  # every layer and the output: what -ngl 99 does
        ngl = ALL_LAYERS
    placement = plan.placement._replace(n_gpu_layers=ngl)
    about = ("-ngl 99" if ngl == ALL_LAYERS else f"-ngl {ngl}") + _ts(placement)
    return ConfigSpec("layers", about, tuple(spec.args(placement)), plan.memory.gpu_bytes)


def _gpu_only_spec(facts: ModelFacts, spec: LaunchSpec, setup: DeviceSetup) -> ConfigSpec:
    plan = fixed_split(facts, setup.device_budgets, spec.settings, 0, extras=spec.extras)
    placement = Placement(tensor_split=plan.placement.tensor_split)
    about = f"-ngl 99{_ts(placement)}"
    if not setup.device_budgets.fits(plan.memory):
        needs = ", ".join(format_bytes(d.total_bytes) for d in plan.memory.devices)
        budgets = ", ".join(format_bytes(b) for b in setup.budgets)
        return ConfigSpec("gpu-only", about, skip=f"does not fit: needs {needs}, budget {budgets}")
    return ConfigSpec("gpu-only", about, tuple(spec.args(placement)), plan.memory.gpu_bytes)


_BUILDERS: dict[str, Builder] = {
    "plan": _plan_spec,
    "fit": _fit_spec,
    "cpu-moe": _cpu_moe_spec,
    "layers": _layers_spec,
    "gpu-only": _gpu_only_spec,
}


@record(frozen=True)
class Variant:
    """A micro-batch size and a thread count to launch every configuration at (None: the
    launch spec's)."""

    n_ubatch: int | None = None
    threads: int | None = None
    suffix: str = ""

    def of(self, spec: LaunchSpec) -> LaunchSpec:
        """``spec`` at this ubatch (its settings, and ``-ub``/``-b`` after the others) and
        thread count."""
        if self.n_ubatch is not None:
            old = spec.settings
            settings = replace(old, n_ubatch=self.n_ubatch, n_batch=max(old.n_batch, self.n_ubatch))
            flags: tuple[str, ...] = ("-ub", str(self.n_ubatch))
            if settings.n_batch != old.n_batch:
                flags += ("-b", str(settings.n_batch))
            spec = replace(spec, settings=settings, pass_through=(*spec.pass_through, *flags))
        return spec if self.threads is None else replace(spec, threads=self.threads)


def variants(ubatches: Sequence[int] = (), threads: Sequence[int] = ()) -> list[Variant]:
    """Every ubatch with every thread count; the name says the ones of several."""
    sizes: list[int | None] = [*ubatches] or [None]
    counts: list[int | None] = [*threads] or [None]
    return [
        Variant(
            ub,
            t,
            (f"-ub{ub}" if len(ubatches) > 1 else "") + (f"-t{t}" if len(threads) > 1 else ""),
        )
        for ub in sizes
        for t in counts
    ]


def build_configs(
    facts: ModelFacts,
    spec: LaunchSpec,
    setup: DeviceSetup,
    names: Sequence[str],
    at: Sequence[Variant] = (Variant(),),
) -> list[ConfigSpec]:
    """The configurations asked for, at each variant; one whose command repeats an earlier
    one is skipped."""
    specs: list[ConfigSpec] = []
    seen: dict[tuple[str, ...], str] = {}
    for variant in at:
        launch = variant.of(spec)
        for name in names:
            config = replace(
                _BUILDERS[name](facts, launch, setup),
                variant=variant.suffix,
                n_ubatch=launch.settings.n_ubatch,
                env=tuple(command_env(launch.settings).items()),
            )
            if config.skip is None and config.args in seen:
                config = replace(config, skip=f"same command as {seen[config.args]}")
            elif config.skip is None:
                seen[config.args] = config.label
            specs.append(config)
    return specs


@record(frozen=True)
class Launcher:
    """How configurations are launched and measured."""

    spec: LaunchSpec
    probes: tuple[MemoryProbe, ...]  # one per device (none: nothing to measure)
    workload: BenchRequests
    prompts: Prompts
    on_event: Event
    live: StatusSink = NO_STATUS  # phases and device memory while a server runs
    device_names: tuple[str, ...] = ()  # one per probe (default: RPC0-style names by index)


def _ended(
    spec: ConfigSpec,
    status: Literal["ok", "failed"],
    *,
    server: RunningServer | None,
    load_s: float | None,
    results: Sequence[DepthResult],
    message: str | None = None,
    device_peaks: Sequence[int | None] = (),
    warmup: Sample | None = None,
    memory_note: str | None = None,
) -> ConfigRun:
    peaks = [r.device_bytes for r in results if r.device_bytes is not None]
    fit = None
    if spec.name == "fit" and server is not None:
        fit = parse_fit_log(server.log_text(), spec.fit_target_mib)
    return ConfigRun(
        name=spec.label,
        status=status,
        description=spec.description,
        args=list(spec.args),
        env=dict(spec.env),
        predicted_bytes=spec.predicted_bytes,
        peak_device_bytes=max(peaks, default=None),
        load_s=load_s,
        fit=fit,
        message=message,
        log_path=str(server.log_path) if server is not None else None,
        device_peaks=list(device_peaks) if len(device_peaks) > 1 else [],
        warmup=warmup,
        memory_note=memory_note,
    )


def run_config(spec: ConfigSpec, launcher: Launcher) -> tuple[ConfigRun, list[DepthResult]]:
    """Launch one configuration, measure it, stop it; a failure of llama-server is recorded."""
    if spec.skip is not None:
        run = ConfigRun(
            name=spec.label,
            status="skipped",
            description=spec.description,
            args=list(spec.args),
            env=dict(spec.env),
            predicted_bytes=spec.predicted_bytes,
            peak_device_bytes=None,
            load_s=None,
            message=spec.skip,
        )
        return run, []
    results: list[DepthResult] = []
    server: RunningServer | None = None
    load_s: float | None = None
    events = launcher.on_event
    peaks: list[int | None] = [None] * len(launcher.probes)
    warmup: Sample | None = None
    try:
        events(f"{spec.label}: starting llama-server ({spec.description})")
        server = launcher.spec.start(list(spec.args))
        launcher.live.phase("loading", subject=spec.label)
        timeout = launcher.spec.ready_timeout_s
        read = probe_reader(launcher.probes, _names(launcher), server)
        with server, sampling(read, launcher.live), ServerClient(server.url, timeout) as client:
            load_s = client.wait_ready(timeout, server.check_alive)
            launcher.live.reading(read())  # loaded: the figures now, not the last sample's
            warmup = measure_depths(
                client,
                launcher.workload,
                launcher.prompts,
                config=spec.label,
                probe=_probe_of(launcher.probes, server, peaks),
                into=results,
                live=launcher.live,
                warm_tokens=spec.n_ubatch + 1,  # past one ubatch, as run's fill goes
            )
            streams = measure_streams(
                client, launcher.workload, launcher.prompts, config=spec.label, live=launcher.live
            )
    except ServerFailedError as exc:
        line = (server.failure() if server is not None else None) or exc.message.splitlines()[0]
        failed = _ended(
            spec, "failed", server=server, load_s=load_s, results=results, message=line.rstrip(":")
        )
        if failed.log_path is None and exc.hint and exc.hint.startswith(_LOG_HINT):
            failed = failed.model_copy(update={"log_path": exc.hint.removeprefix(_LOG_HINT)})
        return failed, results
    ended = _ended(
        spec,
        "ok",
        server=server,
        load_s=load_s,
        results=results,
        device_peaks=peaks,
        warmup=warmup,
        memory_note=_unmeasured(launcher, peaks),
    )
    return ended.model_copy(update={"streams": streams}), results


def _unmeasured(launcher: Launcher, peaks: Sequence[int | None]) -> str | None:
    """Why a device of a configuration that ran has no memory figure (None: each has one)."""
    why = [
        f"{name}: no memory figure: {probe.missing}"
        for name, probe, peak in zip(_names(launcher), launcher.probes, peaks, strict=True)
        if peak is None
    ]
    return "; ".join(why) or None


_LOG_HINT = "full log: "  # server.RunningServer.exit_error's hint


def _names(launcher: Launcher) -> tuple[str, ...]:
    """The devices' names, one per probe."""
    given = launcher.device_names
    return (
        given
        if len(given) == len(launcher.probes)
        else tuple(f"device {i}" for i in range(len(launcher.probes)))
    )


def _probe_of(
    probes: Sequence[MemoryProbe], server: RunningServer, peaks: list[int | None]
) -> Callable[[], int | None]:
    """The devices' memory together (each device's peak kept in ``peaks``)."""

    def read() -> int | None:
        figures = [probe.device_bytes(server) for probe in probes]
        for i, figure in enumerate(figures):
            if figure is not None:
                peaks[i] = max(peaks[i] or 0, figure)
        known = [f for f in figures if f is not None]
        return sum(known) if known else None

    return read


# --- the whole bench ------------------------------------------------------------------------


@record(frozen=True)
class BenchRequest:
    """``moetune bench MODEL``: the launch spec, and what to compare and measure."""

    spec: LaunchSpec  # at the device's compute rules and the context (jobs.launch)
    setup: DeviceSetup  # from jobs.launch.prepare_device
    names: tuple[str, ...] = CONFIG_NAMES
    workload: BenchRequests = field(default_factory=BenchRequests)
    variants: tuple[Variant, ...] = (Variant(),)  # each configuration at each


def _depths(results: Sequence[DepthResult], workload: BenchRequests) -> list[int]:
    """The depths measured (after capping), else those asked for."""
    return sorted({r.depth for r in results}) or list(workload.depths)


class _RepeatFields(TypedDict):
    repeats: int
    max_repeats: int
    max_spread: float
    max_time_s: float


def _repeats_of(repeats: Repeats) -> _RepeatFields:
    """The result's fields that say how each depth was repeated."""
    return _RepeatFields(
        repeats=repeats.least,
        max_repeats=repeats.most,
        max_spread=repeats.max_spread,
        max_time_s=repeats.max_time_s,
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def bench_model(
    facts: ModelFacts, req: BenchRequest, on_event: Event, live: StatusSink = NO_STATUS
) -> BenchResult:
    """Launch and measure each configuration in turn; the results and the verdict (each
    launch's phases and device memory told to ``live``)."""
    spec, setup = req.spec, req.setup
    specs = build_configs(facts, spec, setup, req.names, req.variants)
    workload = req.workload
    prompts = Prompts(workload.endpoint)
    launcher = Launcher(
        spec, setup.probes, workload, prompts, on_event, live, tuple(d.name for d in setup.devices)
    )
    runs: list[ConfigRun] = []
    results: list[DepthResult] = []
    for config in specs:
        run, measured = run_config(config, launcher)
        runs.append(run)
        results += measured
    multi = setup.multi
    return BenchResult(
        created=_now(),
        moetune_version=__version__,
        model=spec.model,
        server_url=None,
        endpoint=workload.endpoint,
        image=workload.image_name,
        n_ctx=spec.settings.n_ctx,
        n_predict=workload.n_predict,
        **_repeats_of(workload.repeats),
        depths=_depths(results, workload),
        device=", ".join(d.name for d in setup.devices) if multi else setup.device.name,
        device_total_bytes=sum(d.total_bytes or 0 for d in setup.devices),
        budget_bytes=sum(setup.budgets),
        probe="; ".join(p.name for p in setup.probes),
        probe_includes_overhead=all(p.includes_overhead for p in setup.probes),
        device_names=[d.name for d in setup.devices] if multi else [],
        device_budgets=list(setup.budgets) if multi else [],
        shortest_prompt=prompts.shortest,
        configs=runs,
        results=results,
        verdicts=verdicts(results),
        machine=machine_of(setup),
        llama_cpp_build=setup.info.build_number,
        llama_cpp_commit=setup.info.commit,
    )


def bench_url(
    url: str,
    workload: BenchRequests,
    name: str,
    *,
    ready_timeout_s: float = 60.0,
    live: StatusSink = NO_STATUS,
) -> BenchResult:
    """Measure an already running llama-server at ``url``; nothing is launched or stopped
    (its phases told to ``live``, without memory: it is not ours to probe)."""
    prompts = Prompts(workload.endpoint)
    results: list[DepthResult] = []
    with ServerClient(url, timeout=max(ready_timeout_s, 600.0)) as client:
        if not client.reachable():
            raise ServerFailedError(
                f"nothing answers at {url}", hint="start llama-server first, or check --server-url"
            )
        live.phase("waiting", subject=name)
        with sampling(lambda: (), live):  # no probe: the clock ticks on
            load_s = client.wait_ready(ready_timeout_s, client.reachable)
            props = client.props()
            n_ctx = int(props["default_generation_settings"]["n_ctx"])
            warmup = measure_depths(
                client, workload, prompts, config=name, probe=lambda: None, into=results, live=live
            )
    run = ConfigRun(
        name=name,
        status="ok",
        description=f"running server at {url}",
        args=[],
        predicted_bytes=None,
        peak_device_bytes=None,
        load_s=load_s,
        warmup=warmup,
    )
    return BenchResult(
        created=_now(),
        moetune_version=__version__,
        model=props.get("model_path"),
        server_url=url,
        endpoint=workload.endpoint,
        image=workload.image_name,
        n_ctx=n_ctx,
        n_predict=workload.n_predict,
        **_repeats_of(workload.repeats),
        depths=_depths(results, workload),
        device=None,
        device_total_bytes=None,
        budget_bytes=None,
        probe=None,
        probe_includes_overhead=False,
        shortest_prompt=prompts.shortest,
        configs=[run],
        results=results,
        verdicts=verdicts(results),
    )


def workload_of(
    depths: str,
    repeats: Repeats,
    n_predict: int,
    endpoint: str,
    image: Path | None = None,
    *,
    parallel: str | None = None,
) -> BenchRequests:
    """What each configuration is measured with: ``--depths``, how often (``--repeats``,
    ``--max-repeats``, ``--max-spread``, ``--max-time``), ``--n-predict``, ``--endpoint``,
    the ``--image`` sent with every chat request (read here), and ``--parallel``'s N list."""
    from moetune.jobs.measure import image_data_uri
    from moetune.jobs.names import MAX_PARALLEL

    if endpoint not in ENDPOINTS:
        raise BadValueError(f"unknown endpoint {endpoint!r}", hint=f"one of {', '.join(ENDPOINTS)}")
    repeats.check()
    if image is not None and endpoint != "chat":
        raise BadValueError("--image is sent with chat requests: use --endpoint chat")
    uri = image_data_uri(image) if image is not None else None
    return BenchRequests(
        tuple(parse_depths(depths)),
        repeats,
        n_predict,
        endpoint,
        uri,
        image.name if image is not None else None,
        counts_option("--parallel", parallel, MAX_PARALLEL) if parallel is not None else (),
    )


def require_measured(result: BenchResult) -> None:
    """Nothing measured: DoesNotFitError when no configuration fits, else ServerFailedError
    naming the first that failed (and its log)."""
    if result.results:
        return
    failed = [c for c in result.configs if c.status == "failed"]
    if not failed:
        raise DoesNotFitError("nothing was measured: no configuration fits the budget")
    first = failed[0]
    raise ServerFailedError(
        f"nothing was measured: {first.name}: {first.message or 'failed'}",
        hint=f"full log: {first.log_path}" if first.log_path else None,
    )


# --- the command's steps ------------------------------------------------------------------------


def bench_pass_through(
    pass_through: tuple[str, ...],
    *,
    mmproj: Path | None,
    draft: Path | None,
    image: Path | None,
    server_url: str | None,
) -> tuple[str, ...]:
    """The arguments after ``--`` with ``--mmproj`` and ``--draft`` among them; an ``--image``
    launched without a projector to encode it is refused."""
    from moetune.core.extras import parse_extras_flags
    from moetune.jobs.models import with_companions

    pass_through = with_companions(pass_through, mmproj=mmproj, draft=draft)
    if image is not None and server_url is None and parse_extras_flags(pass_through).mmproj is None:
        raise BadValueError("--image needs a projector to encode it: give --mmproj FILE")
    return pass_through


class BenchChoice(NamedTuple):
    """What ``moetune bench MODEL`` launches: the configurations, each at each ``--ubatch`` and
    ``--threads``, the context and cache type, the budget and the devices."""

    configs: str
    ubatch: str | None
    threads: str | None
    ctx: Ctx | None
    cache_type: str
    target: Sizes | None
    force: bool
    headroom: Sizes
    overhead: Sizes | None
    server: str | None
    rpc: str | None
    op_offload_min_batch: int | None = None  # GGML_OP_OFFLOAD_MIN_BATCH (None: the env's)
    parallel: int | None = None  # -np: the most streams --parallel asks for (None: auto)


class BenchLaunch(NamedTuple):
    """The model opened and checked, its launch spec, and the configurations asked for."""

    facts: ModelFacts
    spec: LaunchSpec
    names: tuple[str, ...]
    variants: tuple[Variant, ...]


def bench_launch(
    model: str, pass_through: tuple[str, ...], workload: BenchRequests, choice: BenchChoice
) -> BenchLaunch:
    """Everything said before a device is set up: the configurations and the variants, the
    depths against ``--ctx``, then the model and llama-server."""
    from moetune.jobs.models import launch_spec

    names = tuple(parse_configs(choice.configs))
    at = _variants(choice, pass_through)
    if choice.ctx is not None and choice.ctx.tokens is not None:  # before finding llama-server
        capped_depths(workload.depths, choice.ctx.tokens, workload.n_predict, 1)
    facts, spec = launch_spec(
        model,
        pass_through,
        server=choice.server,
        cache_type=choice.cache_type,
        op_offload=choice.op_offload_min_batch,
        parallel=choice.parallel,
    )
    return BenchLaunch(facts, spec, names, at)


def bench_launched(
    launch: BenchLaunch,
    workload: BenchRequests,
    choice: BenchChoice,
    *,
    live: LiveStatus,
    warn: Callable[[str], None],
) -> BenchResult:
    """The devices set up for ``launch`` (its context resolved), then each configuration
    launched and measured (told to ``live``)."""
    from moetune.jobs.launch import prepare_launch

    spec, setup = prepare_launch(
        launch.facts,
        launch.spec,
        ctx=choice.ctx,
        target_bytes=choice.target,
        headroom_bytes=choice.headroom,
        overhead=choice.overhead,
        rpc=choice.rpc,
        warn=warn,
        force=choice.force,
    )
    capped_depths(workload.depths, spec.settings.n_ctx, workload.n_predict, 1)
    req = BenchRequest(
        spec=spec, setup=setup, names=launch.names, workload=workload, variants=launch.variants
    )
    return bench_model(launch.facts, req, live.message, live=live)


def _variants(choice: BenchChoice, pass_through: tuple[str, ...]) -> tuple[Variant, ...]:
    """``--ubatch`` x ``--threads``; each refused beside its llama-server flag after --."""
    from moetune.core.command import pass_through_value

    lists: dict[str, tuple[int, ...]] = {}
    for option, given, flags, most in (
        ("--ubatch", choice.ubatch, ("-ub", "--ubatch-size"), MAX_UBATCH),
        ("--threads", choice.threads, ("-t", "--threads"), MAX_THREADS),
    ):
        if given is None:
            continue
        if pass_through_value(pass_through, *flags) is not None:
            raise BadValueError(f"give {option} or {flags[0]} after --, not both")
        lists[option] = counts_option(option, given, most)
    return tuple(variants(lists.get("--ubatch", ()), lists.get("--threads", ())))


def keep_result(
    result: BenchResult,
    text: str,
    out_file: Path | None,
    *,
    save: bool,
    note: Callable[[str], None],
    warn: Callable[[str], None],
) -> None:
    """Write ``result``'s JSON ``text`` under the data dir (``save``) and to ``out_file``, each
    said through ``note``; with ``save``, its measurements kept as speed points (a warning
    when they cannot be)."""
    from moetune.jobs.speed import bench_points, keep_points
    from moetune.store.bench import default_result_path, write_result

    paths = [default_result_path(result)] if save else []
    paths += [out_file] if out_file is not None else []
    for path in paths:
        note(f"saved {write_result(path, text)}")
    if not save:
        return
    points = bench_points(result, str(paths[0]))
    if points and keep_points(points, f"bench-{points[0].model.file_name}", warn) is not None:
        note(f"kept {len(points)} speed points")


def finish_bench(
    result: BenchResult,
    *,
    schema_version: int,
    show: Callable[[BenchResult], None],
    json_text: Callable[[BenchResult], str],
    out_file: Path | None,
    save: bool,
    note: Callable[[str], None],
    warn: Callable[[str], None],
) -> None:
    """``result`` with its forecast beside each row, shown; its JSON kept (keep_result); then
    an error where nothing was measured (require_measured)."""
    from moetune.jobs.bench_forecast import with_forecast

    if result.results:
        result = with_forecast(result, schema_version=schema_version, warn=warn)
    show(result)
    keep_result(result, json_text(result), out_file, save=save, note=note, warn=warn)
    require_measured(result)
