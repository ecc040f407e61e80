"""The runtime overhead of a CUDA device, from public evidence.

A CUDA process holds more device memory than llama.cpp's buffers (weights, KV, compute): the
CUDA context, cuBLAS workspaces and the memory pools' slack. llama.cpp does not report it; its
memory breakdown table (ggml-org/llama.cpp#15860) prints it as ``unaccounted = total - (free +
self)``, which also counts every other program on the card (a desktop). The figures below
measure the process alone (tests/data/public_cuda/ holds each post, quoted):

    card      MiB  llama.cpp build     what                                  source
    RTX 3070  183  6699                nvidia-smi's process (4972) minus     ik_llama.cpp#822
                                       its buffers (4789.01), idle after load
    RTX 4090  451  the PR's (2025-09)  unaccounted at exit, CUDA0 of three   llama.cpp#15860
    RTX 4090  456  the PR's (2025-09)  unaccounted at exit, CUDA1 and CUDA2  llama.cpp#15860

The default is the largest of them rounded up to 64 MiB: 512 MiB. Left out, because the card
held more than the process: the RTX 5090 breakdowns of Qwen3-Coder-Next (2095-2183 MiB
unaccounted, a Windows machine with a display most likely) and tools/fit-params/README.md's
RTX 4090 (3945 MiB unaccounted, 3691 of them held before the run began: it left 254 MiB less
free at exit than its own fit projected, the process's growth after the fit measured). Three
figures on two cards of two generations do not tell a generation, CUDA version or card size
apart, so one default serves every CUDA device; ``--overhead`` gives a device's own. A plan for
a detected GPU budgets its free memory, so a desktop's share is left out already; for a card
named by ``--gpu`` or ``--vram`` the headroom (1.5 GiB by default) covers a desktop.
"""

from __future__ import annotations

from moetune.record import record
from moetune.units import MIB

STEP_MIB = 64  # the default is rounded up to this


@record(frozen=True)
class OverheadFigure:
    """One public measurement of a CUDA process's memory beyond llama.cpp's buffers."""

    gpu: str
    mib: float
    how: str
    source: str


PUBLIC_FIGURES: tuple[OverheadFigure, ...] = (
    OverheadFigure(
        "RTX 3070",
        4972 - 4789.01,
        "nvidia-smi's 4972 MiB for llama-server minus its buffers' 4789.01 MiB, idle after "
        "load (build 6699, driver 580.82.09)",
        "https://github.com/ikawrakow/ik_llama.cpp/issues/822",
    ),
    OverheadFigure(
        "RTX 4090",
        451,
        "unaccounted at exit, CUDA0 of three cards",
        "https://github.com/ggml-org/llama.cpp/pull/15860",
    ),
    OverheadFigure(
        "RTX 4090",
        456,
        "unaccounted at exit, CUDA1 (CUDA2 the same)",
        "https://github.com/ggml-org/llama.cpp/pull/15860",
    ),
)


def _rounded_up(mib: float, step: int = STEP_MIB) -> int:
    return -int(-mib // step) * step


LARGEST_PUBLIC = max(PUBLIC_FIGURES, key=lambda f: f.mib)
DEFAULT_CUDA_OVERHEAD_MIB = _rounded_up(LARGEST_PUBLIC.mib)
DEFAULT_CUDA_OVERHEAD_BYTES = DEFAULT_CUDA_OVERHEAD_MIB * MIB


def default_overhead_why() -> str:
    """How the default was chosen, in a few words for a plan (docs/memory.md says more)."""
    return (
        f"the largest public figure, {LARGEST_PUBLIC.mib:.0f} MiB on an {LARGEST_PUBLIC.gpu}, "
        f"rounded up; --overhead sets yours"
    )
