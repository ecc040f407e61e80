"""Where each figure a speed forecast times its terms from came from, and the typical figures
of a class, for a device or a machine that has none of its own (docs/speed.md).

A figure is ``published`` (a hardware profile's figure as its vendor or a spec database
gives it), ``derived`` (a profile's figure computed from published specifications, listed in
its ``derived``), ``given`` (``--ram-bandwidth``, a profile file of the user's), ``measured``
or ``saved`` (this machine's RAM read bandwidth, jobs/figures.py), or ``assumed``: the
typical value of its class, where nothing better is known. Every figure has a value, so a
forecast always has numbers; one that rests on derived or assumed figures names them and its
expected error (core/prior.py ``UNCALIBRATED_ERROR``).

The class table is the one place typical figures come from:

- a GPU without a profile (an NVML name moetune does not know, ``--vram`` alone, an RPC or
  Vulkan device): ``GPU_CLASS_TABLE``, the median of the shipped hardware profiles of its
  memory size class (``GPU_CLASSES_GIB``), a figure no profile of the class has the median
  over every shipped profile that has it (``class_figures`` derives it from the profiles;
  scripts/class-figures.py prints it and a test fails when the table drifts from them). Its
  FP16 FLOP/s: its memory bandwidth (its own where known, else its class's) x the class's
  median FP16 FLOP/s per byte/s of memory bandwidth;
- an RPC device's link: its network, taken as 1 Gbit/s Ethernet (``RPC_LINK_BYTES_PER_S``);
- the CPU's FLOP/s: this machine's physical cores x 32 FP32 FLOP per clock (AVX2: two FMA
  units x 8 lanes x 2 FLOP) x an assumed 3.0 GHz (``cpu_flops``);
- the RAM's read bandwidth when it was not measured (``--no-measure``) or given:
  dual-channel DDR5-5600's peak, 2 channels x 8 bytes x 5600 MT/s = 89.6 GB/s
  (``TYPICAL_RAM_BYTES_PER_S``), timed at the typical share of a peak as a given one is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Literal

from moetune.record import HIDDEN, record, require

Provenance = Literal["published", "derived", "given", "measured", "saved", "assumed"]
ESTIMATED: tuple[Provenance, ...] = ("derived", "assumed")  # what a forecast names beside it
Quantity = Literal["memory", "link", "flops", "ram", "cpu"]

GIB = 1024**3
# upper bounds of the GPU classes by memory size (GiB, with 3 % to spare: a 15.9 GiB card is a
# 16 GiB one); above the last: one class
GPU_CLASSES_GIB = (8, 12, 16, 24, 32, 48, 96)
CLASS_SLACK = 1.03

# a CPU core's FP32 rate: AVX2, two FMA units x 8 FP32 lanes x 2 FLOP per FMA per clock
FLOP_PER_CLOCK_PER_CORE = 2 * 8 * 2
ASSUMED_CLOCK_HZ = 3.0e9
ASSUMED_CORES = 8  # where the machine's cores are unknown
# dual-channel DDR5-5600: 2 channels x 8 bytes x 5600 MT/s
TYPICAL_RAM_BYTES_PER_S = 2 * 8 * 5600e6
TYPICAL_RAM = "dual-channel DDR5-5600 peak (2 channels x 8 bytes x 5600 MT/s)"
RPC_LINK_BYTES_PER_S = 1e9 / 8  # 1 Gbit/s Ethernet


@record(frozen=True, kw_only=True)
class FigureSource:
    """One figure a forecast has: its name as the forecast's terms name it (``CUDA0 FLOP/s``,
    ``RAM bandwidth``), its value (bytes/s or FLOP/s), where it came from and on what it
    rests; ``device`` and ``quantity`` (not in the JSON) say which figure of which device."""

    figure: str
    value: float
    provenance: Provenance
    basis: str
    device: int | None = field(default=None, metadata=HIDDEN)  # None: the host's RAM or CPU
    quantity: Quantity = field(default="memory", metadata=HIDDEN)

    def __post_init__(self) -> None:
        require(self, "value", self.value > 0, "positive")


@record(frozen=True, kw_only=True)
class ProfileFigures:
    """What the class table is derived from: one shipped hardware profile's figures."""

    id: str
    vram_bytes: int
    memory_bytes_per_s: float
    link_bytes_per_s: float
    flops_per_s: float | None


