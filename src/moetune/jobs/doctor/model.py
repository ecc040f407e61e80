"""A model on this machine: whether its planned placement fits (the devices, then the RAM its
CPU-resident experts need), and its decode and prompt ceilings from bandwidths (see the
package's docstring for the bound)."""

from __future__ import annotations

from moetune.core.devices import single_device
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate, Settings, default_n_ctx, estimate
from moetune.core.placement import Placement
from moetune.core.plan import PlanRequest, RamCheck, check_ram, check_targets, make_plan
from moetune.errors import BadValueError, DoesNotFitError
from moetune.gguf.roles import Role
from moetune.hardware.base import GpuInfo, HostInfo
from moetune.jobs.doctor.findings import (
    DoctorInputs,
    Finding,
    RamBandwidthSource,
    RamRead,
    SpeedCeiling,
    Status,
    gbps,
)
from moetune.jobs.doctor.gpus import link_label
from moetune.record import record
from moetune.store.hardware import match_detected, pcie_bandwidth_bytes_per_s
from moetune.units import format_bytes

# Assumed when not given: a dual-channel desktop (DDR4-3200 is 51 GB/s, DDR5-6000 96 GB/s in
# theory; CPU inference reaches a good part of that, not all of it).
DEFAULT_RAM_BANDWIDTH_BYTES_PER_S = 60 * 10**9
SLOW_DECODE_TPS = 10.0


@record(frozen=True)
class GpuTarget:
    """The GPU the model checks plan for."""

    name: str
    vram_bytes: int
    bandwidth_bytes_per_s: int | None
    pcie_bytes_per_s: int | None
    pcie_label: str | None


def gpu_target(inputs: DoctorInputs, gpus: list[GpuInfo]) -> GpuTarget | None:
    """The GPU to plan for: ``--vram``, ``--gpu``, else the first detected (its profile for
    bandwidth)."""
    if inputs.vram_bytes is not None:
        return GpuTarget("given (--vram)", inputs.vram_bytes, None, None, None)
    if (p := inputs.gpu_profile) is not None:
        return GpuTarget(
            p.name,
            p.vram_bytes,
            p.memory_bandwidth_bytes_per_s,
            p.pcie_bytes_per_s,
            link_label(p.pcie_gen, p.pcie_lanes),
        )
    gpu = next((g for g in gpus if g.vram_total_bytes is not None), None)
    if gpu is None or gpu.vram_total_bytes is None:
        return None
    profile = match_detected(gpu.name, gpu.vram_total_bytes, list(inputs.hardware))
    bandwidth = gpu.memory_bandwidth_bytes_per_s or (
        profile.memory_bandwidth_bytes_per_s if profile else None
    )
    gen = gpu.pcie_gen_max or (profile.pcie_gen if profile else None)
    width = gpu.pcie_width_max or (profile.pcie_lanes if profile else None)
    pcie = pcie_bandwidth_bytes_per_s(gen, width) if gen and width else None
    return GpuTarget(
        gpu.name, gpu.vram_total_bytes, bandwidth, pcie, link_label(gen, width) if pcie else None
    )


def _placement_memory(
    facts: ModelFacts, inputs: DoctorInputs, target: GpuTarget | None, host: HostInfo
) -> tuple[MemoryEstimate, RamCheck, int | None, Settings]:
    """The planned placement's memory (all on the CPU without a GPU) and its RAM check."""
    n_ctx = inputs.n_ctx or default_n_ctx(facts.context_length)
    settings = Settings(n_ctx=n_ctx, type_k=inputs.cache_type, type_v=inputs.cache_type)
    limit = host.ram_limit_bytes
    total = min(host.ram_total_bytes, limit) if limit else host.ram_total_bytes
    available = min(host.ram_available_bytes, total)
    if inputs.ram_bytes is not None:
        total = available = inputs.ram_bytes
    if target is None and not inputs.devices:
        memory = estimate(facts, Placement(n_gpu_layers=0), settings)
        return memory, check_ram(memory, total, available), None, settings
    request = PlanRequest(
        model_path=facts.paths[0],
        devices=inputs.devices or single_device(settings, target.vram_bytes if target else 0),
        target_vram=inputs.device_targets or (inputs.target_bytes,),
        headrooms=inputs.device_headrooms or (inputs.headroom_bytes,),
        settings=settings,
        ram_total_bytes=total,
        ram_available_bytes=available,
        device_args=inputs.device_args,
    )
    if not inputs.force:
        check_targets(request.devices, request.target_vram)
    plan = make_plan(facts, request)
    if plan.fails == "gpu":
        raise DoesNotFitError(plan.reason or "does not fit", hint="; ".join(plan.suggestions))
    rec = plan.recommended  # the --n-cpu-moe form: the RAM it needs (the -ot form needs less)
    return rec.memory, check_ram(rec.memory, total, available), rec.n_cpu_moe, plan.settings


