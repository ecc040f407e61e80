"""The test rig's second real backend: llama.cpp built with Vulkan (and RPC) by
scripts/build-llama-vulkan.sh into .venv/llama-vulkan/bin, run on Mesa's lavapipe, a Vulkan
device on the CPU. ggml hides CPU-type Vulkan devices unless ``GGML_VK_VISIBLE_DEVICES``
names them; with ``0`` llama-server lists ``Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048
MiB, 2048 MiB free)``. Its ``maxStorageBufferRange`` is 128 MiB: a tensor larger than that
stays in host memory, so the rig's models keep every tensor under it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VULKAN_BIN = ROOT / ".venv" / "llama-vulkan" / "bin"
VISIBLE = {"GGML_VK_VISIBLE_DEVICES": "0"}  # lavapipe, the CPU-type device, as Vulkan0
DEVICE = "Vulkan0"


def vulkan_tool(name: str) -> Path:
    """The Vulkan build's ``name`` (llama-server, llama-fit-params, llama-bench,
    ggml-rpc-server)."""
    return VULKAN_BIN / name


def have_vulkan() -> bool:
    return all(
        vulkan_tool(name).is_file()
        for name in ("llama-server", "llama-fit-params", "ggml-rpc-server")
    )


# What a module of Vulkan tests starts with: the mark, and a skip only where the build is
# absent (scripts/setup-test-env.sh builds it, so CI runs them).
MARKS = [
    pytest.mark.vulkan,
    pytest.mark.skipif(
        not have_vulkan(),
        reason="no Vulkan build of llama.cpp: run scripts/build-llama-vulkan.sh",
    ),
]