@record(frozen=True, kw_only=True)
class ClassFigure:
    """One typical figure of a class: the median over ``profiles`` shipped profiles of the
    class that have it (``every_size``: none of the class has it, so over every size)."""

    value: float
    profiles: int
    every_size: bool = False

    def basis(self, what: str) -> str:
        where = "of every size (none of its class has it)" if self.every_size else "of its class"
        return f"median {what} of the {self.profiles} shipped hardware profiles {where}"


@record(frozen=True, kw_only=True)
class ClassFigures:
    """A GPU class (memory up to ``high_gib``; None: above the last bound): its typical
    memory bandwidth (bytes/s), host link (bytes/s), and FP16 FLOP per byte/s of memory
    bandwidth (a card's FLOP/s follows its bandwidth more closely than its size)."""

    high_gib: int | None
    memory: ClassFigure
    link: ClassFigure
    flop_per_byte: ClassFigure

    @property
    def label(self) -> str:
        bounds = (0, *GPU_CLASSES_GIB)
        if self.high_gib is None:
            return f"GPUs above {GPU_CLASSES_GIB[-1]} GiB"
        low = bounds[GPU_CLASSES_GIB.index(self.high_gib)]
        return (
            f"GPUs of up to {self.high_gib} GiB"
            if not low
            else f"GPUs of {low}-{self.high_gib} GiB"
        )


def gpu_class(vram_bytes: int) -> int | None:
    """The class of a GPU with ``vram_bytes``: its upper bound in GiB (None: above them)."""
    return next((high for high in GPU_CLASSES_GIB if vram_bytes / GIB <= high * CLASS_SLACK), None)


def _ratio(p: ProfileFigures) -> float | None:
    return None if p.flops_per_s is None else p.flops_per_s / p.memory_bytes_per_s


def _sig(value: float, digits: int) -> float:
    return float(f"{value:.{digits}g}")


def _median(inside: Sequence[float | None], every: Sequence[float | None]) -> ClassFigure:
    known = [v for v in inside if v is not None]
    every_size = not known
    if every_size:
        known = [v for v in every if v is not None]
    if not known:
        raise ValueError("no profile has the figure")
    import statistics  # only to derive the table (scripts/class-figures.py, its test)

    return ClassFigure(
        value=_sig(statistics.median(known), 4), profiles=len(known), every_size=every_size
    )


def class_figures(profiles: Sequence[ProfileFigures]) -> tuple[ClassFigures, ...]:
    """The class table derived from the shipped ``profiles``: per class (``GPU_CLASSES_GIB``
    and above), each figure's median over the profiles of the class that have it, else over
    every profile that has it (4 significant digits). ``GPU_CLASS_TABLE`` is what this gives
    (scripts/class-figures.py prints it; a test fails when it drifts)."""
    table = []
    for high in (*GPU_CLASSES_GIB, None):
        inside = [p for p in profiles if gpu_class(p.vram_bytes) == high]
        table.append(
            ClassFigures(
                high_gib=high,
                memory=_median(
                    [p.memory_bytes_per_s for p in inside],
                    [p.memory_bytes_per_s for p in profiles],
                ),
                link=_median(
                    [p.link_bytes_per_s for p in inside], [p.link_bytes_per_s for p in profiles]
                ),
                flop_per_byte=_median([_ratio(p) for p in inside], [_ratio(p) for p in profiles]),
            )
        )
    return tuple(table)


def typical_gpu(vram_bytes: int | None) -> ClassFigures:
    """The typical figures of a GPU of ``vram_bytes`` (None: unknown, the 16 GiB class, the
    middle of the table)."""
    high = gpu_class(vram_bytes) if vram_bytes is not None else 16
    return next(c for c in GPU_CLASS_TABLE if c.high_gib == high)