def ram_model_finding(memory: MemoryEstimate, ram: RamCheck, n_cpu_moe: int | None) -> Finding:
    where = f"--n-cpu-moe {n_cpu_moe}" if n_cpu_moe is not None else "CPU only"
    message = (
        f"RAM for the CPU side ({where}: {format_bytes(memory.cpu_expert_bytes)} of "
        f"experts, {format_bytes(memory.host_bytes)} in all): {ram.message}"
    )
    if ram.status == "ok":
        return Finding(check="model-ram", status="ok", message=message)
    status: Status = "fail" if ram.status == "fail" else "warn"
    return Finding(
        check="model-ram",
        status=status,
        message=message,
        fix="free RAM, add RAM, use a smaller quant, or a shorter context",
    )


def bytes_per_token(facts: ModelFacts, memory: MemoryEstimate) -> tuple[int, int]:
    """What one generated token reads from the devices' memory and from RAM at a placement:
    the weights outside the routed experts (the token embedding aside: one row of it) and
    the active share ``n_used / n_expert`` of the routed experts on each side (the KV cache
    aside). The speed model (core/speed.py) is to replace this."""
    share = facts.n_experts_used / facts.n_experts if facts.n_experts else 0.0
    embedding = facts.global_bytes_by_role.get(Role.TOKEN_EMBD, 0)
    gpu_dense = memory.gpu_weights_bytes - memory.gpu_expert_bytes
    cpu_dense = max(memory.cpu_weights_bytes - memory.cpu_expert_bytes - embedding, 0)
    return (
        round(gpu_dense + memory.gpu_expert_bytes * share),
        round(cpu_dense + memory.cpu_expert_bytes * share),
    )


def ram_bandwidth(inputs: DoctorInputs, ram_read: RamRead | None) -> tuple[int, RamBandwidthSource]:
    """The RAM bandwidth a ceiling uses: ``--ram-bandwidth``, else this machine's (measured
    now or saved), else the assumed desktop figure."""
    if inputs.ram_bandwidth_bytes_per_s is not None:
        return inputs.ram_bandwidth_bytes_per_s, "given"
    if ram_read is not None:
        return ram_read.figure.bytes_per_s, ram_read.source
    return DEFAULT_RAM_BANDWIDTH_BYTES_PER_S, "assumed"


def speed_ceiling(
    facts: ModelFacts,
    memory: MemoryEstimate,
    n_cpu_moe: int | None,
    *,
    target: GpuTarget | None,
    ram: tuple[int, RamBandwidthSource],
    n_ubatch: int,
) -> SpeedCeiling:
    """Decode and prompt ceilings for the planned placement."""
    gpu_bytes, cpu_bytes = bytes_per_token(facts, memory)
    ram_bw, ram_source = ram
    gpu_bw = target.bandwidth_bytes_per_s if target else None
    gpu_s = gpu_bytes / gpu_bw if gpu_bw else 0.0
    cpu_s = cpu_bytes / ram_bw
    pcie = target.pcie_bytes_per_s if target else None
    copies = memory.cpu_expert_bytes
    prefill = n_ubatch * pcie / copies if pcie and copies else None
    return SpeedCeiling(
        n_cpu_moe=n_cpu_moe,
        gpu_bytes_per_token=gpu_bytes,
        cpu_bytes_per_token=cpu_bytes,
        gpu_bandwidth_bytes_per_s=gpu_bw,
        ram_bandwidth_bytes_per_s=ram_bw,
        ram_bandwidth_source=ram_source,
        decode_tps=1 / (gpu_s + cpu_s) if gpu_s + cpu_s > 0 else None,
        bottleneck="RAM bandwidth" if cpu_s > 0 and cpu_s >= gpu_s else "GPU memory bandwidth",
        cpu_expert_bytes=copies,
        pcie_bytes_per_s=pcie,
        n_ubatch=n_ubatch,
        prefill_tps=prefill,
    )


def _per_token(c: SpeedCeiling, target: GpuTarget | None) -> str:
    """What each token reads from RAM and from VRAM, and how long that takes."""
    parts = []
    if c.cpu_bytes_per_token:
        assumed = {
            "assumed": " (assumed: run doctor without --no-measure, or pass --ram-bandwidth)",
            "given": " (--ram-bandwidth)",
            "measured": " (measured)",
            "saved": " (measured before)",
        }[c.ram_bandwidth_source]
        ms = 1000 * c.cpu_bytes_per_token / c.ram_bandwidth_bytes_per_s
        parts.append(
            f"{format_bytes(c.cpu_bytes_per_token)} from RAM at "
            f"{gbps(c.ram_bandwidth_bytes_per_s)}{assumed} = {ms:.1f} ms"
        )
    if c.gpu_bytes_per_token and c.gpu_bandwidth_bytes_per_s:
        ms = 1000 * c.gpu_bytes_per_token / c.gpu_bandwidth_bytes_per_s
        parts.append(
            f"{format_bytes(c.gpu_bytes_per_token)} from VRAM at "
            f"{gbps(c.gpu_bandwidth_bytes_per_s)} = {ms:.1f} ms"
        )
    elif c.gpu_bytes_per_token and target is not None:
        parts.append(
            f"{format_bytes(c.gpu_bytes_per_token)} from VRAM, bandwidth unknown (no "
            f"hardware profile for {target.name}: pass --gpu NAME)"
        )
    return "; ".join(parts)


