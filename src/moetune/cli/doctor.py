"""`moetune doctor`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from moetune.cli.app import app, handle_errors, out, write_json
from moetune.cli.options import DEFAULT_CACHE_TYPE, CacheTypeOpt, CtxIntOpt, JsonOpt, ServerOpt

if TYPE_CHECKING:
    from moetune.llamacpp.info import ServerInfo


@app.command()
@handle_errors
def doctor(
    model: Annotated[
        Path | None, typer.Argument(help="Also check this GGUF model on this machine.")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="Check the model for this hardware profile, e.g. rtx4090.")
    ] = None,
    ram_bandwidth: Annotated[
        float | None, typer.Option(help="Your RAM bandwidth in GB/s (default: assume 60).")
    ] = None,
    ctx: CtxIntOpt = None,
    cache_type: CacheTypeOpt = DEFAULT_CACHE_TYPE,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check this machine for expert offload; with a MODEL, its RAM needs and speed ceiling.

    GPUs, PCIe link, driver, CPU cores, RAM, swap, WSL2 and llama-server; each finding is
    ok / warn / fail with its fix.
    """
    from moetune.core.facts import load_model_facts
    from moetune.core.kvcache import parse_cache_type
    from moetune.errors import BadValueError
    from moetune.hardware import detect_gpu_probe
    from moetune.hardware.host import PsutilHostProbe
    from moetune.jobs.doctor import DoctorInputs, diagnose
    from moetune.llamacpp.process import find_server, server_info
    from moetune.report import to_json
    from moetune.report.doctor import render_doctor
    from moetune.report.payloads import doctor_payload
    from moetune.store.hardware import find_hardware_profile, load_hardware_profiles

    if ram_bandwidth is not None and ram_bandwidth <= 0:
        raise BadValueError(f"--ram-bandwidth must be positive GB/s, got {ram_bandwidth}")
    hardware = load_hardware_profiles()

    def lookup() -> ServerInfo:
        return server_info(find_server(server))

    inputs = DoctorInputs(
        gpus=detect_gpu_probe(), host=PsutilHostProbe(), server=lookup, hardware=hardware,
        gpu_profile=find_hardware_profile(gpu, hardware) if gpu else None,
        ram_bandwidth_bytes_per_s=round(ram_bandwidth * 1e9) if ram_bandwidth else None,
        n_ctx=ctx, cache_type=parse_cache_type(cache_type),
    )  # fmt: skip
    found = diagnose(inputs, load_model_facts(model) if model is not None else None)
    if as_json:
        write_json(to_json(doctor_payload(found)))
        return
    out().print(render_doctor(found))
