"""The JSON payloads of every command (``report.to_json`` adds the schema version), each result
in its JSON-ready form (``core.record.jsonable``). No rich here: ``--json`` output imports only
this and the result types."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moetune.record import jsonable

if TYPE_CHECKING:
    from moetune.core.facts import ModelFacts
    from moetune.core.frontier import Frontier
    from moetune.core.memory import MemoryEstimate
    from moetune.core.plan import PlanResult
    from moetune.core.ram import RamFigure
    from moetune.errors import ExitCode, ProfileError
    from moetune.jobs.doctor import DoctorReport
    from moetune.jobs.quants import QuantsResult
    from moetune.records.results import BenchResult, RunResult
    from moetune.records.speed import CalibrateResult
    from moetune.store.hardware import HardwareProfile
    from moetune.store.tuned import TunedProfile


def inspect_payload(facts: ModelFacts, with_tensors: bool = False) -> dict[str, Any]:
    from moetune.core.archs import arch_of

    exclude = frozenset() if with_tensors else frozenset({"tensors"})
    # verified: the architecture is in moetune's fixture matrix (docs/verified-architectures.md)
    return {
        **jsonable(facts, exclude=exclude),
        "verified": arch_of(facts.architecture).verified,
    }


def plan_payload(
    result: PlanResult, frontier: Frontier | None = None, ram: RamFigure | None = None
) -> dict[str, Any]:
    """The plan's first command (``first``, the -ot form where it keeps more) and its
    figures at the top level (memory, devices, split, forecast), beside the ``--n-cpu-moe``
    form's ``n_cpu_moe`` and ``command`` and the -ot form's ``override_tensor`` and
    ``override_command``; everything else nested; the speed frontier where it was asked for;
    ``ram_read_bandwidth``: the RAM read bandwidth the forecast used and where it came from
    (only where it had one)."""
    rec = result.recommended
    mem = result.first.memory
    top: dict[str, Any] = {
        "n_cpu_moe": rec.n_cpu_moe,
        "n_gpu_layers": rec.n_gpu_layers,
        "override_tensor": result.alternative.override_tensor if result.alternative else [],
        "command": rec.command,
        "override_command": result.alternative.command if result.alternative else None,
        # the command printed first (the -ot form where it keeps more, or the frontier's pick
        # for an objective): what run, alias and export take; null when the plan does not fit
        "first": first_payload(result, frontier),
        "n_ctx": result.settings.n_ctx,
        "gpu_bytes": mem.gpu_bytes,
        "gpu_weights_bytes": mem.gpu_weights_bytes,
        "gpu_kv_bytes": mem.gpu_kv_bytes,
        "gpu_compute_bytes": mem.gpu_compute_bytes,
        "gpu_overhead_bytes": mem.gpu_overhead_bytes,
        "cpu_weights_bytes": mem.cpu_weights_bytes,
        "host_bytes": mem.host_bytes,
        "budget_bytes": result.budget_bytes,
        "fits": result.fits,
        # when it does not fit: which resource, why, what would, and the nearest that does
        "fails": result.fails,
        "reason": result.reason,
        "suggestions": result.suggestions,
        "nearest_command": result.nearest.command if result.nearest else None,
        # every device: its budget and predicted peak by part (one device: the GPU)
        "tensor_split": result.first.tensor_split,
        "devices": [
            {**jsonable(d), "budget_bytes": budget}
            for d, budget in zip(
                mem.devices, result.device_budgets or [result.budget_bytes], strict=True
            )
        ],
        "checked": result.checked,
        # decode and prefill tok/s of the first command, the terms and missing figures
        "forecast": jsonable(result.forecast) if result.forecast else None,
        **extras_payload(mem),
    }
    if result.forecast is not None and ram is not None:  # given, saved or measured, when
        top["ram_read_bandwidth"] = jsonable(ram)
    if result.first.env:  # the variables the command sets before llama-server (op offload)
        top["env"] = result.first.env
    if result.overhead_sources:  # device -> the runtime overhead measured on its card, how
        top["overhead_measured"] = result.overhead_sources
    if frontier is not None:  # the candidates that fit, each with command, memory, forecast
        top["frontier"] = jsonable(frontier)
    if result.ctx_note:  # --ctx max stopped at the training context, not at the budget
        top["ctx_note"] = result.ctx_note
    return {**top, "plan": jsonable(result)}


def first_payload(result: PlanResult, frontier: Frontier | None) -> dict[str, Any] | None:
    """The first command: its form (``n_cpu_moe``, ``override``, ``layers`` for a dense
    model), its argv, and whether the frontier picked it (an objective's switch)."""
    if not result.fits:
        return None
    if frontier is not None and frontier.switched:
        picked = frontier.entries[frontier.picked]
        chosen: dict[str, Any] = {
            "form": picked.form,
            "command": picked.command,
            "frontier_pick": True,
        }
        return chosen | ({"env": picked.env} if picked.env else {})
    first = result.first
    form = "override" if result.override_first else "n_cpu_moe" if result.is_moe else "layers"
    found: dict[str, Any] = {"form": form, "command": first.command, "frontier_pick": False}
    return found | ({"env": first.env} if first.env else {})


def extras_payload(mem: MemoryEstimate) -> dict[str, Any]:
    """The projector's, the draft's and MTP's figures (only those present): every device
    together, and where they are."""
    found: dict[str, Any] = {}
    if (mm := mem.mmproj) is not None:
        found |= {
            "mmproj_weights_bytes": mm.mmproj_weights_bytes,
            "mmproj_compute_bytes": mm.mmproj_compute_bytes,
            "mmproj_host_compute_bytes": mm.host_compute_bytes,
            "mmproj_device": mm.device,
            "mmproj_type": mm.projector_type,
        }
    if (dr := mem.draft) is not None:
        found |= {
            "draft_weights_bytes": dr.draft_weights_bytes,
            "draft_kv_bytes": dr.draft_kv_bytes,
            "draft_compute_bytes": dr.draft_compute_bytes,
            "draft_devices": dr.devices,
            "draft_host_bytes": dr.host_bytes,
        }
    if (mt := mem.mtp) is not None:
        found |= {
            "mtp_weights_bytes": mt.mtp_weights_bytes,
            "mtp_kv_bytes": mt.mtp_kv_bytes,
            "mtp_compute_bytes": mt.mtp_compute_bytes,
            "mtp_host_bytes": mt.host_bytes,
        }
    return found


def quants_payload(result: QuantsResult) -> dict[str, Any]:
    """``plan user/model``: ``quants`` (each with ``file``, ``size_bytes``, ``fits``,
    ``n_cpu_moe``, ``max_ctx``, ``gpu_bytes``, ...), ``best`` and ``best_gpu_only`` (tags)."""
    return jsonable(result)


def run_payload(result: RunResult) -> dict[str, Any]:
    best = result.best
    return {
        "device": result.device,
        "probe": result.probe,
        "target_bytes": result.target_bytes,
        "planned_n_cpu_moe": result.planned_n_cpu_moe,
        "launches": len(result.attempts),
        "attempts": [jsonable(a) for a in result.attempts],
        "best": None if best is None else {**jsonable(best), "command": result.command},
        "n_ctx": result.settings.n_ctx,
        "device_names": result.device_names,
        "device_budgets": result.device_budgets,
        "limiting_device": result.limiting_device,
        # the -ot form launched beside the converged N: what it keeps on the devices beyond
        # it (predicted; 0: not launched); best.override_tensor is [] where N's form won
        "override_gain_bytes": result.override_gain_bytes,
        # run --objective: each extra launch (candidate, forecast, measured) and the winner
        "objective": None if result.objective is None else jsonable(result.objective),
        # each CUDA device's runtime overhead measured at the best attempt, and where it went
        "overheads": [jsonable(o) for o in result.overheads],
    }


def run_profile_payload(result: RunResult) -> dict[str, Any]:
    return {
        "name": result.profile_name,
        "path": result.profile_path,
        "reused": result.reused_profile,
    }


def bench_payload(result: BenchResult) -> dict[str, Any]:
    """The JSON form (report.to_json adds the schema version)."""
    return jsonable(result)


def calibrate_payload(result: CalibrateResult) -> dict[str, Any]:
    """``files`` (each with ``file``, ``tool``, ``points``, ``saved_path``, ``already_saved``,
    ``refused`` (rows refused) and ``refusals`` (the first few, why)),
    ``store`` (the folder) and ``total_points`` (every point kept there)."""
    return jsonable(result)


def profiles_payload(
    hardware: list[HardwareProfile],
    tuned: list[TunedProfile | ProfileError],
    root: str,
    hardware_broken: list[ProfileError],
) -> dict[str, Any]:
    from moetune.errors import ProfileError
    from moetune.store.tuned import TunedProfile

    return {
        "hardware": [
            jsonable(p) | {"vram_bytes": p.vram_bytes, "flops_per_s": p.flops_per_s}
            for p in hardware
        ],
        "tuned_dir": root,
        "tuned": [jsonable(e) for e in tuned if isinstance(e, TunedProfile)],
        "broken": [e.message for e in tuned if isinstance(e, ProfileError)],
        "hardware_broken": [e.message for e in hardware_broken],
    }


PCIE_FIELDS = {
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "pcie_gen_card_max",
}


def doctor_payload(report: DoctorReport) -> dict[str, Any]:
    """The report, each GPU's link under ``gpus[i].pcie`` and this machine's RAM read
    bandwidth under ``host`` (``ram_read_bandwidth_bytes_per_s``, how it was measured in
    ``ram_read_bandwidth``)."""
    data = jsonable(report, exclude={"gpus", "pcie", "ram_read"})
    links = {link.gpu_index: link for link in report.pcie}
    data["gpus"] = [
        jsonable(gpu, exclude=PCIE_FIELDS)
        | {"pcie": jsonable(links[gpu.index], exclude={"gpu_index"})}
        for gpu in report.gpus
    ]
    read = report.ram_read
    data["host"]["ram_read_bandwidth_bytes_per_s"] = read.figure.bytes_per_s if read else None
    data["host"]["ram_read_bandwidth"] = (
        None
        if read is None
        else {
            "source": read.source,
            "file": read.file,
            **jsonable(read.figure, exclude={"bytes_per_s", "machine"}),
        }
    )
    return {"worst": report.worst, **data}


def error_payload(code: ExitCode, message: str, hint: str | None) -> dict[str, Any]:
    """A failure's document: the exit code, its name, the one line's message and its hint
    (null where it has none: every field is always there)."""
    error: dict[str, Any] = {
        "code": int(code),
        "name": code.name,
        "message": _line(message),
        "hint": _line(hint) if hint else None,
    }
    return {"error": error}


def _line(text: str) -> str:
    """``text`` on one line, as the error line on stderr shows it."""
    return " ".join(text.split())