def decode_finding(ceiling: SpeedCeiling, target: GpuTarget | None, ram: RamCheck) -> Finding:
    c = ceiling
    if c.decode_tps is None:
        return Finding(
            check="decode",
            status="warn",
            message=f"decode ceiling unknown: {_per_token(c, target)}",
            fix="pass --gpu with a hardware profile for this card",
        )
    where = "CPU only" if target is None else "this placement"
    if c.n_cpu_moe is not None:
        where = f"--n-cpu-moe {c.n_cpu_moe}"
    message = (
        f"decode ceiling ~{c.decode_tps:.1f} tok/s at {where}, bottleneck: "
        f"{c.bottleneck}; per token {_per_token(c, target)}"
    )
    if ram.status in ("warn", "fail"):
        return Finding(
            check="decode",
            status="warn",
            message=message + "; but RAM is short, so pages come from disk: far slower",
            fix="make the CPU-resident weights fit in free RAM first",
        )
    if c.decode_tps >= SLOW_DECODE_TPS:
        return Finding(check="decode", status="ok", message=message)
    fix = (
        "keep more experts on the GPU (shorter context or q4_0 cache frees VRAM), populate "
        "every memory channel, use -t = physical cores, or a smaller quant"
    )
    if c.bottleneck != "RAM bandwidth":
        fix = "a smaller quant: the GPU's own memory bandwidth is the limit"
    return Finding(check="decode", status="warn", message=message, fix=fix)


def prefill_finding(ceiling: SpeedCeiling, target: GpuTarget | None) -> Finding | None:
    c = ceiling
    if c.prefill_tps is None or c.pcie_bytes_per_s is None or target is None:
        return None
    message = (
        f"prompt ceiling ~{c.prefill_tps:.0f} tok/s at -ub {c.n_ubatch}: each micro-batch "
        f"copies {format_bytes(c.cpu_expert_bytes)} of CPU experts to the GPU over "
        f"{target.pcie_label} ({gbps(c.pcie_bytes_per_s)})"
    )
    if c.n_ubatch < 2048:
        message += f"; ~{c.prefill_tps * 2048 / c.n_ubatch:.0f} tok/s with -ub 2048 -b 2048"
    if c.pcie_bytes_per_s >= 20 * 10**9:
        return Finding(check="prefill", status="ok", message=message)
    return Finding(
        check="prefill",
        status="warn",
        message=message + ": a slow link",
        fix="-ub 2048 -b 2048 copies four times less often; a PCIe 4.0 x16 slot doubles the link",
    )


def model_findings(
    facts: ModelFacts,
    inputs: DoctorInputs,
    gpus: list[GpuInfo],
    host: HostInfo,
    ram_read: RamRead | None = None,
) -> tuple[list[Finding], SpeedCeiling | None]:
    if inputs.devices_error is not None:
        return [
            Finding(
                check="model-fit",
                status="fail",
                message=f"not checked: {inputs.devices_error}",
                fix="fix the device findings above, or give each device's memory with --vram",
            )
        ], None
    target = gpu_target(inputs, gpus)
    try:
        memory, ram, n_cpu_moe, settings = _placement_memory(facts, inputs, target, host)
    except (DoesNotFitError, BadValueError) as exc:
        return [Finding(check="model-fit", status="fail", message=exc.message, fix=exc.hint)], None
    bandwidth = ram_bandwidth(inputs, ram_read)
    if len(inputs.devices) > 1:  # several devices: fit, RAM, and the RAM side's ceiling
        peaks = ", ".join(f"{d.name} {format_bytes(d.total_bytes)}" for d in memory.devices)
        fit = Finding(
            check="model-fit", status="ok", message=f"fits {len(inputs.devices)} devices: {peaks}"
        )
        ceiling = speed_ceiling(
            facts, memory, n_cpu_moe, target=None, ram=bandwidth, n_ubatch=settings.n_ubatch
        )
        found = [fit, ram_model_finding(memory, ram, n_cpu_moe)]
        if ceiling.decode_tps is None:
            return found, None
        decode = decode_finding(ceiling, None, ram)
        decode.message += " (the devices' own reads left out)"
        return [*found, decode], ceiling
    ceiling = speed_ceiling(
        facts, memory, n_cpu_moe, target=target, ram=bandwidth, n_ubatch=settings.n_ubatch
    )
    found = [ram_model_finding(memory, ram, n_cpu_moe), decode_finding(ceiling, target, ram)]
    if (prefill := prefill_finding(ceiling, target)) is not None:
        found.append(prefill)
    return found, ceiling
