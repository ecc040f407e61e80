"""The machine ``moetune doctor`` is shown in its tests: an RTX 4090 as llama-server lists it,
the host, the hardware profiles, and running the doctor job on them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from moetune.hardware import GpuInfo, HostInfo
from moetune.jobs.doctor import DoctorInputs, DoctorReport, Finding, diagnose
from moetune.jobs.loader import load_model_facts
from moetune.records.server import Device, ServerInfo
from moetune.store.hardware import load_hardware_profiles
from moetune.units import GIB, MIB

from support.fakes import FakeGpuProbe, FakeHostProbe, fake_gpu
from support.helpers import EXAMPLE_QWEN

QWEN = EXAMPLE_QWEN


RTX_4090 = "NVIDIA GeForce RTX 4090"


HARDWARE = load_hardware_profiles()


def cuda_server() -> ServerInfo:
    device = Device(
        name="CUDA0", description=RTX_4090, total_bytes=24564 * MIB, free_bytes=23000 * MIB
    )
    return ServerInfo(
        path=Path("/usr/bin/llama-server"),
        version="b6500",
        build_number=6500,
        commit="abc1234",
        compiler=None,
        target=None,
        devices=(device,),
    )


def gpu_4090(**changes: Any) -> GpuInfo:
    return replace(fake_gpu(0, 24564 * MIB), **changes)


def host(**changes: Any) -> HostInfo:
    return replace(FakeHostProbe.typical(64 * GIB).host(), **changes)


def run(
    gpus: list[GpuInfo] | None = None,
    the_host: HostInfo | None = None,
    *,
    server: Callable[[], ServerInfo] = cuda_server,
    model: Path | None = None,
    **options: object,
) -> DoctorReport:
    probe = FakeGpuProbe(
        [gpu_4090()] if gpus is None else gpus,
        why=None if gpus != [] else "no NVIDIA driver found (fake)",
    )
    inputs = DoctorInputs(
        gpus=probe,
        host=FakeHostProbe(the_host or host()),
        server=server,
        hardware=HARDWARE,
        **options,  # type: ignore[arg-type]
    )
    return diagnose(inputs, load_model_facts(model) if model else None)


def only(report: DoctorReport, check: str) -> Finding:
    found = [f for f in report.findings if f.check == check]
    assert len(found) == 1, report.findings
    return found[0]
