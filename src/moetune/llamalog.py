"""Parsing llama.cpp's own memory log lines (printed at ``-lv 4``; match the text, not the prefix).

load_tensors:   CPU_Mapped model buffer size =    15.34 MiB
llama_kv_cache:        CPU KV buffer size =     8.50 MiB
llama_memory_recurrent:        CPU RS buffer size =     0.22 MiB
sched_reserve:        CPU compute buffer size =     7.55 MiB
llama_context:        CPU  output buffer size =     0.00 MiB
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from moetune.units import MIB

BUFFER_KINDS = ("model", "KV", "RS", "compute", "output")
_BUFFER_RE = re.compile(
    r"(?P<device>\S+)\s+(?P<kind>model|KV|RS|compute|output) buffer size\s*=\s*"
    r"(?P<mib>\d+(?:\.\d+)?) MiB"
)
# llama.cpp prints MiB with two decimals: a printed figure is exact to +-0.005 MiB.
PRINTED_MIB_TOLERANCE_BYTES = round(0.005 * MIB)


@dataclass(frozen=True)
class BufferLine:
    device: str  # CPU, CPU_Mapped, CPU_REPACK, CUDA0, CUDA_Host, RPC0[127.0.0.1:50052], ...
    kind: str  # one of BUFFER_KINDS
    mib: float

    @property
    def bytes(self) -> int:
        return round(self.mib * MIB)


def parse_buffers(text: str) -> list[BufferLine]:
    """Every buffer-size line in a llama.cpp log, in order."""
    return [BufferLine(m["device"], m["kind"], float(m["mib"])) for m in _BUFFER_RE.finditer(text)]


def total_mib(lines: Iterable[BufferLine], kind: str, device_prefix: str = "") -> float:
    """Sum of the printed sizes of one kind, on devices whose name starts with the prefix."""
    return sum(b.mib for b in lines if b.kind == kind and b.device.startswith(device_prefix))
