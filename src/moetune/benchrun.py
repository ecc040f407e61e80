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

A configuration that cannot be placed is recorded as ``skipped`` with the reason; one whose
llama-server fails (out of memory, exits) as ``failed``, and the bench goes on with the next.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from moetune import __version__
from moetune.bench import CompletionResult, ServerClient
from moetune.command import args_for, server_argv
from moetune.errors import BadValueError, DoesNotFitError, ModelFileError, ServerFailedError
from moetune.hardware import GpuProbe
from moetune.memory import Settings, estimate
from moetune.memprobe import MemoryProbe, choose_probe, device_prefix
from moetune.model import ModelFacts
from moetune.placement import ALL_LAYERS, Placement
from moetune.planner import plan_layers, plan_n_cpu_moe
from moetune.runner import check_extra, offload_device
from moetune.server import RunningServer, launch
from moetune.units import MIB, format_bytes

CONFIG_NAMES: tuple[str, ...] = ("plan", "fit", "cpu-moe", "layers", "gpu-only")
ENDPOINTS: tuple[str, ...] = ("chat", "completion")
DEFAULT_DEPTHS: tuple[int, ...] = (0, 4096, 16384)
DEFAULT_REPEATS = 3
DEFAULT_N_PREDICT = 128
RESULT_KIND = "moetune.bench"
HOME_ENV = "MOETUNE_HOME"
WARM_UP_TOKENS = 4

Event = Callable[[str], None]


# --- results --------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stat(_Frozen):
    """Median and range of the repeats of one figure."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Stat | None:
        """None when no value is known."""
        known = [v for v in values if v is not None]
        if not known:
            return None
        return cls(median=statistics.median(known), min=min(known), max=max(known))


class Sample(_Frozen):
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


class DepthResult(_Frozen):
    """One configuration at one depth: medians and ranges over the repeats, and the samples."""

    config: str
    depth: int
    ttft_s: Stat | None
    prefill_tps: Stat
    decode_tps: Stat
    client_decode_tps: Stat | None
    device_bytes: int | None  # device memory after this depth's requests (probe)
    samples: list[Sample]


class FitDevice(_Frozen):
    """One device as ``--fit`` left it (the last summary line it printed for it)."""

    device: str
    layers: int
    overflowing: int
    used_mib: int
    free_mib: int


class FitChoice(_Frozen):
    """What llama.cpp's ``--fit`` decided, from its log."""

    status: str  # unchanged | fitted | failed | error | unknown
    message: str | None
    devices: list[FitDevice]
    offloaded: str | None  # "9/9" from "offloaded 9/9 layers to GPU"
    target_mib: int | None  # the --fit-target moetune passed (None: llama.cpp's default)


class ConfigRun(_Frozen):
    """One configuration: how it was launched and how that went."""

    name: str
    status: Literal["ok", "skipped", "failed"]
    description: str
    args: list[str]  # llama-server arguments, without the binary
    predicted_bytes: int | None
    peak_device_bytes: int | None
    load_s: float | None
    fit: FitChoice | None = None
    message: str | None = None
    log_path: str | None = None


class Verdict(_Frozen):
    """The fastest configuration at one depth by one figure, and by how much."""

    depth: int
    metric: Literal["decode_tps", "prefill_tps"]
    winner: str
    runner_up: str | None
    winner_median: float
    runner_up_median: float | None
    ratio: float | None  # winner's median / runner-up's
    within_noise: bool  # the min-max spreads of winner and runner-up overlap


class BenchResult(_Frozen):
    kind: Literal["moetune.bench"] = "moetune.bench"
    created: str
    moetune_version: str
    model: str | None
    server_url: str | None
    endpoint: str
    n_ctx: int
    n_predict: int
    repeats: int
    depths: list[int]
    device: str | None
    device_total_bytes: int | None
    budget_bytes: int | None
    probe: str | None
    probe_includes_overhead: bool
    shortest_prompt: int | None = None  # tokens of the shortest prompt (chat: the template's)
    configs: list[ConfigRun]
    results: list[DepthResult]
    verdicts: list[Verdict]


