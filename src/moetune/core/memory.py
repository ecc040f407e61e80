"""Pure memory model: ModelFacts x placement x settings x devices -> bytes per device and on
the host.

A device's peak = weights placed there + the KV/RS cache of the layers on it + its compute
buffer + a runtime overhead (CUDA context, cuBLAS workspace, memory pools) that llama.cpp does
not report (``DeviceSpec.overhead_bytes``; ``DEFAULT_GPU_OVERHEAD_BYTES`` on CUDA). The
``gpu_*`` figures add up every device; one device: its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, computed_field

from moetune.core.compute import compute_for
from moetune.core.devices import DeviceSpec, single_device
from moetune.core.facts import ModelFacts
from moetune.core.kvcache import cache_for
from moetune.core.placement import CPU, SKIPPED, Placement, WeightSplit, split_weights
from moetune.core.settings import (
    DEFAULT_CTX,
    DEFAULT_GPU_OVERHEAD_BYTES,
    Settings,
    default_n_ctx,
)

__all__ = [
    "DEFAULT_CTX",
    "DEFAULT_GPU_OVERHEAD_BYTES",
    "DeviceMemory",
    "MemoryEstimate",
    "Settings",
    "default_n_ctx",
    "estimate",
    "estimate_from_split",
]


class DeviceMemory(BaseModel):
    """Predicted bytes on one device."""

    name: str
    weights_bytes: int
    expert_bytes: int
    kv_bytes: int
    compute_bytes: int
    overhead_bytes: int
    correction_bytes: int = 0  # llama.cpp's dry run found this much more (or less)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.compute_bytes + self.overhead_bytes
                + self.correction_bytes)  # fmt: skip


class MemoryEstimate(BaseModel):
    """Predicted bytes per device for one placement (``gpu_*``: every device together)."""

    gpu_weights_bytes: int
    gpu_expert_bytes: int
    gpu_kv_bytes: int
    gpu_compute_bytes: int
    gpu_overhead_bytes: int
    cpu_weights_bytes: int
    cpu_expert_bytes: int
    host_kv_bytes: int
    host_compute_bytes: int
    n_ctx: int
    cache_exact: bool
    devices: list[DeviceMemory] = []

    @property
    def gpu_bytes(self) -> int:
        return (
            self.gpu_weights_bytes
            + self.gpu_kv_bytes
            + self.gpu_compute_bytes
            + self.gpu_overhead_bytes
        )

    @property
    def host_bytes(self) -> int:
        return self.cpu_weights_bytes + self.host_kv_bytes + self.host_compute_bytes

    def over(self, budgets: Sequence[int]) -> list[int]:
        """The devices whose predicted peak is above their budget."""
        return [i for i, d in enumerate(self.devices) if d.total_bytes > budgets[i]]


def pipeline_parallel(weights: WeightSplit, placement_has_overrides: bool) -> bool:
    """llama.cpp turns pipeline parallelism on (src/llama-context.cpp) with several devices,
    every layer offloaded, layer split, the KV cache offloaded and no tensor overrides; CUDA
    and RPC devices both have the async compute and events it needs."""
    loaded = [home for home in weights.homes if home != SKIPPED]
    return weights.n_devices > 1 and not placement_has_overrides and CPU not in loaded


def estimate_from_split(
    facts: ModelFacts, weights: WeightSplit, settings: Settings,
    devices: Sequence[DeviceSpec] | None = None, *, pipeline: bool = False,
) -> MemoryEstimate:  # fmt: skip
    """The estimate for an already computed weight split (lets the planner skip regexes)."""
    specs = tuple(devices) if devices is not None else single_device(settings)
    cache = cache_for(facts, settings)
    host_layers = [layer.index for layer in facts.layers if weights.homes[layer.index] < 0]
    compute = compute_for(facts, settings, homes=weights.homes, moves=weights.moves,
                          kinds=[d.kind for d in specs], pipeline=pipeline)  # fmt: skip
    per_device: list[DeviceMemory] = []
    for index, spec in enumerate(specs):
        layers = weights.layers_on(index)
        used = bool(layers) or weights.homes[-1] == index or weights.device_bytes[index] > 0
        per_device.append(DeviceMemory(
            name=spec.name, weights_bytes=weights.device_bytes[index],
            expert_bytes=weights.device_expert_bytes[index],
            kv_bytes=cache.kv_bytes_for(layers) + cache.rs_bytes_for(layers),
            compute_bytes=compute.devices[index] if used else 0,
            overhead_bytes=spec.overhead_bytes if used else 0,
            correction_bytes=spec.correction_bytes if used else 0,
        ))  # fmt: skip
    return MemoryEstimate(
        gpu_weights_bytes=weights.gpu_bytes,
        gpu_expert_bytes=weights.gpu_expert_bytes,
        gpu_kv_bytes=sum(d.kv_bytes for d in per_device),
        gpu_compute_bytes=sum(d.compute_bytes for d in per_device),
        gpu_overhead_bytes=sum(d.overhead_bytes + d.correction_bytes for d in per_device),
        cpu_weights_bytes=weights.cpu_bytes,
        cpu_expert_bytes=weights.cpu_expert_bytes,
        host_kv_bytes=cache.kv_bytes_for(host_layers) + cache.rs_bytes_for(host_layers),
        host_compute_bytes=compute.host_bytes,
        n_ctx=cache.n_ctx,
        cache_exact=cache.exact,
        devices=per_device,
    )


def estimate(facts: ModelFacts, placement: Placement, settings: Settings,
             devices: Sequence[DeviceSpec] | None = None) -> MemoryEstimate:  # fmt: skip
    """Predicted peak bytes on each device and on the host for ``placement`` at ``settings``
    over ``devices`` (default: the one device ``settings`` describes)."""
    specs = tuple(devices) if devices is not None else single_device(settings)
    free = [d.free_bytes or d.total_bytes or 0 for d in specs]
    weights = split_weights(facts, placement, len(specs), free if all(free) else ())
    pipeline = pipeline_parallel(weights, bool(placement.overrides))
    return estimate_from_split(facts, weights, settings, specs, pipeline=pipeline)
