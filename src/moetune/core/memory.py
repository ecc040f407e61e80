"""Pure memory model: ModelFacts x placement x settings -> bytes on the GPU and on the host.

GPU peak = weights placed there + KV/RS cache of the blocks offloaded there + the compute
buffer + a runtime overhead (CUDA context, cuBLAS workspace, memory pools) that llama.cpp does
not report. The overhead default is documented in ``DEFAULT_GPU_OVERHEAD_BYTES``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from moetune.core.compute import estimate_compute
from moetune.core.facts import ModelFacts
from moetune.core.kvcache import estimate_cache
from moetune.core.placement import Placement, WeightSplit, split_weights
from moetune.units import MIB

# What a CUDA process costs beyond llama.cpp's own buffers: the context (~300 MiB on recent
# drivers, more with lazy loading off), cuBLAS workspaces and the memory pool's slack.
# Users override it with --overhead; `moetune run` measures the real figure.
DEFAULT_GPU_OVERHEAD_BYTES = 512 * MIB
DEFAULT_CTX = 32768  # what moetune plans and tunes for when no --ctx is given


def default_n_ctx(training_context: int | None) -> int:
    """The context used when none is given: 32768, or the training context if shorter."""
    return min(DEFAULT_CTX, training_context or DEFAULT_CTX)


class Settings(BaseModel):
    """The llama-server settings that change memory (defaults: llama-server's, FA on)."""

    model_config = ConfigDict(frozen=True)

    n_ctx: int = Field(gt=0)
    type_k: str = "f16"
    type_v: str = "f16"
    n_seq: int = 4  # -np auto: 4 slots sharing one unified cache
    kv_unified: bool = True  # an explicit -np N turns it off (tools/server/server.cpp)
    explicit_parallel: bool = False  # pass -np n_seq to llama-server
    flash_attn: bool = True
    n_ubatch: int = 512
    n_batch: int = 2048
    gpu_overhead_bytes: int = DEFAULT_GPU_OVERHEAD_BYTES
    device_kind: str = "cuda"  # "cuda", or "rpc" for a ggml-rpc-server device (tests)
    # llama-server reserves logits for n_seq rows; llama-fit-params and llama-bench for all.
    all_outputs: bool = False


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
    cache = estimate_cache(
        facts,
        n_ctx=settings.n_ctx,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_seq=settings.n_seq,
        kv_unified=settings.kv_unified,
        flash_attn=settings.flash_attn,
        n_ubatch=settings.n_ubatch,
        n_batch=settings.n_batch,
    )
    gpu_layers = set(weights.gpu_layers)
    all_layers = [layer.index for layer in facts.layers]
    gpu_cache = cache.kv_bytes_for(gpu_layers) + cache.rs_bytes_for(gpu_layers)
    host_layers = [i for i in all_layers if i not in gpu_layers]
    host_cache = cache.kv_bytes_for(host_layers) + cache.rs_bytes_for(host_layers)
    compute = estimate_compute(
        facts,
        n_ctx=settings.n_ctx,
        n_ubatch=settings.n_ubatch,
        flash_attn=settings.flash_attn,
        type_k=settings.type_k,
        type_v=settings.type_v,
        output_on_device=weights.output_on_gpu,
        layers_on_device=len(gpu_layers),
        cpu_expert_blocks=weights.cpu_expert_layers,
        device_kind=settings.device_kind,
        n_batch=settings.n_batch,
        n_seq=settings.n_seq,
        n_outputs=None if settings.all_outputs else settings.n_seq,
    )
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
