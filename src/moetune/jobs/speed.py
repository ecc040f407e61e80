"""moetune's own measurements as speed points, and keeping them: each `bench` configuration
and depth (a prompt point and a generation point), each `run` launch's fill and timed
requests. Saving never fails the command that measured: a failure is a warning. And the
points as the speed model's fit reads them (``measured_of``).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moetune.core.calibrate import Measured
from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts
from moetune.core.flags import pairs
from moetune.core.placement import ALL_LAYERS, EXPS_REGEX, Override, Placement
from moetune.core.settings import OP_OFFLOAD_ENV, Settings
from moetune.core.speed import placement_layout
from moetune.errors import MoetuneError
from moetune.hardware.host import cpu_model
from moetune.llamacpp.batched_bench import BatchedRow
from moetune.records.results import BenchResult, DepthResult, StreamsResult
from moetune.records.speed import (
    MAX_TPS,
    FlashAttn,
    PointRefused,
    SpeedMachine,
    SpeedModel,
    SpeedPlacement,
    SpeedPoint,
    SpeedSource,
    checked,
)
from moetune.store.speed import SpeedStore
from moetune.store.tuned import model_identity

if TYPE_CHECKING:
    from moetune.jobs.launch import DeviceSetup
    from moetune.llamacpp.client import CompletionResult

PointSink = Callable[[list[SpeedPoint]], None]
_BACKENDS = {"cuda": "CUDA", "vulkan": "Vulkan", "rpc": "RPC"}


def machine_of(setup: DeviceSetup) -> SpeedMachine:
    """This machine with the devices a job ran on (llama.cpp's order)."""
    return machine_here(setup.devices)


def machine_here(devices: Sequence[DeviceSpec] | None) -> SpeedMachine:
    """This machine (its CPU) with ``devices`` (llama.cpp's order), found here; None: devices
    given by size or named by a hardware profile, not found here (only the CPU is known)."""
    if devices is None:
        return SpeedMachine(cpu_info=cpu_model())
    kinds = [_BACKENDS.get(d.kind, d.kind.upper()) for d in devices]
    backends = [k for k in dict.fromkeys(kinds) if k != "RPC"] + (["RPC"] if "RPC" in kinds else [])
    return SpeedMachine(
        cpu_info=cpu_model(),
        gpu_info=", ".join(d.description for d in devices if d.description) or None,
        backends=backends or ["CPU"],
        devices=[d.name for d in devices],
    )


def model_of(path: str) -> SpeedModel:
    """The model at ``path``: moetune's identity of it (name, size, header hash) where the
    file is readable here, else its name."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    try:
        identity = model_identity(path)
    except (MoetuneError, OSError, ValueError):
        return SpeedModel(file_name=name, path=path)
    return SpeedModel(
        file_name=identity.file_name,
        path=path,
        file_bytes=identity.file_bytes,
        header_sha256=identity.header_sha256,
    )


def same_model(point: SpeedModel, model: SpeedModel) -> bool:
    """Whether a point of ``point`` is one of ``model``: by header digest where both have
    one, else by file name."""
    if point.header_sha256 is not None and model.header_sha256 is not None:
        return point.header_sha256 == model.header_sha256
    return point.file_name == model.file_name


def readable_here(model: SpeedModel) -> bool:
    """Whether ``model``'s file (the path it was measured at) is readable here and is still
    that model (its header digest, where the point has one): its points can be laid out."""
    return _facts_of(model) is not None


def _facts_of(model: SpeedModel) -> ModelFacts | None:
    if model.path is None:
        return None
    try:
        stat = Path(model.path).stat()
    except (OSError, ValueError):
        return None
    return _read_facts(model.path, stat.st_size, stat.st_mtime_ns, model.header_sha256)


@functools.lru_cache(maxsize=32)
def _read_facts(
    path: str, size: int, mtime_ns: int, header_sha256: str | None
) -> ModelFacts | None:
    """The facts of the model file at ``path`` (of that size and time: a file written again
    is read again); None where it does not read, or its header is not ``header_sha256``."""
    from moetune.jobs.loader import load_model_facts

    try:
        if header_sha256 is not None and model_identity(path).header_sha256 != header_sha256:
            return None
        return load_model_facts(path)
    except (MoetuneError, OSError, ValueError):
        return None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def settings_of_args(
    args: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[SpeedPlacement, dict[str, Any]]:
    """What llama-server's ``args`` (and ``env``, the variables set for it: the op-offload
    threshold) say of the placement and the speed settings (the last of a repeated flag
    wins; llama.cpp's default where a flag is absent: None)."""
    rules: list[str] = []
    found: dict[str, Any] = {}
    n_cpu_moe, ngl, split, mode, no_op, fit = 0, None, [], None, False, False
    for pair in pairs(args):
        value = pair.value
        if pair.is_("--n-cpu-moe"):
            n_cpu_moe = _int(value) or 0
        elif pair.is_("--cpu-moe"):
            rules.append(f"{EXPS_REGEX}=CPU")
        elif pair.is_("--override-tensor") and value:
            rules += [rule for rule in value.split(",") if rule]
        elif pair.is_("--n-gpu-layers"):
            ngl = _int(value)
        elif pair.is_("--tensor-split") and value:
            split = [float(p) for p in value.replace("/", ",").split(",") if p]
        elif pair.is_("--split-mode"):
            mode = value
        elif pair.is_("--op-offload"):
            no_op = pair.name == "--no-op-offload"
        elif pair.is_("--fit"):
            fit = value == "on"
        elif pair.is_("--ubatch-size"):
            found["n_ubatch"] = _int(value)
        elif pair.is_("--batch-size"):
            found["n_batch"] = _int(value)
        elif pair.is_("--threads"):
            found["n_threads"] = _int(value)
        elif pair.is_("--cache-type-k"):
            found["type_k"] = value
        elif pair.is_("--cache-type-v"):
            found["type_v"] = value
        elif pair.is_("--flash-attn") and value in ("on", "off", "auto"):
            flash: FlashAttn = value  # type: ignore[assignment]
            found["flash_attn"] = flash
    found.setdefault("n_ubatch", 512)  # llama-server's defaults
    found.setdefault("n_batch", 2048)
    placement = SpeedPlacement(
        n_cpu_moe=n_cpu_moe,
        override_tensor=rules,
        n_gpu_layers=ngl,
        tensor_split=split if any(split) else [],
        split_mode=mode,
        no_op_offload=no_op,
        fit=fit,
        op_offload_min_batch=_int((env or {}).get(OP_OFFLOAD_ENV)) or None,
    )
    return placement, found


def _median_int(values: Sequence[int]) -> int:
    return int(statistics.median(values))


def _point_fields(
    args: Sequence[str],
    env: Mapping[str, str] | None,
    *,
    model: SpeedModel,
    machine: SpeedMachine,
    source: SpeedSource,
) -> dict[str, Any]:
    """What every point of one launch shares: its model, the placement and settings its
    arguments (and ``env``) say, the machine, the source."""
    placement, settings = settings_of_args(args, env)
    return {
        "model": model,
        "placement": placement,
        **settings,
        "machine": machine,
        "source": source,
    }


def depth_points(
    row: DepthResult,
    args: Sequence[str],
    *,
    model: SpeedModel,
    machine: SpeedMachine,
    source: SpeedSource,
    env: Mapping[str, str] | None = None,
) -> list[SpeedPoint]:
    """One configuration at one depth: its prompt processing (the prompt of ``depth`` tokens
    from an empty cache) and its generation after that prompt, by the server's timings
    (``env``: the variables it was launched with)."""
    common = _point_fields(args, env, model=model, machine=machine, source=source)
    prompt_n = _median_int([s.prompt_n for s in row.samples])
    predicted_n = _median_int([s.predicted_n for s in row.samples])
    points = []
    if prompt_n > 0:
        points.extend(
            _measured(
                kind="prompt",
                n_prompt=prompt_n,
                n_gen=0,
                tps=row.prefill_tps.median,
                samples_tps=[s.prefill_tps for s in row.samples],
                **common,
            )
        )
    if predicted_n > 0:
        points.extend(
            _measured(
                kind="generation",
                n_depth=prompt_n,
                n_prompt=0,
                n_gen=predicted_n,
                tps=row.decode_tps.median,
                samples_tps=[s.decode_tps for s in row.samples],
                **common,
            )
        )
    return points


def bench_points(result: BenchResult, file: str | None) -> list[SpeedPoint]:
    """Every configuration and depth of a bench that launched its servers (a bench of a
    running server, ``--server-url``, has no placement to keep: none)."""
    if result.server_url is not None or result.model is None:
        return []
    model = model_of(result.model)
    machine = result.machine or SpeedMachine()
    configs = {c.name: c for c in result.configs}

    def source_of(config: str) -> SpeedSource:
        return SpeedSource(
            tool="moetune bench",
            file=file,
            build_number=result.llama_cpp_build,
            build_commit=result.llama_cpp_commit,
            config=config,
            measured_at=result.created,
        )

    points: list[SpeedPoint] = []
    for row in result.results:
        source = source_of(row.config)
        config = configs[row.config]
        points += depth_points(
            row, config.args, model=model, machine=machine, source=source, env=config.env
        )
    for config in result.configs:
        source = source_of(config.name)
        for found in config.streams:
            points += streams_points(
                found, config.args, model=model, machine=machine, source=source, env=config.env
            )
    return points


def streams_points(
    found: StreamsResult,
    args: Sequence[str],
    *,
    model: SpeedModel,
    machine: SpeedMachine,
    source: SpeedSource,
    env: Mapping[str, str] | None = None,
) -> list[SpeedPoint]:
    """``bench --parallel``'s N streams as one generation point of N streams after their
    prompt, at the aggregate decode tok/s (the median over the rounds)."""
    return _measured(
        kind="generation",
        **_point_fields(args, env, model=model, machine=machine, source=source),
        n_depth=found.prompt_n,
        n_prompt=0,
        n_gen=found.predicted_n,
        tps=found.decode_tps_aggregate.median,
        samples_tps=[sum(s.decode_tps for s in r) for r in found.rounds],
        n_streams=found.streams,
    )


def batched_points(
    runs: Sequence[Sequence[BatchedRow]],
    args: Sequence[str],
    *,
    model: SpeedModel,
    machine: SpeedMachine,
    source: SpeedSource,
    env: Mapping[str, str] | None = None,
) -> list[SpeedPoint]:
    """llama-batched-bench's rows, each run of it (the same tests repeated) one list, at the
    placement and settings of ``args`` (llama-server's flags: its rows name neither): per
    test (``pp``, ``tg``, ``pl``), a generation point of ``pl`` streams after their prompt at
    the aggregate decode (the median over the runs, each run a sample), and where one stream
    (``pl`` 1), its prompt's point too (several streams' prompts are one batch of several
    sequences, which no prompt point describes). A shared prompt (``-pps``) is left out."""
    common = _point_fields(args, env, model=model, machine=machine, source=source)
    tests: dict[tuple[int, int, int], list[BatchedRow]] = {}
    for rows in runs:
        for row in rows:
            if not row.prompt_shared:
                tests.setdefault((row.n_prompt, row.n_gen, row.n_streams), []).append(row)
    points: list[SpeedPoint] = []
    for (n_prompt, n_gen, n_streams), found in tests.items():
        if n_streams == 1 and n_prompt > 0:
            points += _measured(
                kind="prompt",
                n_prompt=n_prompt,
                n_gen=0,
                tps=statistics.median(r.prompt_tps for r in found),
                samples_tps=[r.prompt_tps for r in found],
                **common,
            )
        if n_gen > 0:
            points += _measured(
                kind="generation",
                n_depth=n_prompt,
                n_prompt=0,
                n_gen=n_gen,
                tps=statistics.median(r.decode_tps for r in found),
                samples_tps=[r.decode_tps for r in found],
                n_streams=n_streams,
                **common,
            )
    return points


def launch_points(
    model: str,
    args: Sequence[str],
    setup: DeviceSetup,
    *,
    fill: CompletionResult,
    speed: DepthResult | None,
    env: Mapping[str, str] | None = None,
) -> list[SpeedPoint]:
    """One `run` launch: the fill's prompt processing (the context as one prompt) and, where
    it measured them, the timed requests' generation (``env``: the variables it was
    launched with)."""
    source = SpeedSource(
        tool="moetune run",
        build_number=setup.info.build_number,
        build_commit=setup.info.commit,
        measured_at=_now(),
    )
    known, machine = model_of(model), machine_of(setup)
    points = []
    if fill.prompt_n > 0 and fill.prompt_per_second > 0:
        points.extend(
            _measured(
                kind="prompt",
                n_prompt=fill.prompt_n,
                n_gen=0,
                tps=fill.prompt_per_second,
                samples_tps=[fill.prompt_per_second],
                **_point_fields(args, env, model=known, machine=machine, source=source),
            )
        )
    if speed is not None:
        timed = depth_points(speed, args, model=known, machine=machine, source=source, env=env)
        points += [p for p in timed if p.kind == "generation"]
    return points


def _measured(**fields: Any) -> list[SpeedPoint]:
    """The point of ``fields``; none where a timing is past what records/speed.py bounds (a
    sample of 0 tok/s is left out of the samples; a median past them, the point)."""
    fields["samples_tps"] = [s for s in fields.get("samples_tps", []) if 0 < s <= MAX_TPS]
    try:
        return [checked(lambda: SpeedPoint(**fields))]
    except PointRefused:
        return []


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def keeper(warn: Callable[[str], None], store: SpeedStore | None = None) -> PointSink:
    """A sink that keeps each `run` launch's points (``warn`` when it cannot)."""

    def keep(points: list[SpeedPoint]) -> None:
        if points:
            keep_points(points, f"run-{points[0].model.file_name}", warn, store)

    return keep


def keep_points(
    points: Sequence[SpeedPoint],
    stem: str,
    warn: Callable[[str], None],
    store: SpeedStore | None = None,
) -> Path | None:
    """Keep ``points``; where that fails, a warning and None (the command goes on)."""
    if not points:
        return None
    try:
        path, _ = (store or SpeedStore()).save(points, stem)
    except (MoetuneError, OSError) as exc:
        warn(f"the speed points were not kept: {exc}")
        return None
    return path


def with_threshold(point: SpeedPoint, threshold: int) -> SpeedPoint:
    """``point`` as measured with ``GGML_OP_OFFLOAD_MIN_BATCH=threshold`` (what llama-bench's
    rows do not say: the run that set it does)."""
    placement = point.placement.model_copy(update={"op_offload_min_batch": threshold})
    return point.model_copy(update={"placement": placement})


def override_rules(
    texts: Sequence[str], devices: Sequence[DeviceSpec]
) -> tuple[Override, ...] | None:
    """``-ot PATTERN=BUFT`` rules as the core's overrides on ``devices`` (targets by buffer
    type); None where a rule names a buffer type none of them has."""
    targets = {device.buft: i for i, device in enumerate(devices)}
    rules = []
    for rule in texts:
        pattern, _, buft = rule.rpartition("=")
        if buft.upper() == "CPU":
            rules.append(Override(pattern))
        elif buft in targets:
            rules.append(Override(pattern, targets[buft]))
        else:
            return None
    return tuple(rules)


def placement_of(point: SpeedPlacement, devices: Sequence[DeviceSpec]) -> Placement | None:
    """The core's placement of a measured one on ``devices`` (``-ot`` targets by buffer
    type); None where a rule names a buffer type none of them has, or llama.cpp's
    ``--fit`` chose it (its rules are not all of it)."""
    if point.fit:
        return None
    rules = override_rules(point.override_tensor, devices)
    if rules is None:
        return None
    ngl = point.n_gpu_layers
    n_gpu_layers = ALL_LAYERS if ngl is None or ngl < 0 else ngl  # -1: llama.cpp's auto, all
    split = tuple(point.tensor_split)
    base = Placement.with_n_cpu_moe(point.n_cpu_moe, n_gpu_layers, split)
    return base._replace(overrides=(*rules, *base.overrides))  # llama-bench: -ot rules first


def measured_of(
    points: Sequence[SpeedPoint],
    facts: ModelFacts,
    settings: Settings,
    devices: Sequence[DeviceSpec],
    *,
    model: SpeedModel | None = None,
) -> list[Measured]:
    """The points the speed model can place on ``devices`` (at ``settings`` with each one's
    ubatch and batch), as the fit reads them: each laid out with ``facts``, or, given the
    ``model`` they are of, the points of other models with their own model's facts (read
    from the file they were measured with: a point whose file is not readable here is left
    out, speed_from.py counts those)."""
    found = []
    for point in points:
        placement = placement_of(point.placement, devices)
        if placement is None:
            continue
        own, other = facts, None
        if model is not None and not same_model(point.model, model):
            read = _facts_of(point.model)
            if read is None:
                continue
            own, other = read, point.model.file_name
        update: dict[str, Any] = {}
        if point.n_ubatch is not None:
            update["n_ubatch"] = point.n_ubatch
        if point.n_batch is not None:
            update["n_batch"] = point.n_batch
        update["op_offload_min_batch"] = point.placement.op_offload_min_batch
        if other is not None:
            update["n_draft"] = 0  # the plan's speculation is its own model's
        layout = placement_layout(
            own,
            placement,
            replace(settings, **update),
            devices,
            op_offload=not point.placement.no_op_offload,
        )
        layout = replace(layout, n_threads=point.n_threads)  # None: the physical cores
        found.append(
            Measured(
                layout,
                point.n_prompt,
                point.n_gen,
                point.n_depth,
                point.tps,
                other,
                n_streams=point.n_streams,
            )
        )
    return found
