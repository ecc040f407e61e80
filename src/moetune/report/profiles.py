"""`moetune profiles`: hardware and tuned profiles, as tables, in full, and as JSON."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from moetune.core.command import shell_join
from moetune.errors import ProfileError
from moetune.report.common import fitted, fmt, label_grid, new_table, shell_line, short_path
from moetune.store.hardware import HardwareProfile
from moetune.store.tuned import TunedProfile, retune_command
from moetune.units import format_bytes, format_speed

Tuned = list[TunedProfile | ProfileError]


def _placement(profile: TunedProfile) -> str:
    if profile.placement.override_tensor:
        return "-ot " + ",".join(profile.placement.override_tensor)
    return f"--n-cpu-moe {profile.placement.n_cpu_moe or 0}"


def _devices(profile: TunedProfile) -> str:
    """Every device it was tuned on (the table's GPU column): one, or ``A + B``."""
    return " + ".join(d.name for d in profile.device_set)


def _tflops(profile: HardwareProfile) -> str:
    """The FP16 figure, ``*`` after one derived from published specifications."""
    if profile.fp16_tflops is None:
        return "-"
    return f"{profile.fp16_tflops:g}" + ("*" if "fp16_tflops" in profile.derived else "")


def hardware_table(profiles: list[HardwareProfile]) -> Table:
    table = new_table(
        "hardware profiles (moetune plan --gpu ID; FP16: dense matrix TFLOPS, * derived)",
        ("id", "GPU", "VRAM", "bandwidth", "PCIe", "FP16"),
        right=("VRAM", "bandwidth", "FP16"),
        fold=("GPU",),
    )
    for p in profiles:
        name = p.name.removeprefix("NVIDIA ").removeprefix("GeForce ")
        table.add_row(
            p.id,
            name,
            format_bytes(p.vram_bytes),
            f"{p.memory_bandwidth_gb_s:g} GB/s",
            f"{p.pcie_gen}.0 x{p.pcie_lanes}",
            _tflops(p),
        )
    return table


def _last_run(profile: TunedProfile) -> str:
    return (profile.confirmed_at or profile.tuned_at)[:16].replace("T", " ")


def tuned_table(entries: Tuned, root: str) -> Table:
    table = new_table(
        f"tuned profiles ({short_path(root)})",
        ("name", "GPU", "placement", "peak", "tok/s", "last run"),
        right=("peak", "tok/s"),
        fold=("GPU",),
    )
    for entry in entries:
        if isinstance(entry, ProfileError):
            table.add_row(Text("broken", style="red"), Text(entry.message, style="red"))
            continue
        table.add_row(
            entry.name,
            _devices(entry),
            _placement(entry),
            format_bytes(entry.measured.vram_bytes),
            fmt(entry.measured.decode_tps, ".1f"),
            _last_run(entry),
        )
    return table


def tuned_list(entries: Tuned, root: str) -> RenderableType:
    """The tuned profiles for a narrow terminal: the name on its own line, the rest under it."""
    lines: list[RenderableType] = [Text(f"tuned profiles ({short_path(root)})")]
    for entry in entries:
        if isinstance(entry, ProfileError):
            lines.append(Text(f"broken: {entry.message}", style="red"))
            continue
        m = entry.measured
        lines.append(Text(entry.name, style="bold"))
        about = Text(
            f"{_devices(entry)}, {_placement(entry)}, {format_bytes(m.vram_bytes)}, "
            f"{fmt(m.decode_tps, '.1f')} tok/s, {_last_run(entry)}"
        )
        lines.append(Padding(about, (0, 0, 0, 4)))
    return Group(*lines)


def render_profiles_list(
    hardware: list[HardwareProfile], tuned: Tuned, root: str, hardware_broken: list[ProfileError]
) -> RenderableType:
    users = {p.source for p in hardware if not p.shipped}
    note = "yours: " + ", ".join(sorted(users)) if users else "add yours in $MOETUNE_HOME/hardware/"
    parts: list[RenderableType] = [hardware_table(hardware), Text(note, style="dim")]
    parts += [Text(f"broken: {e.message}", style="red") for e in hardware_broken]
    if tuned:
        parts.append(fitted(tuned_table(tuned, root), tuned_list(tuned, root)))
    else:
        parts.append(
            Text(f"no tuned profiles yet in {root}: `moetune run MODEL` saves one", style="dim")
        )
    return Group(*parts)


def _grid(rows: list[tuple[str, str]]) -> Table:
    grid = label_grid()
    for label, value in rows:
        grid.add_row(label, Text(value))
    return grid


def render_tuned(profile: TunedProfile, path: str) -> RenderableType:
    s, m = profile.settings, profile.measured
    pass_through = shell_join(s.extra_args) if s.extra_args else "-"
    rows = [
        ("name", profile.name),
        ("file", path),
        (
            "model",
            f"{profile.model.file_name} ({format_bytes(profile.model.file_bytes)}), "
            f"header sha256 {profile.model.header_sha256[:16]}...",
        ),
        ("model path", profile.model.path),
        *(
            (
                "GPU" if len(profile.device_set) == 1 else f"device {i}",
                f"{d.name} ({d.device}, {format_bytes(d.vram_total_bytes)})",
            )
            for i, d in enumerate(profile.device_set)
        ),
        ("llama.cpp", profile.llama_cpp.describe()),
        ("context", f"{s.n_ctx}, cache {s.type_k}/{s.type_v}"),
        ("target", format_bytes(s.target_bytes)),
        ("after --", pass_through),
        ("placement", _placement(profile)),
        (
            "measured",
            f"peak {format_bytes(m.vram_bytes)}, TTFT {fmt(m.ttft_s, '.2f')} s, "
            f"prompt {fmt(m.prompt_tps, '.1f')} tok/s",
        ),
        ("decode", format_speed(m.decode_tps, m.decode_tps_min, m.decode_tps_max, m.repeats)),
        (
            "tuned",
            profile.tuned_at
            + (f", confirmed {profile.confirmed_at}" if profile.confirmed_at else ""),
        ),
    ]
    return Group(
        _grid(rows),
        Text(""),
        Text("command:", style="bold"),
        shell_line(profile.command),
        Text(""),
        Text("tune again:", style="bold"),
        shell_line(retune_command(profile)),
    )


def render_hardware(profile: HardwareProfile) -> RenderableType:
    rows = [
        ("id", profile.id),
        ("name", profile.name),
        ("aliases", ", ".join(profile.aliases) or "-"),
        ("VRAM", f"{profile.vram} ({format_bytes(profile.vram_bytes)})"),
        ("bandwidth", f"{profile.memory_bandwidth_gb_s:g} GB/s"),
        (
            "PCIe",
            f"{profile.pcie_gen}.0 x{profile.pcie_lanes} "
            f"({profile.pcie_bytes_per_s / 1e9:.1f} GB/s)",
        ),
        (
            "FP16",
            "unknown (the profile gives no fp16_tflops)"
            if profile.fp16_tflops is None
            else f"{profile.fp16_tflops:g} TFLOPS (dense matrix, FP16 accumulate"
            + (
                "; derived from published specifications)"
                if "fp16_tflops" in profile.derived
                else ")"
            ),
        ),
        ("source", profile.source),
    ]
    if profile.notes:
        rows.append(("notes", profile.notes))
    return _grid(rows)