def cpu_flops(cores: int | None) -> FigureSource:
    """The CPU's FP32 FLOP/s: ``cores`` (this machine's physical cores; None: 8 assumed) x 32
    FLOP per clock (AVX2 FMA) x 3.0 GHz assumed."""
    n = cores if cores and cores > 0 else ASSUMED_CORES
    whose = f"{n} physical cores" if cores else f"{n} cores (assumed)"
    return FigureSource(
        figure="CPU FLOP/s",
        value=n * FLOP_PER_CLOCK_PER_CORE * ASSUMED_CLOCK_HZ,
        provenance="assumed",
        basis=f"{whose} x {FLOP_PER_CLOCK_PER_CORE} FP32 FLOP per clock (AVX2: 2 FMA units x 8 "
        f"lanes x 2) x {ASSUMED_CLOCK_HZ / 1e9:g} GHz (assumed)",
        quantity="cpu",
    )


def typical_ram() -> FigureSource:
    """The RAM read bandwidth where none was measured or given."""
    return FigureSource(
        figure="RAM bandwidth",
        value=TYPICAL_RAM_BYTES_PER_S,
        provenance="assumed",
        basis=f"typical: {TYPICAL_RAM}",
        quantity="ram",
    )


def estimated(sources: Sequence[FigureSource]) -> dict[Provenance, list[str]]:
    """The derived and the assumed figures among ``sources`` by provenance (each once, in
    order); empty where every figure is published, given or measured."""
    found: dict[Provenance, list[str]] = {}
    for source in sources:
        if source.provenance in ESTIMATED and source.figure not in found.get(source.provenance, []):
            found.setdefault(source.provenance, []).append(source.figure)
    return found


# scripts/class-figures.py prints this from the shipped hardware profiles (bytes/s; FLOP per
# byte/s), each figure the median over the profiles counted
GPU_CLASS_TABLE: tuple[ClassFigures, ...] = (
    ClassFigures(
        high_gib=8,
        memory=ClassFigure(value=448000000000.0, profiles=5),
        link=ClassFigure(value=31510000000.0, profiles=5),
        flop_per_byte=ClassFigure(value=144.6, profiles=5),
    ),
    ClassFigures(
        high_gib=12,
        memory=ClassFigure(value=504000000000.0, profiles=11),
        link=ClassFigure(value=31510000000.0, profiles=11),
        flop_per_byte=ClassFigure(value=183.8, profiles=11),
    ),
    ClassFigures(
        high_gib=16,
        memory=ClassFigure(value=608000000000.0, profiles=12),
        link=ClassFigure(value=31510000000.0, profiles=12),
        flop_per_byte=ClassFigure(value=254.1, profiles=12),
    ),
    ClassFigures(
        high_gib=24,
        memory=ClassFigure(value=916100000000.0, profiles=8),
        link=ClassFigure(value=31510000000.0, profiles=8),
        flop_per_byte=ClassFigure(value=155.2, profiles=8),
    ),
    ClassFigures(
        high_gib=32,
        memory=ClassFigure(value=1216000000000.0, profiles=2),
        link=ClassFigure(value=63020000000.0, profiles=2),
        flop_per_byte=ClassFigure(value=268.9, profiles=2),
    ),
    ClassFigures(
        high_gib=48,
        memory=ClassFigure(value=912000000000.0, profiles=4),
        link=ClassFigure(value=31510000000.0, profiles=4),
        flop_per_byte=ClassFigure(value=290.5, profiles=4),
    ),
    ClassFigures(
        high_gib=96,
        memory=ClassFigure(value=2039000000000.0, profiles=3),
        link=ClassFigure(value=63020000000.0, profiles=3),
        flop_per_byte=ClassFigure(value=295.4, profiles=3),
    ),
    ClassFigures(
        high_gib=None,
        memory=ClassFigure(value=4800000000000.0, profiles=1),
        link=ClassFigure(value=63020000000.0, profiles=1),
        flop_per_byte=ClassFigure(value=206.1, profiles=1),
    ),
)
