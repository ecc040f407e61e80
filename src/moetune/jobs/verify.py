"""llama.cpp checks a plan: ``llama-fit-params`` dry-runs the plan's first command on the
devices themselves (no weights are read), and each device's projection is set beside
moetune's prediction of that same run (one sequence, every token of the batch an output).

Within the fidelity bounds (weights 1 MiB, KV 1 %, compute 10 % or 64 MiB) the plan stands;
beyond them it is a warning, and the plan is made again with each device's difference
counted on it, so that what is printed holds by llama.cpp's own figures. This is how the
CUDA compute buffers get checked on a user's machine although no test here has a GPU.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from moetune.core.devices import DeviceSpec
from moetune.core.extras import without_extras_flags
from moetune.core.facts import ModelFacts
from moetune.core.flags import FlagRole, Pair, flag, pairs, words
from moetune.core.memory import DeviceMemory, estimate
from moetune.core.placement import Placement
from moetune.core.plan import DeviceCheck, PlanRequest, PlanResult, make_plan
from moetune.core.settings import Settings
from moetune.llamacpp.log import Projection, parse_projection
from moetune.llamacpp.process import fit_projection, tool_beside
from moetune.units import MIB

TOOL = "llama-fit-params"
WEIGHTS_MIB = 1
KV_SHARE = 0.01
COMPUTE_SHARE, COMPUTE_MIB = 0.10, 64


def reachable(endpoint: str, timeout_s: float = 1.0) -> bool:
    """Whether an RPC server answers at ``HOST:PORT``."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def find_tool(server: Path) -> Path | None:
    return tool_beside(server, TOOL)


def _dry_run_settings(settings: Settings) -> Settings:
    """What llama-fit-params reserves: one sequence, logits for every token of the batch."""
    return replace(
        settings,
        n_seq=1,
        all_outputs=True,
        kv_unified=True,
        gpu_overhead_bytes=0,
        device_correction_bytes=0,
        n_draft=0,
    )


def _bare(devices: Sequence[DeviceSpec]) -> tuple[DeviceSpec, ...] | None:
    """The devices as llama.cpp counts them: no overhead, no correction."""
    if not devices:
        return None
    return tuple(replace(d, overhead_bytes=0, correction_bytes=0) for d in devices)


def _within(projected: int, predicted: float, share: float, floor_mib: float) -> bool:
    return abs(projected - predicted) <= max(share * projected, floor_mib)


def compare(name: str, projection: Projection, predicted: DeviceMemory) -> DeviceCheck:
    model, kv = predicted.weights_bytes / MIB, predicted.kv_bytes / MIB
    compute = predicted.compute_bytes / MIB
    agrees = (
        abs(projection.model_mib - int(model)) <= WEIGHTS_MIB
        and _within(projection.context_mib, kv, KV_SHARE, 1)
        and _within(projection.compute_mib, compute, COMPUTE_SHARE, COMPUTE_MIB)
    )
    return DeviceCheck(
        device=name,
        projected_mib=projection.total_mib,
        predicted_mib=int(model) + int(kv) + int(compute),
        model_mib=(projection.model_mib, int(model)),
        context_mib=(projection.context_mib, int(kv)),
        compute_mib=(projection.compute_mib, int(compute)),
        agrees=agrees,
    )


def check_plan(
    facts: ModelFacts,
    req: PlanRequest,
    result: PlanResult,
    tool: Path,
    *,
    model_path: str | None = None,
) -> list[DeviceCheck]:
    """Each device's projection by ``llama-fit-params`` of the plan's first command
    (``PlanResult.first``), beside the prediction of the same dry run (``model_path``: the
    file on disk a ``-hf`` name's command names, so that the tool reads it and never
    downloads)."""
    rec = result.first
    args = without_extras_flags(rec.command[1:])
    if model_path is not None:
        args = on_disk(args, model_path)
    projected = parse_projection(fit_projection(tool, args))
    settings = _dry_run_settings(result.settings)
    predicted = estimate(facts, rec.placement, settings, _bare(req.devices))
    # one device: whatever llama-fit-params calls it (--vram names it generically)
    names = [d.name for d in predicted.devices] if len(req.devices) > 1 else []
    checks = []
    for index, memory in enumerate(predicted.devices):
        name = names[index] if names else _single_name(projected)
        if name in projected:
            checks.append(compare(name, projected[name], memory))
    return checks


def _single_name(projected: dict[str, Projection]) -> str:
    """One device: the first non-host line llama-fit-params printed."""
    return next((name for name in projected if name != "Host"), "")


def corrected(req: PlanRequest, checks: Sequence[DeviceCheck]) -> PlanRequest | None:
    """The request with each disagreeing device's difference counted on it (None: all agree)."""
    if all(check.agrees for check in checks):
        return None
    delta = {c.device: (c.projected_mib - c.predicted_mib) * MIB for c in checks if not c.agrees}
    if len(req.devices) == 1:  # named as llama-fit-params names it
        delta = {req.devices[0].name: next(iter(delta.values()))}
    devices = tuple(replace(d, correction_bytes=delta.get(d.name, 0)) for d in req.devices)
    return replace(req, devices=devices)


def on_disk(args: Sequence[str], model_path: str) -> list[str]:
    """``args`` with the model named by its file (``-m``), not by ``-hf``/``-mu`` (the first
    of them, ``--flag=value`` too)."""
    found = pairs(args)
    for index, pair in enumerate(found):
        if pair.role is FlagRole.MODEL and pair.values:
            found[index] = Pair("-m", (model_path,), flag("-m"))
            break
    return words(found)


def checked_plan(
    facts: ModelFacts,
    req: PlanRequest,
    result: PlanResult,
    tool: Path,
    *,
    model_path: str | None = None,
) -> PlanResult:
    """The plan checked by llama.cpp, and made again with its figures where they differ."""
    checks = check_plan(facts, req, result, tool, model_path=model_path)
    if not checks:
        return replace(result, checked="prediction")
    again = corrected(req, checks)
    if again is None:
        return replace(result, checks=checks, checked="llama.cpp")
    redone = make_plan(facts, again)
    warnings = [*redone.warnings] + [
        f"llama.cpp projects {c.device} {c.projected_mib:,} MiB, predicted {c.predicted_mib:,}: "
        "the plan counts llama.cpp's figure"
        for c in checks
        if not c.agrees
    ]
    return replace(redone, checks=checks, checked="llama.cpp (corrected)", warnings=warnings)


def dry_run_corrections(
    facts: ModelFacts,
    settings: Settings,
    placement: Placement,
    devices: Sequence[DeviceSpec],
    *,
    tool: Path,
    args: Sequence[str],
) -> tuple[int, ...]:
    """What llama.cpp's dry run of ``args`` (a placement's llama-server arguments) finds on
    each device beyond the prediction of the same run, where beyond the fidelity bounds
    (0 elsewhere): what ``run`` counts on each device before its first launch."""
    projected = parse_projection(fit_projection(tool, without_extras_flags(args)))
    predicted = estimate(facts, placement, _dry_run_settings(settings), _bare(devices))
    found = []
    for index, memory in enumerate(predicted.devices):
        name = devices[index].name if len(devices) > 1 else _single_name(projected)
        row = projected.get(name)
        check = compare(name, row, memory) if row is not None else None
        found.append(
            0
            if check is None or check.agrees
            else (check.projected_mib - check.predicted_mib) * MIB
        )
    return tuple(found)
