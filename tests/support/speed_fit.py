"""What the calibration tests share: a machine's figures and the example models' layouts at
an ``--n-cpu-moe`` and a ubatch (the points they fit are made from these)."""

from __future__ import annotations

from functools import cache

from moetune.core.devices import DeviceSpec
from moetune.core.facts import ModelFacts, facts_from_gguf
from moetune.core.placement import Placement
from moetune.core.settings import Settings
from moetune.core.speed import DeviceFigures, MachineFigures, SpeedLayout, placement_layout
from moetune.gguf.split import read_model

from support.helpers import EXAMPLES

QWEN = "Qwen3-30B-A3B-Q4_K_M.header.gguf"  # 48 blocks
FIGURES = MachineFigures(
    devices=(DeviceFigures(memory_bytes_per_s=1e12, link_bytes_per_s=25e9, flops_per_s=100e12),),
    ram_bytes_per_s=60e9,
    cpu_flops_per_s=1e12,
)


@cache
def example_facts(name: str = QWEN) -> ModelFacts:
    return facts_from_gguf(read_model(str(EXAMPLES / name)))


def example_layout(n: int, ubatch: int, name: str = QWEN) -> SpeedLayout:
    """The example model ``name`` with the experts of ``n`` blocks on the CPU, one device."""
    settings = Settings(n_ctx=8192, n_ubatch=ubatch)
    placement = Placement.with_n_cpu_moe(n)
    return placement_layout(example_facts(name), placement, settings, (DeviceSpec(),))
