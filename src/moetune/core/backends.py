"""The rules of each llama.cpp backend that change a plan, one record per device kind, with
their evidence (llama.cpp build 11434).

- ``cuda``: ggml-cuda, which HIP (ROCm) and MUSA builds compile too: their devices are named
  ``ROCm0`` and ``MUSA0`` (ggml-cuda/vendors/hip.h, musa.h) and take the CUDA rules until
  evidence says otherwise. ``ggml_backend_cuda_device_offload_op``: a batch of at least
  ``GGML_OP_OFFLOAD_MIN_BATCH`` (32) runs an op on host weights on the device, the weights
  copied into its compute buffer; 128-byte alignment, row padding of quantized tensors,
  flash attention's F16 copies of K/V and graph_optimize's fusion dependencies
  (core/compute/ follows them). Runtime overhead: core/overhead.py (512 MiB).
- ``vulkan``: ggml-vulkan. ``ggml_backend_vk_device_offload_op`` is CUDA's rule (the same
  ``op_offload_min_batch_size`` from ``GGML_OP_OFFLOAD_MIN_BATCH``, the same batch size per
  op); ``ggml_backend_vk_buffer_type_get_alloc_size`` is the tensor's bytes (no padding);
  the alignment is the device's ``minStorageBufferOffsetAlignment`` (16 on Mesa's lavapipe,
  measured with vulkaninfo; a few bytes per tensor on any driver). A tensor larger than the
  device's ``maxStorageBufferRange`` stays in host memory (lavapipe's is 128 MiB).
  No public figure of a Vulkan process's memory beyond llama.cpp's buffers: 0 by default,
  ``--overhead`` gives one.
- ``rpc``: ggml-rpc has no ``offload_op``; 32-byte alignment (the CPU's); the server's own
  process lives outside the device's buffers (0).
- ``cpu-like``: any other device llama.cpp lists (Metal, SYCL, CANN, ...), planned without op
  offload or overhead until its rules are taught here.
"""

from __future__ import annotations

from typing import NamedTuple

from moetune.core.overhead import DEFAULT_CUDA_OVERHEAD_BYTES
from moetune.units import MIB


class Backend(NamedTuple):
    """What a plan needs to know of one kind of device."""

    kind: str
    prefixes: tuple[str, ...]  # the device names llama.cpp gives (CUDA0, ROCm0, Vulkan0)
    op_offload: bool  # runs ops on host weights for a big batch (weights copied over)
    alignment: int  # its buffers' alignment in bytes
    cuda_buffers: bool  # ggml-cuda's row padding, FA F16 copies and fusion dependencies
    overhead_bytes: int  # the runtime overhead counted when none is given


BACKENDS: tuple[Backend, ...] = (
    Backend("cuda", ("CUDA", "ROCm", "MUSA"), True, 128, True, DEFAULT_CUDA_OVERHEAD_BYTES),
    Backend("vulkan", ("Vulkan",), True, 16, False, 0),
    Backend("rpc", ("RPC",), False, 32, False, 0),
    Backend("cpu-like", (), False, 32, False, 0),
)
KINDS = tuple(b.kind for b in BACKENDS)
_BY_KIND = {b.kind: b for b in BACKENDS}

# Mesa's lavapipe (llvmpipe): vulkaninfo's maxStorageBufferRange, 134217728 bytes.
LAVAPIPE_MAX_STORAGE_BUFFER_BYTES = 128 * MIB


def rules(kind: str) -> Backend:
    """The record of ``kind`` (ValueError for a kind no record has)."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"device kind must be one of {KINDS}, got {kind!r}") from None


def kind_of(device_name: str) -> str:
    """The kind of a device llama.cpp names ``device_name`` (``ROCm0`` is ``cuda``)."""
    for record in BACKENDS:
        if any(device_name.startswith(prefix) for prefix in record.prefixes):
            return record.kind
    return "cpu-like"


def rules_note(kind: str, device_name: str) -> str:
    """A line for a plan where the rules it used are another backend's ("" where none)."""
    if kind == "cuda" and not device_name.startswith("CUDA") and device_name:
        return f"{device_name}: planned with the CUDA rules (ggml's HIP/MUSA builds run its code)"
    return ""
