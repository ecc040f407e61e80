"""`moetune doctor`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from moetune.cli.base import Argument, Option, command, handle_errors
from moetune.cli.options import (
    CacheTypeOpt,
    CtxOpt,
    ForceOpt,
    GpuProfileOpt,
    HeadroomOpt,
    JsonOpt,
    RamBandwidthOpt,
    RamOpt,
    RpcOpt,
    ServerOpt,
    TargetVramOpt,
    VramOpt,
)
from moetune.errors import CheckFailedError
from moetune.jobs.names import DEFAULT_CACHE_TYPE, DEFAULT_HEADROOM


@command()
@handle_errors
def doctor(
    model: Annotated[
        Path | None,
        Argument(help="Also check this GGUF model on this machine.", metavar="MODEL"),
    ] = None,
    vram: VramOpt = None,
    gpu: GpuProfileOpt = None,
    rpc: RpcOpt = None,
    ram: RamOpt = None,
    ram_bandwidth: RamBandwidthOpt = None,
    ctx: CtxOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    target_vram: TargetVramOpt = None,
    force: ForceOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,  # type: ignore[assignment]
    server: ServerOpt = None,
    measure: Annotated[
        bool,
        Option(
            "--measure/--no-measure",
            help="Measure the RAM read bandwidth (about a second) and save it; "
            "--no-measure uses the one saved for this machine.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Check this machine for expert offload; with a MODEL, its RAM needs and speed ceiling.

    GPUs, PCIe link, driver, CPU cores, RAM and its read bandwidth, swap, WSL2 and
    llama-server; each finding is ok / warn / fail with its fix. Exits CHECK_FAILED (12)
    when a finding fails.
    """
    from moetune.errors import BadValueError
    from moetune.jobs.devices import one_gpu
    from moetune.jobs.doctor import doctor_report
    from moetune.report.render import DoctorView, render

    one_gpu(vram, gpu)
    if ctx is not None and ctx.is_max:
        raise BadValueError("doctor checks one context: give --ctx N, e.g. --ctx 32k")
    found = doctor_report(
        model,
        vram=vram,
        gpu=gpu,
        rpc=rpc,
        ram=ram,
        ram_bandwidth=ram_bandwidth.bytes_per_s if ram_bandwidth else None,
        ctx=ctx,
        cache_type=cache_type,
        target_vram=target_vram,
        headroom=headroom,
        server=server,
        measure=measure,
        force=force,
    )
    render(DoctorView(found), as_json)
    if failed := [f.check for f in found.findings if f.status == "fail"]:
        from moetune.report.common import plural

        raise CheckFailedError(
            f"{plural(len(failed), 'check')} failed: {', '.join(failed)}",
            hint=None if as_json else "each with its fix above",
        )
