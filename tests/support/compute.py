"""The compute tests' figures: an estimate's device and host compute buffers in MiB, as
llama.cpp prints them (two decimals)."""

from __future__ import annotations

from moetune.core.compute.estimate import ComputeEstimate
from moetune.units import MIB


def mib(estimate: ComputeEstimate) -> tuple[float, float]:
    return round(estimate.device_bytes / MIB, 2), round(estimate.host_bytes / MIB, 2)