# --- pure pieces ----------------------------------------------------------------------------


def sample_of(result: CompletionResult) -> Sample:
    """The raw sample of one timed request."""
    ttft = result.ttft_s
    return Sample(
        prompt_n=result.prompt_n, predicted_n=result.predicted_n, ttft_s=ttft,
        prompt_ms=result.prompt_ms, predicted_ms=result.predicted_ms,
        prefill_tps=result.prompt_per_second, decode_tps=result.predicted_per_second,
        client_prefill_tps=result.prompt_n / ttft if ttft else None,
        client_decode_tps=result.client_decode_tps, wall_s=result.wall_s,
        stop_type=result.stop_type,
    )  # fmt: skip


def summarize(config: str, depth: int, samples: Sequence[Sample],
              device_bytes: int | None) -> DepthResult:  # fmt: skip
    """Medians and ranges of ``samples`` (at least one)."""
    if not samples:
        raise ValueError("summarize needs at least one sample")
    prefill = Stat.of([s.prefill_tps for s in samples])
    decode = Stat.of([s.decode_tps for s in samples])
    assert prefill is not None and decode is not None  # every sample has them
    return DepthResult(
        config=config, depth=depth, ttft_s=Stat.of([s.ttft_s for s in samples]),
        prefill_tps=prefill, decode_tps=decode,
        client_decode_tps=Stat.of([s.client_decode_tps for s in samples]),
        device_bytes=device_bytes, samples=list(samples),
    )  # fmt: skip


def _verdict(depth: int, metric: Literal["decode_tps", "prefill_tps"],
             rows: Sequence[DepthResult]) -> Verdict:  # fmt: skip
    ranked = sorted(rows, key=lambda r: getattr(r, metric).median, reverse=True)
    best: Stat = getattr(ranked[0], metric)
    if len(ranked) == 1:
        return Verdict(depth=depth, metric=metric, winner=ranked[0].config, runner_up=None,
                       winner_median=best.median, runner_up_median=None, ratio=None,
                       within_noise=False)  # fmt: skip
    second: Stat = getattr(ranked[1], metric)
    ratio = best.median / second.median if second.median > 0 else None
    return Verdict(
        depth=depth, metric=metric, winner=ranked[0].config, runner_up=ranked[1].config,
        winner_median=best.median, runner_up_median=second.median, ratio=ratio,
        within_noise=best.min <= second.max,
    )  # fmt: skip


