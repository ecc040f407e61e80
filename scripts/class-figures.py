"""Print core/figures.py's GPU class table as derived from the shipped hardware profiles
(src/moetune/profiles_data): per memory-size class, the median memory bandwidth, host link
and FP16 FLOP per byte/s of memory bandwidth. tests/unit/test_speed_figures.py fails when
the table in core/figures.py differs; paste this output there after changing a profile.

    .venv/bin/python scripts/class-figures.py
"""

from __future__ import annotations

from moetune.core.figures import ClassFigure, ProfileFigures, class_figures
from moetune.store.hardware import shipped_hardware_profiles


def shipped() -> list[ProfileFigures]:
    """What the table is derived from: each shipped profile's figures."""
    return [
        ProfileFigures(
            id=p.id,
            vram_bytes=p.vram_bytes,
            memory_bytes_per_s=p.memory_bandwidth_bytes_per_s,
            link_bytes_per_s=p.pcie_bytes_per_s,
            flops_per_s=p.flops_per_s,
        )
        for p in shipped_hardware_profiles()
    ]


def _figure(figure: ClassFigure) -> str:
    every = ", every_size=True" if figure.every_size else ""
    return f"ClassFigure(value={figure.value!r}, profiles={figure.profiles}{every})"


def main() -> None:
    print("GPU_CLASS_TABLE = (")
    for row in class_figures(shipped()):
        print("    ClassFigures(")
        print(f"        high_gib={row.high_gib},")
        print(f"        memory={_figure(row.memory)},")
        print(f"        link={_figure(row.link)},")
        print(f"        flop_per_byte={_figure(row.flop_per_byte)},")
        print("    ),")
    print(")")


if __name__ == "__main__":
    main()
