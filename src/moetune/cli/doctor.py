"""`moetune doctor`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from moetune.cli.app import app, handle_errors
from moetune.cli.options import (
    CacheTypeOpt,
    Command,
    CtxOpt,
    GpuProfileOpt,
    HeadroomOpt,
    JsonOpt,
    RamOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    VramOpt,
)
from moetune.errors import CheckFailedError
from moetune.jobs.names import DEFAULT_CACHE_TYPE, DEFAULT_HEADROOM

if TYPE_CHECKING:
    from moetune.llamacpp.info import ServerInfo


@app.command(cls=Command)
@handle_errors
def doctor(
    model: Annotated[
        Path | None,
        typer.Argument(help="Also check this GGUF model on this machine.", metavar="MODEL"),
    ] = None,
    vram: VramOpt = None,
    gpu: GpuProfileOpt = None,
    rpc: RpcOpt = None,
    ram: RamOpt = None,
    ram_bandwidth: Annotated[
        float | None, typer.Option(help="Your RAM bandwidth in GB/s (default: assume 60).")
    ] = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check this machine for expert offload; with a MODEL, its RAM needs and speed ceiling.

    GPUs, PCIe link, driver, CPU cores, RAM, swap, WSL2 and llama-server; each finding is
    ok / warn / fail with its fix. Exits CHECK_FAILED (12) when a finding fails.
    """
    from moetune.core.facts import load_model_facts
    from moetune.errors import BadValueError
    from moetune.hardware import detect_gpu_probe
    from moetune.hardware.host import PsutilHostProbe
    from moetune.jobs.devices import one_gpu, plan_devices, split_endpoints
    from moetune.jobs.doctor import DoctorInputs, diagnose
    from moetune.llamacpp.process import find_server, server_info
    from moetune.report.render import DoctorView, render
    from moetune.store.hardware import find_hardware_profile, load_hardware_profiles
    from moetune.units import per_device

    if ram_bandwidth is not None and ram_bandwidth <= 0:
        raise BadValueError(f"--ram-bandwidth must be positive GB/s, got {ram_bandwidth}")
    one_gpu(vram, gpu)
    if ctx is not None and ctx.is_max:
        raise BadValueError("doctor checks one context: give --ctx N, e.g. --ctx 32k")
    hardware = load_hardware_profiles()

    endpoints = split_endpoints(rpc)

    def lookup() -> ServerInfo:
        path = find_server(server)
        return server_info(path, rpc=endpoints) if endpoints else server_info(path)

    several = model is not None and ((vram is not None and len(vram) > 1) or bool(endpoints))
    devices = (
        plan_devices(
            vram=vram, rpc=rpc, gpu_index=None, gpu_profile=gpu, overhead=None, server=server
        )
        if several
        else None
    )
    n = len(devices.devices) if devices else 1
    targets = per_device(target_vram, n, "--target-vram")
    headrooms = per_device(headroom, n, "--headroom") or headroom.values
    inputs = DoctorInputs(
        gpus=detect_gpu_probe(),
        host=PsutilHostProbe(),
        server=lookup,
        hardware=hardware,
        gpu_profile=find_hardware_profile(gpu, hardware) if gpu else None,
        vram_bytes=vram[0] if vram is not None and not devices else None,
        ram_bytes=ram,
        ram_bandwidth_bytes_per_s=round(ram_bandwidth * 1e9) if ram_bandwidth else None,
        n_ctx=ctx.tokens if ctx is not None else None,
        cache_type=cache_type,
        target_bytes=targets[0] if targets else None,
        headroom_bytes=headrooms[0],
        devices=devices.devices if devices else (),
        device_targets=tuple(targets or ()),
        device_headrooms=headrooms,
        device_args=devices.device_args if devices else (),
    )
    found = diagnose(inputs, load_model_facts(model) if model is not None else None)
    render(DoctorView(found), as_json)
    if failed := [f.check for f in found.findings if f.status == "fail"]:
        from moetune.report.common import plural

        raise CheckFailedError(
            f"{plural(len(failed), 'check')} failed: {', '.join(failed)}",
            hint=None if as_json else "each with its fix above",
        )