def verdicts(results: Sequence[DepthResult]) -> list[Verdict]:
    """Per depth, the fastest configuration in decode and in prefill tok/s (higher wins).

    "Within noise" when the winner's slowest repeat is no faster than the runner-up's fastest.
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


def parse_depths(text: str) -> list[int]:
    """``--depths 0,4096,16k``: token counts (``k`` = 1024)."""
    depths: list[int] = []
    for part in filter(None, (p.strip().lower() for p in text.split(","))):
        scale = 1024 if part.endswith("k") else 1
        try:
            depths.append(int(part.removesuffix("k").replace("_", "")) * scale)
        except ValueError:
            raise BadValueError(f"not a depth: {part!r}", hint="e.g. --depths 0,4096,16k") from None
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


# --- what --fit chose -----------------------------------------------------------------------

_FIT_DEVICE_RE = re.compile(
    r"common_params_fit_impl:\s+- (?P<dev>.+?):\s+(?P<layers>\d+) layers"
    r"(?: \(\s*(?P<over>\d+) overflowing\))?,\s+(?P<used>-?\d+) MiB used,"
    r"\s+(?P<free>-?\d+) MiB free"
)
_FIT_STATUS = (  # the first that matches wins ("no changes needed" also ends "successfully")
    (re.compile(r"failed to fit params to free device memory: (?P<msg>.*)"), "failed"),
    (re.compile(r"encountered an error while trying to fit params.*?: (?P<msg>.*)"), "error"),
    (re.compile(r"no changes needed"), "unchanged"),
    (re.compile(r"successfully fit params"), "fitted"),
)
_OFFLOADED_RE = re.compile(r"offloaded (\d+/\d+) layers to GPU")


def parse_fit_log(text: str, target_mib: int | None = None) -> FitChoice:
    """What ``--fit`` chose, from a llama-server log at ``-lv 4`` (common/fit.cpp's lines).

    ``unchanged``: the defaults fit; ``fitted``: it moved tensors (the per-device lines say
    how many layers went to each device and how many of them have experts on the CPU,
    "overflowing"); ``failed``/``error``: it gave up, load continued with the defaults.
    """
    status, message = "unknown", None
    for pattern, name in _FIT_STATUS:
        if m := pattern.search(text):
            status, message = name, (m.groupdict().get("msg") or "").strip() or None
            break
    devices: dict[str, FitDevice] = {}
    for m in _FIT_DEVICE_RE.finditer(text):  # a later line for a device replaces an earlier one
        name = m["dev"].strip()
        devices[name] = FitDevice(device=name, layers=int(m["layers"]),
                                  overflowing=int(m["over"] or 0), used_mib=int(m["used"]),
                                  free_mib=int(m["free"]))  # fmt: skip
    offloaded = _OFFLOADED_RE.findall(text)
    return FitChoice(status=status, message=message, devices=list(devices.values()),
                     offloaded=offloaded[-1] if offloaded else None,
                     target_mib=target_mib)  # fmt: skip


def describe_fit(fit: FitChoice) -> str:
    """One line: ``fitted: RPC0 9 layers (6 with CPU experts)``."""
    parts = [f"{d.device.split(' (', 1)[0]} {d.layers} layers ({d.overflowing} with CPU experts)"
             for d in fit.devices]  # fmt: skip
    if fit.message:
        parts.append(fit.message)
    if not parts and fit.offloaded:
        parts.append(f"{fit.offloaded} layers offloaded")
    return f"{fit.status}" + (f": {'; '.join(parts)}" if parts else "")


# --- the configurations ---------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every configuration shares."""

    model: str
    settings: Settings
    budget_bytes: int
    extra: tuple[str, ...] = ()
    threads: int | None = None
    fit_target_mib: int | None = None  # --fit-target for the fit configuration


@dataclass(frozen=True)
class ConfigSpec:
    """One configuration to launch (``skip``: why it is not launched)."""

    name: str
    description: str
    args: tuple[str, ...] = ()
    predicted_bytes: int | None = None
    skip: str | None = None
    fit_target_mib: int | None = None


def _argv(setup: Setup, placement: Placement, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """llama-server's arguments (no binary) for ``placement``; -ub/-b stay in the pass-through."""
    args = args_for(setup.model, setup.settings, placement, threads=setup.threads,
                    extra=(*extra, *setup.extra), with_ubatch=False)  # fmt: skip
    return tuple(server_argv(args)[1:])


def _plan_spec(facts: ModelFacts, setup: Setup) -> ConfigSpec:
    if not facts.is_moe:
        return ConfigSpec("plan", "--n-cpu-moe", skip="a dense model has no experts")
    try:
        plan = plan_n_cpu_moe(facts, setup.budget_bytes, setup.settings)
    except DoesNotFitError as exc:
        return ConfigSpec("plan", "--n-cpu-moe", skip=exc.message)
    n = plan.placement.n_cpu_moe or 0
    return ConfigSpec("plan", f"--n-cpu-moe {n}", _argv(setup, Placement.with_n_cpu_moe(n)),
                      plan.memory.gpu_bytes)  # fmt: skip


def _fit_spec(facts: ModelFacts, setup: Setup) -> ConfigSpec:
    settings = setup.settings
    args = ["-m", setup.model, "-fa", "on" if settings.flash_attn else "off"]
    args += ["-ctk", settings.type_k, "-ctv", settings.type_v, "-c", str(settings.n_ctx)]
    args += ["-t", str(setup.threads)] if setup.threads else []
    args += ["--fit", "on"]
    target = setup.fit_target_mib
    args += ["--fit-target", str(target)] if target is not None else []
    about = "--fit on" + (f" -fitt {target}" if target is not None else "")
    return ConfigSpec("fit", about, (*args, *setup.extra), fit_target_mib=target)


def _cpu_moe_spec(facts: ModelFacts, setup: Setup) -> ConfigSpec:
    if not facts.is_moe:
        return ConfigSpec("cpu-moe", "-cmoe", skip="a dense model has no experts")
    memory = estimate(facts, Placement.all_experts_on_cpu(), setup.settings)
    return ConfigSpec("cpu-moe", "-cmoe", _argv(setup, Placement(), ("-cmoe",)), memory.gpu_bytes)


def _layers_spec(facts: ModelFacts, setup: Setup) -> ConfigSpec:
    try:
        ngl, memory = plan_layers(facts, setup.budget_bytes, setup.settings)
    except DoesNotFitError as exc:
        return ConfigSpec("layers", "-ngl", skip=exc.message)
    if ngl > facts.n_layers:  # every layer and the output: what -ngl 99 does
        ngl = ALL_LAYERS
    about = "-ngl 99" if ngl == ALL_LAYERS else f"-ngl {ngl}"
    return ConfigSpec("layers", about, _argv(setup, Placement(n_gpu_layers=ngl)), memory.gpu_bytes)


def _gpu_only_spec(facts: ModelFacts, setup: Setup) -> ConfigSpec:
    memory = estimate(facts, Placement(), setup.settings)
    if memory.gpu_bytes > setup.budget_bytes:
        why = (f"does not fit: needs {format_bytes(memory.gpu_bytes)}, budget "
               f"{format_bytes(setup.budget_bytes)}")  # fmt: skip
        return ConfigSpec("gpu-only", "-ngl 99", skip=why)
    return ConfigSpec("gpu-only", "-ngl 99", _argv(setup, Placement()), memory.gpu_bytes)


_BUILDERS: dict[str, Callable[[ModelFacts, Setup], ConfigSpec]] = {
    "plan": _plan_spec, "fit": _fit_spec, "cpu-moe": _cpu_moe_spec, "layers": _layers_spec,
    "gpu-only": _gpu_only_spec,
}  # fmt: skip


def build_configs(facts: ModelFacts, setup: Setup, names: Sequence[str]) -> list[ConfigSpec]:
    """The configurations asked for; one whose command repeats an earlier one is skipped."""
    specs: list[ConfigSpec] = []
    seen: dict[tuple[str, ...], str] = {}
    for name in names:
        spec = _BUILDERS[name](facts, setup)
        if spec.skip is None and spec.args in seen:
            spec = ConfigSpec(name, spec.description, spec.args, spec.predicted_bytes,
                              skip=f"same command as {seen[spec.args]}")  # fmt: skip
        elif spec.skip is None:
            seen[spec.args] = name
        specs.append(spec)
    return specs


# --- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What is asked of every configuration."""

    depths: tuple[int, ...] = DEFAULT_DEPTHS
    repeats: int = DEFAULT_REPEATS
    n_predict: int = DEFAULT_N_PREDICT
    endpoint: str = "chat"


@dataclass
class Prompts:
    """Prompt texts by depth, built once with the server's tokenizer (same model: reused)."""

    endpoint: str
    texts: dict[int, str] = field(default_factory=dict)
    shortest: int | None = None

    def minimum(self, client: ServerClient) -> int:
        """The shortest prompt: the chat template's own tokens, or one token."""
        if self.shortest is None:
            chat = self.endpoint == "chat"
            self.shortest = max(client.chat_tokens(""), 1) if chat else 1
        return self.shortest

    def text(self, client: ServerClient, depth: int) -> str:
        if depth not in self.texts:
            build = (client.chat_prompt_of_tokens if self.endpoint == "chat"
                     else client.prompt_of_tokens)  # fmt: skip
            self.texts[depth] = build(depth)
        return self.texts[depth]


def request(client: ServerClient, endpoint: str, text: str, n_predict: int) -> CompletionResult:
    """One timed, streamed, uncached request on ``endpoint``."""
    if endpoint == "chat":
        return client.chat(text, n_predict)
    return client.complete(text, n_predict, stream=True)


def measure_depths(client: ServerClient, workload: Workload, prompts: Prompts, *, config: str,
                   probe: Callable[[], int | None], on_event: Event,
                   into: list[DepthResult]) -> None:  # fmt: skip
    """A warm-up, then ``repeats`` requests per depth; a DepthResult per depth into ``into``.

    Depths are capped by the server's context and raised to the shortest prompt (the chat
    template's own tokens), so each prompt is exactly its depth.
    """
    shortest = prompts.minimum(client)
    depths = capped_depths(workload.depths, client.n_ctx(), workload.n_predict, shortest)
    request(client, workload.endpoint, prompts.text(client, shortest), WARM_UP_TOKENS)
    for depth in depths:
        samples: list[Sample] = []
        text = prompts.text(client, depth)
        for index in range(workload.repeats):
            on_event(f"{config}: depth {depth}, run {index + 1} of {workload.repeats}")
            samples.append(sample_of(request(client, workload.endpoint, text,
                                             workload.n_predict)))  # fmt: skip
        into.append(summarize(config, depth, samples, probe()))


@dataclass(frozen=True)
class Launcher:
    """How configurations are launched and measured."""

    binary: Path
    probe: MemoryProbe | None
    workload: Workload
    prompts: Prompts
    on_event: Event
    log_dir: Path | None = None
    ready_timeout_s: float = 600.0


def _ended(spec: ConfigSpec, status: Literal["ok", "failed"], *, server: RunningServer | None,
           load_s: float | None, results: Sequence[DepthResult],
           message: str | None = None) -> ConfigRun:  # fmt: skip
    peaks = [r.device_bytes for r in results if r.device_bytes is not None]
    fit = None
    if spec.name == "fit" and server is not None:
        fit = parse_fit_log(server.log_text(), spec.fit_target_mib)
    return ConfigRun(
        name=spec.name, status=status, description=spec.description, args=list(spec.args),
        predicted_bytes=spec.predicted_bytes, peak_device_bytes=max(peaks, default=None),
        load_s=load_s, fit=fit, message=message,
        log_path=str(server.log_path) if server is not None else None,
    )  # fmt: skip


def run_config(spec: ConfigSpec, launcher: Launcher) -> tuple[ConfigRun, list[DepthResult]]:
    """Launch one configuration, measure it, stop it; a failure of llama-server is recorded."""
    if spec.skip is not None:
        run = ConfigRun(name=spec.name, status="skipped", description=spec.description,
                        args=list(spec.args), predicted_bytes=spec.predicted_bytes,
                        peak_device_bytes=None, load_s=None, message=spec.skip)  # fmt: skip
        return run, []
    results: list[DepthResult] = []
    server: RunningServer | None = None
    load_s: float | None = None
    events = launcher.on_event
    try:
        events(f"{spec.name}: starting llama-server ({spec.description})")
        server = launch(launcher.binary, spec.args, log_dir=launcher.log_dir)
        with server, ServerClient(server.url, timeout=launcher.ready_timeout_s) as client:
            load_s = client.wait_ready(
                launcher.ready_timeout_s, server.check_alive,
                lambda s: events(f"{spec.name}: loading ({s:.0f} s)"),
            )  # fmt: skip
            measure_depths(client, launcher.workload, launcher.prompts, config=spec.name,
                           probe=_probe_of(launcher.probe, server), on_event=events,
                           into=results)  # fmt: skip
    except ServerFailedError as exc:
        line = (server.failure() if server is not None else None) or exc.message.splitlines()[0]
        failed = _ended(spec, "failed", server=server, load_s=load_s, results=results,
                        message=line.rstrip(":"))  # fmt: skip
        if failed.log_path is None and exc.hint and exc.hint.startswith(_LOG_HINT):
            failed = failed.model_copy(update={"log_path": exc.hint.removeprefix(_LOG_HINT)})
        return failed, results
    return _ended(spec, "ok", server=server, load_s=load_s, results=results), results


_LOG_HINT = "full log: "  # server.RunningServer.exit_error's hint


def _probe_of(probe: MemoryProbe | None, server: RunningServer) -> Callable[[], int | None]:
    return (lambda: None) if probe is None else (lambda: probe.device_bytes(server))


# --- the whole bench ------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRequest:
    """``moetune bench MODEL``: everything besides the model's facts."""

    binary: Path
    model: str
    settings: Settings
    names: tuple[str, ...] = CONFIG_NAMES
    workload: Workload = Workload()
    extra: tuple[str, ...] = ()
    target_bytes: int | None = None  # device budget; default: device total - headroom
    headroom_bytes: int = 1536 * MIB
    threads: int | None = None
    gpus: GpuProbe | None = None
    log_dir: Path | None = None
    ready_timeout_s: float = 600.0


def _depths(results: Sequence[DepthResult], workload: Workload) -> list[int]:
    """The depths measured (after capping), else those asked for."""
    return sorted({r.depth for r in results}) or list(workload.depths)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _budget(req: BenchRequest, total: int, free: int) -> tuple[int, int | None]:
    """(budget, --fit-target MiB or None): ``--target-vram`` or the device's total - headroom."""
    if req.target_bytes is not None:
        return req.target_bytes, max(0, (free - req.target_bytes) // MIB)
    budget = total - req.headroom_bytes
    if budget <= 0:
        raise BadValueError(
            f"the device has {format_bytes(total)}: nothing is left after the "
            f"{format_bytes(req.headroom_bytes)} headroom",
            hint="pass --target-vram",
        )
    return budget, None


def bench_model(facts: ModelFacts, req: BenchRequest, on_event: Event) -> BenchResult:
    """Launch and measure each configuration in turn; the results and the verdict."""
    check_extra(req.extra)
    device = offload_device(req.binary, req.extra)
    budget, fit_target = _budget(req, device.total_bytes, device.free_bytes)
    kind = "rpc" if device_prefix(device.name).startswith("RPC") else req.settings.device_kind
    settings = req.settings.model_copy(update={"device_kind": kind})
    setup = Setup(req.model, settings, budget, req.extra, req.threads, fit_target)
    specs = build_configs(facts, setup, req.names)
    workload = req.workload
    probe = choose_probe(device.name, req.gpus)
    prompts = Prompts(workload.endpoint)
    launcher = Launcher(req.binary, probe, workload, prompts, on_event, req.log_dir,
                        req.ready_timeout_s)  # fmt: skip
    runs: list[ConfigRun] = []
    results: list[DepthResult] = []
    for spec in specs:
        run, measured = run_config(spec, launcher)
        runs.append(run)
        results += measured
    return BenchResult(
        created=_now(), moetune_version=__version__, model=req.model, server_url=None,
        endpoint=workload.endpoint, n_ctx=settings.n_ctx, n_predict=workload.n_predict,
        repeats=workload.repeats, depths=_depths(results, workload), device=device.name,
        device_total_bytes=device.total_bytes, budget_bytes=budget, probe=probe.name,
        probe_includes_overhead=probe.includes_overhead, shortest_prompt=prompts.shortest,
        configs=runs, results=results, verdicts=verdicts(results),
    )  # fmt: skip


def bench_url(url: str, workload: Workload, name: str, on_event: Event,
              ready_timeout_s: float = 60.0) -> BenchResult:  # fmt: skip
    """Measure an already running llama-server at ``url``; nothing is launched or stopped."""
    prompts = Prompts(workload.endpoint)
    results: list[DepthResult] = []
    with ServerClient(url, timeout=max(ready_timeout_s, 600.0)) as client:
        if not client.reachable():
            raise ServerFailedError(
                f"nothing answers at {url}", hint="start llama-server first, or check --server-url"
            )
        load_s = client.wait_ready(ready_timeout_s, client.reachable)
        props = client.props()
        n_ctx = int(props["default_generation_settings"]["n_ctx"])
        measure_depths(client, workload, prompts, config=name, probe=lambda: None,
                       on_event=on_event, into=results)  # fmt: skip
    run = ConfigRun(name=name, status="ok", description=f"running server at {url}", args=[],
                    predicted_bytes=None, peak_device_bytes=None, load_s=load_s)  # fmt: skip
    return BenchResult(
        created=_now(), moetune_version=__version__, model=props.get("model_path"),
        server_url=url, endpoint=workload.endpoint, n_ctx=n_ctx, n_predict=workload.n_predict,
        repeats=workload.repeats, depths=_depths(results, workload), device=None,
        device_total_bytes=None, budget_bytes=None, probe=None, probe_includes_overhead=False,
        shortest_prompt=prompts.shortest, configs=[run], results=results,
        verdicts=verdicts(results),
    )  # fmt: skip


# --- saved results --------------------------------------------------------------------------


def bench_dir() -> Path:
    """Where results are kept: ``$MOETUNE_HOME/bench``, else ``<user data dir>/moetune/bench``."""
    if home := os.environ.get(HOME_ENV):
        return Path(home).expanduser() / "bench"
    from platformdirs import user_data_dir

    return Path(user_data_dir("moetune")) / "bench"


def default_result_path(result: BenchResult) -> Path:
    """``<bench_dir>/<UTC time>-<model or "server">.json``."""
    stem = Path(result.model).stem if result.model else "server"
    stamp = re.sub(r"[^0-9T]", "", result.created.split("+")[0])
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:80] or "model"
    return bench_dir() / f"{stamp}-{slug}.json"


def write_result(path: Path, text: str) -> Path:
    """Write ``text`` (the JSON report) to ``path``, creating folders; the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise BadValueError(f"cannot write {path}: {exc.strerror}") from exc
    return path


def load_result(path: Path, schema_version: int) -> BenchResult:
    """A saved bench result; ModelFileError when unreadable, BadValueError when not one."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadValueError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("kind") != RESULT_KIND:
        raise BadValueError(f"{path} is not a moetune bench result",
                            hint="pass a file written by `moetune bench`")  # fmt: skip
    version = data.pop("schema_version", None)
    if version != schema_version:
        raise BadValueError(f"{path} has schema version {version}; this moetune reads "
                            f"{schema_version}")  # fmt: skip
    try:
        return BenchResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BadValueError(f"{path} is not a valid bench result: {where}: {first['msg']}") from exc


def merge_results(results: Sequence[BenchResult], labels: Sequence[str]) -> BenchResult:
    """Several saved results as one (configurations renamed ``name@label`` where names clash)."""
    if len(results) == 1:
        return results[0]
    names = [c.name for r in results for c in r.configs]
    runs: list[ConfigRun] = []
    rows: list[DepthResult] = []
    for result, label in zip(results, labels, strict=True):
        rename = {c.name: f"{c.name}@{label}" if names.count(c.name) > 1 else c.name
                  for c in result.configs}  # fmt: skip
        runs += [c.model_copy(update={"name": rename[c.name]}) for c in result.configs]
        rows += [r.model_copy(update={"config": rename.get(r.config, r.config)})
                 for r in result.results]  # fmt: skip
    depths = sorted({d for r in results for d in r.depths})
    return results[0].model_copy(
        update={"configs": runs, "results": rows, "verdicts": verdicts(rows), "depths": depths}
    )
