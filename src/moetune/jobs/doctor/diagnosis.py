"""Every check in order (``diagnose``, over the probes it is given) and ``moetune doctor``'s
job (``doctor_report``: the live probes and the options turned into a diagnosis)."""

from __future__ import annotations

from pathlib import Path

from moetune.core.backends import kind_of
from moetune.core.facts import ModelFacts
from moetune.errors import NoGpuError, ServerFailedError, ServerNotFoundError
from moetune.jobs.doctor.findings import DoctorInputs, DoctorReport
from moetune.jobs.doctor.gpus import driver_finding, gpu_findings, pcie_finding, pcie_link
from moetune.jobs.doctor.host import cpu_finding, ram_finding, swap_finding, wsl_finding
from moetune.jobs.doctor.model import model_findings
from moetune.jobs.doctor.ram_read import ram_read_bandwidth
from moetune.jobs.doctor.server import device_findings, device_links, rpc_findings, server_finding
from moetune.records.server import ServerInfo
from moetune.store.hardware import find_hardware_profile, match_detected, scan_hardware_profiles
from moetune.units import Ctx, Sizes, format_bytes, per_device


def diagnose(inputs: DoctorInputs, facts: ModelFacts | None = None) -> DoctorReport:
    """Every finding for this machine, and for ``facts`` on it when given."""
    gpus, host = inputs.gpus.gpus(), inputs.host.host()
    hardware = list(inputs.hardware)
    described = None
    if inputs.gpu_profile is not None:
        described = f"--gpu {inputs.gpu_profile.id}"
    elif inputs.vram_bytes is not None:
        described = f"--vram {format_bytes(inputs.vram_bytes)}"
    server, info = server_finding(inputs.server)
    # devices NVML does not see: another backend's (Vulkan0, ROCm0), not RPC's or CUDA's
    others = [
        d.name
        for d in (info.devices if info else ())
        if kind_of(d.name) != "rpc" and not d.name.startswith("CUDA")
    ]
    findings = gpu_findings(gpus, inputs.gpus.why, described, inputs.rpc_endpoints, others)
    links = [pcie_link(gpu) for gpu in gpus]
    for gpu, link in zip(gpus, links, strict=True):
        profile = match_detected(gpu.name, gpu.vram_total_bytes, hardware)
        findings.append(pcie_finding(link, profile))
    ram_read, bandwidth = ram_read_bandwidth(inputs, host)
    optional = [
        driver_finding(gpus),
        cpu_finding(host),
        ram_finding(host),
        bandwidth,
        swap_finding(host),
        wsl_finding(host),
    ]
    findings += [f for f in optional if f is not None]
    findings.append(server)
    findings += device_findings(info)
    findings += rpc_findings(inputs.rpc_endpoints, info, inputs.rpc_reachable)
    ceiling = None
    if facts is not None:
        more, ceiling = model_findings(facts, inputs, gpus, host, ram_read)
        findings += more
    model = facts.paths[0] if facts is not None else None
    return DoctorReport(
        findings=findings,
        gpus=gpus,
        host=host,
        server=info,
        model=model,
        ceiling=ceiling,
        pcie=links,
        device_links=device_links(info),
        ram_read=ram_read,
    )


def doctor_report(
    model: Path | None,
    *,
    vram: Sizes | None,
    gpu: str | None,
    rpc: str | None,
    ram: int | None,
    ram_bandwidth: int | None,
    ctx: Ctx | None,
    cache_type: str,
    target_vram: Sizes | None,
    headroom: Sizes,
    server: str | None,
    measure: bool = True,
    force: bool = False,
) -> DoctorReport:
    """``moetune doctor``: this machine as found here (GPUs, host, its RAM read bandwidth,
    llama-server), what the options describe instead (``--vram``, ``--gpu``, ``--ram``...),
    and ``model`` on it. ``measure=False`` (``--no-measure``): the saved RAM figure."""
    from moetune.hardware import detect_gpu_probe
    from moetune.hardware.host import LiveHostProbe
    from moetune.hardware.membw import StreamingReadProbe
    from moetune.jobs.devices import plan_devices, split_endpoints
    from moetune.jobs.loader import load_model_facts
    from moetune.jobs.verify import reachable
    from moetune.llamacpp.process import find_server, server_info
    from moetune.store.paths import machine_file

    hardware, _ = scan_hardware_profiles()  # `profiles list` names the broken ones
    endpoints = split_endpoints(rpc)

    def lookup() -> ServerInfo:
        path = find_server(server)
        return server_info(path, rpc=endpoints) if endpoints else server_info(path)

    several = model is not None and ((vram is not None and len(vram) > 1) or bool(endpoints))
    devices, devices_error = None, None
    if several:
        try:
            devices = plan_devices(
                vram=vram, rpc=rpc, gpu_index=None, gpu_profile=gpu, overhead=None, server=server
            )
        except (NoGpuError, ServerFailedError, ServerNotFoundError) as exc:  # found below
            devices_error = f"the devices are not known ({exc.message.splitlines()[0]})"
    n = len(devices.devices) if devices else 1
    targets = per_device(target_vram, n, "--target-vram")
    headrooms = per_device(headroom, n, "--headroom") or headroom.values
    inputs = DoctorInputs(
        gpus=detect_gpu_probe(),
        host=LiveHostProbe(),
        server=lookup,
        hardware=hardware,
        gpu_profile=find_hardware_profile(gpu) if gpu else None,
        vram_bytes=vram[0] if vram is not None and not devices else None,
        ram_bytes=ram,
        ram_bandwidth_bytes_per_s=ram_bandwidth,
        ram_probe=StreamingReadProbe() if measure else None,
        machine_file=machine_file(),
        n_ctx=ctx.tokens if ctx is not None else None,
        cache_type=cache_type,
        target_bytes=targets[0] if targets else None,
        force=force,
        headroom_bytes=headrooms[0],
        devices=devices.devices if devices else (),
        device_targets=tuple(targets or ()),
        device_headrooms=headrooms,
        device_args=devices.device_args if devices else (),
        rpc_endpoints=endpoints,
        rpc_reachable=reachable,
        devices_error=devices_error,
    )
    return diagnose(inputs, load_model_facts(model) if model is not None else None)
