"""The compute buffers of a placement: the replay (replay.py) at a placement's settings and
devices, with the margin an untaught architecture gets (the package's __init__ says how the
replay follows llama.cpp)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from moetune.core.backends import rules
from moetune.core.compute.params import (
    CPU_BACKEND,
    DEV,
    DEVICE_KINDS,
    LayerHomes,
    Options,
    run_params,
)
from moetune.core.compute.replay import replay_for
from moetune.core.facts import ModelFacts
from moetune.core.settings import OP_OFFLOAD_MIN_BATCH, Settings


class ComputeEstimate(NamedTuple):
    """Predicted compute buffers: each offload device's, and the host's (CPU or CUDA_Host)."""

    devices: tuple[int, ...]
    host_bytes: int

    @property
    def device_bytes(self) -> int:
        """All devices together (one device: its buffer)."""
        return sum(self.devices)


def _options(
    settings_kinds: Sequence[str],
    *,
    flash_attn: bool,
    type_k: str,
    type_v: str,
    op_offload: bool = True,
    n_copies: int = 1,
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH,
) -> Options:
    for kind in settings_kinds:
        if kind not in DEVICE_KINDS:
            raise ValueError(f"device_kind must be one of {DEVICE_KINDS}, got {kind!r}")
    return Options(
        flash_attn=flash_attn,
        type_k=type_k.lower(),
        type_v=type_v.lower(),
        kinds=tuple(settings_kinds),
        op_offload=op_offload and any(rules(kind).op_offload for kind in settings_kinds),
        n_copies=n_copies,
        op_offload_min_batch=op_offload_min_batch,
    )


def estimate_compute(
    facts: ModelFacts,
    *,
    n_ctx: int,
    n_ubatch: int = 512,
    flash_attn: bool = True,
    type_k: str = "f16",
    type_v: str = "f16",
    output_on_device: bool = True,
    layers_on_device: int | None = None,
    cpu_expert_layers: int = 0,
    op_offload: bool = True,
    device_kind: str = "cuda",
    cpu_expert_blocks: Iterable[int] | None = None,
    n_batch: int = 2048,
    n_seq: int = 4,
    n_outputs: int | None = 4,
    op_offload_min_batch: int = OP_OFFLOAD_MIN_BATCH,
) -> ComputeEstimate:
    """Predict the compute buffers llama.cpp reserves for one offload device and the host.

    ``layers_on_device``: how many of the LAST blocks sit on the device (None = all); llama.cpp's
    ``-ngl K`` means ``layers_on_device = K - 1`` and ``output_on_device = K >= 1``.
    ``cpu_expert_layers``: ``--n-cpu-moe N`` (routed experts of blocks 0..N-1 on the CPU), or
    give the exact blocks in ``cpu_expert_blocks`` (e.g. ``--fit``'s last blocks).
    ``device_kind``: "cuda" (op offload of CPU weights for batches >= 32, 128-byte alignment,
    CUDA fusions), "vulkan" (the same op offload) or "rpc"/"cpu-like" (no op offload:
    core/backends.py).  ``n_seq``: parallel sequences
    (llama-server: 4; llama-fit-params, llama-bench: 1).  ``n_outputs``: the most logits rows
    per ubatch (llama-server: n_seq; None = every token, as llama-fit-params and llama-bench).
    ``op_offload_min_batch``: GGML_OP_OFFLOAD_MIN_BATCH (above the ubatch: no weight copies).
    """
    run = run_params(n_ctx, n_ubatch, n_batch, n_seq, n_outputs)
    blocks = range(cpu_expert_layers) if cpu_expert_blocks is None else cpu_expert_blocks
    n_dev = facts.n_layers if layers_on_device is None else min(layers_on_device, facts.n_layers)
    placement = LayerHomes.single(
        facts.n_layers, facts.n_layers - max(n_dev, 0), blocks, output_on_device, facts.tensors
    )
    options = _options(
        (device_kind,),
        flash_attn=flash_attn,
        type_k=type_k,
        type_v=type_v,
        op_offload=op_offload,
        op_offload_min_batch=op_offload_min_batch,
    )
    peaks = replay_for(facts, run, options).peaks(placement, facts)
    return _margin(facts, ComputeEstimate(devices=(peaks[DEV],), host_bytes=peaks[CPU_BACKEND]))


def compute_for(
    facts: ModelFacts,
    settings: Settings,
    *,
    homes: tuple[int, ...],
    moves: frozenset[tuple[str, int]],
    kinds: Sequence[str],
    pipeline: bool = False,
) -> ComputeEstimate:
    """The compute buffers llama-server reserves at ``settings`` for a placement over devices
    of ``kinds``: each layer's home (a device index, else the CPU; the output layer last),
    and the expert tensors that live elsewhere than their layer. ``pipeline``: llama.cpp's
    pipeline parallelism is on (4 copies of every split input)."""
    run = run_params(
        settings.n_ctx,
        settings.n_ubatch,
        settings.n_batch,
        settings.n_seq,
        None if settings.all_outputs else settings.n_outputs,
    )
    options = _options(
        kinds,
        flash_attn=settings.flash_attn,
        type_k=settings.type_k,
        type_v=settings.type_v,
        n_copies=4 if pipeline else 1,
        op_offload_min_batch=settings.offload_min_batch,
    )
    placement = LayerHomes(homes, moves)
    peaks = replay_for(facts, run, options).peaks(placement, facts)
    return _margin(
        facts,
        ComputeEstimate(
            devices=tuple(peaks[i] for i in range(len(kinds))), host_bytes=peaks[CPU_BACKEND]
        ),
    )


# An architecture moetune has not been taught (no known record in core/archs.py) is replayed
# with the generic block; its buffers get half as much again, and at least 64 MiB, on top.
UNTAUGHT_MARGIN_SHARE, UNTAUGHT_MARGIN_BYTES = 0.5, 64 * 1024 * 1024


def untaught_margin(n_bytes: int) -> int:
    """The generic block's peak plus the safety margin (0 stays 0: an unused buffer)."""
    if n_bytes <= 0:
        return n_bytes
    return n_bytes + max(int(n_bytes * UNTAUGHT_MARGIN_SHARE), UNTAUGHT_MARGIN_BYTES)


def _margin(facts: ModelFacts, found: ComputeEstimate) -> ComputeEstimate:
    if facts.dims.known:
        return found
    return ComputeEstimate(
        devices=tuple(untaught_margin(b) for b in found.devices),
        host_bytes=untaught_margin(found.host_bytes),
    )
