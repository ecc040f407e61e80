"""Pure memory model: ModelFacts x placement x settings -> bytes on the GPU and on the host.

GPU peak = weights placed there + KV/RS cache of the blocks offloaded there + the compute
buffer + a runtime overhead (CUDA context, cuBLAS workspace, memory pools) that llama.cpp does
not report. The overhead default is documented in ``DEFAULT_GPU_OVERHEAD_BYTES``.
"""

from __future__ import annotations

from pydantic import BaseModel

from moetune.core.compute import compute_for
from moetune.core.facts import ModelFacts
from moetune.core.kvcache import cache_for
from moetune.core.placement import Placement, WeightSplit, split_weights
from moetune.core.settings import (
    DEFAULT_CTX,
    DEFAULT_GPU_OVERHEAD_BYTES,
    Settings,
    default_n_ctx,
)

__all__ = [
    "DEFAULT_CTX",
    "DEFAULT_GPU_OVERHEAD_BYTES",
    "MemoryEstimate",
    "Settings",
    "default_n_ctx",
    "estimate",
    "estimate_from_split",
]


class MemoryEstimate(BaseModel):
    """Predicted bytes per device for one placement."""

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


def estimate_from_split(
    facts: ModelFacts, weights: WeightSplit, settings: Settings
) -> MemoryEstimate:
    """The estimate for an already computed weight split (lets the planner skip regexes)."""
    cache = cache_for(facts, settings)
    gpu_layers = set(weights.gpu_layers)
    gpu_cache = cache.kv_bytes_for(gpu_layers) + cache.rs_bytes_for(gpu_layers)
    host_layers = [layer.index for layer in facts.layers if layer.index not in gpu_layers]
    host_cache = cache.kv_bytes_for(host_layers) + cache.rs_bytes_for(host_layers)
    compute = compute_for(facts, settings, output_on_device=weights.output_on_gpu,
                          layers_on_device=len(gpu_layers),
                          cpu_expert_blocks=weights.cpu_expert_layers)  # fmt: skip
    any_gpu = bool(gpu_layers) or weights.output_on_gpu
    return MemoryEstimate(
        gpu_weights_bytes=weights.gpu_bytes,
        gpu_expert_bytes=weights.gpu_expert_bytes,
        gpu_kv_bytes=gpu_cache,
        gpu_compute_bytes=compute.device_bytes if any_gpu else 0,
        gpu_overhead_bytes=settings.gpu_overhead_bytes if any_gpu else 0,
        cpu_weights_bytes=weights.cpu_bytes,
        cpu_expert_bytes=weights.cpu_expert_bytes,
        host_kv_bytes=host_cache,
        host_compute_bytes=compute.host_bytes,
        n_ctx=cache.n_ctx,
        cache_exact=cache.exact,
    )


def estimate(facts: ModelFacts, placement: Placement, settings: Settings) -> MemoryEstimate:
    """Predicted peak bytes on the GPU and on the host for ``placement`` at ``settings``."""
    return estimate_from_split(facts, split_weights(facts, placement), settings)
