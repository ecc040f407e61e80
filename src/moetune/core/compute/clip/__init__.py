"""Replay of clip's compute reserve (tools/mtmd/clip.cpp ``reserve_compute_meta``).

clip builds its warm-up graph (models.py) and reserves it with a ggml scheduler over
``[device, CPU]`` (``[CPU]`` without offload; op offload on, no pipeline copies).  The
weights live in the device's buffer, so every op runs there; the graph inputs (``inp_raw``,
positions, window indices and mask) live in the CPU buffer and are copied to the device once.
The same primitives as the text model's replay do the work: ``sched`` passes 1-5 and the
graph copy, and ``alloc``'s ggml-alloc."""

from __future__ import annotations

from collections.abc import Mapping

from moetune.core.compute.alloc import GAlloc
from moetune.core.compute.clip.builder import Builder
from moetune.core.compute.clip.models import GRAPHS, Shape
from moetune.core.compute.params import CPU_BACKEND, DEV, Options
from moetune.core.compute.sched import (
    PASSES,
    Split,
    Splitter,
    emit,
    expand,
    finish,
    first_backend,
    is_view,
    pin,
)

__all__ = ["GRAPHS", "Shape", "replay_clip"]

WeightMap = Mapping[str, tuple[tuple[int, ...], str, int]]


def replay_clip(
    weights: WeightMap, shape: Shape, *, kind: str, flash_attn: bool
) -> tuple[int, int]:
    """The (device, host) compute buffers of one reserve of ``shape``'s warm-up graph.

    ``weights``: name -> (ggml shape, type name, bytes); ``kind``: "cpu" (no device: one CPU
    buffer, returned as host), "rpc" or "cuda" (128-byte alignment)."""
    on_device = kind != "cpu"
    builder = Builder(weights, DEV if on_device else CPU_BACKEND, flash_attn)
    output = GRAPHS[shape.proj](builder, shape)
    nodes, leafs = builder.order(output)
    opts = Options(
        flash_attn=flash_attn,
        type_k="f16",
        type_v="f16",
        kinds=(kind,) if on_device else (),
        op_offload=False,
    )
    for leaf in leafs:
        leaf.backend = CPU_BACKEND
    backends, views = pin(nodes, opts), is_view(nodes)
    for skip_cpu, backward in PASSES:
        expand(backends, views, -1, skip_cpu, backward)
    finish(nodes, backends)
    if not on_device:
        for node in nodes:
            node.backend = CPU_BACKEND
    splitter = Splitter(Split(first_backend(nodes)), {})
    for node in nodes:
        splitter.add(node)
    order = emit(splitter.splits, {}, opts)
    peaks = GAlloc(opts).run(leafs, order)
    return (peaks.get(DEV, 0) if on_device else 0), peaks[CPU_BACKEND]
