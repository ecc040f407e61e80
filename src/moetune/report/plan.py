"""`moetune plan`: the placement, the memory table, the checks and the commands."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate
from moetune.core.plan import PlanResult
from moetune.report.common import ShellLine, new_table, plural, shell_line
from moetune.units import format_bytes


def _memory_rows(mem: MemoryEstimate) -> list[tuple[str, int, str]]:
    return [
        (
            "dense weights (attention, router, norms)",
            mem.gpu_weights_bytes - mem.gpu_expert_bytes,
            "GPU",
        ),
        ("experts on the GPU", mem.gpu_expert_bytes, "GPU"),
        ("KV cache (+ recurrent state)", mem.gpu_kv_bytes, "GPU"),
        ("compute buffer", mem.gpu_compute_bytes, "GPU"),
        ("runtime overhead (CUDA context)", mem.gpu_overhead_bytes, "GPU"),
        ("experts on the CPU", mem.cpu_expert_bytes, "RAM"),
        (
            "other weights on the CPU (embedding)",
            mem.cpu_weights_bytes - mem.cpu_expert_bytes,
            "RAM",
        ),
        ("host KV and compute buffers", mem.host_kv_bytes + mem.host_compute_bytes, "RAM"),
    ]


def _memory_table(result: PlanResult) -> Table:
    mem = result.recommended.memory
    table = new_table("memory", ("component", "size", "where"), right=("size",))
    for label, n_bytes, where in _memory_rows(mem):
        table.add_row(label, format_bytes(n_bytes), where)
    gpu_style = "green" if mem.gpu_bytes <= result.budget_bytes else "red"
    table.add_section()
    table.add_row(
        Text("GPU total", style="bold"),
        Text(format_bytes(mem.gpu_bytes), style=gpu_style),
        f"budget {format_bytes(result.budget_bytes)}",
    )
    ram = result.ram
    ram_style = {"ok": "green", "warn": "yellow", "fail": "red"}.get(ram.status, "")
    table.add_row(
        Text("RAM total", style="bold"),
        Text(format_bytes(mem.host_bytes), style=ram_style),
        f"available {format_bytes(ram.available_bytes)}",
    )
    return table


def _placement_lines(result: PlanResult) -> list[RenderableType]:
    rec, alt = result.recommended, result.alternative
    lines: list[RenderableType] = []
    if not result.is_moe:
        lines.append(Text(f"dense model: expert offload does not apply; -ngl {rec.n_gpu_layers}"))
        return lines
    lines.append(
        Text.assemble(
            ("--n-cpu-moe ", "bold"),
            (str(rec.n_cpu_moe), "bold cyan"),
            f"  (experts of blocks 0-{(rec.n_cpu_moe or 1) - 1} on the CPU)"
            if rec.n_cpu_moe
            else "  (every expert on the GPU)",
        )
    )
    if not rec.moved_layers and rec.fits:
        lines.append(Text("-ot not needed: every expert fits on the GPU"))
    elif alt is not None:
        detail = f"{plural(len(alt.moved_layers), 'whole block')}"
        if alt.partial_layer is not None:
            detail += f" + {'/'.join(alt.partial_parts)} of block {alt.partial_layer}"
        gain = result.override_gain_bytes
        rule = ShellLine("-ot ", style="bold")
        rule.append(",".join(alt.override_tensor), style="cyan")
        lines += [rule, Text(f"    experts on the CPU: {detail}; keeps {format_bytes(gain)} "
                             "more on the GPU")]  # fmt: skip
    return lines


def _budget_line(result: PlanResult) -> str:
    if result.target_bytes is not None:
        return f"budget = --target-vram {format_bytes(result.budget_bytes)}"
    device, headroom = format_bytes(result.device_bytes), format_bytes(result.headroom_bytes)
    return f"budget = GPU {device} - headroom {headroom} = {format_bytes(result.budget_bytes)}"


def _commands(result: PlanResult) -> list[RenderableType]:
    """The ready commands; when the plan does not fit, the nearest one that does instead,
    and the planned ones only as comments."""
    rec, alt = result.recommended, result.alternative
    if result.fits:
        parts: list[RenderableType] = [Text("command:", style="bold")]
        parts.append(shell_line(rec.command))
        if alt is not None:
            parts += [Text("-ot form:", style="bold"), shell_line(alt.command)]
        return parts
    parts = [Text(f"does NOT fit: {result.reason}", style="bold red")]
    parts += [Text(f"  - {s}", style="yellow") for s in result.suggestions]
    if result.nearest is not None:
        parts += [Text("nearest command that fits:", style="bold"),
                  shell_line(result.nearest.command)]  # fmt: skip
    parts += [Text("the planned command (does not fit, not runnable as is):", style="dim"),
              shell_line(rec.command, prefix="# ", style="dim")]  # fmt: skip
    return parts


def render_plan(result: PlanResult, facts: ModelFacts, gpu_source: str) -> RenderableType:
    header = Text(
        f"{facts.architecture}, {facts.n_layers} blocks, {facts.n_experts} experts "
        f"({facts.n_experts_used} used) | GPU: {gpu_source} | ctx {result.settings.n_ctx}, "
        f"KV {result.settings.type_k}/{result.settings.type_v}"
    )
    parts: list[RenderableType] = [header, Text(""), *_placement_lines(result), Text("")]
    parts.append(_memory_table(result))
    parts.append(Text(f"{_budget_line(result)}; RAM check: {result.ram.status}", style="dim"))
    if result.ram.status not in ("ok", "fail"):
        parts.append(Text(f"RAM: {result.ram.message}", style="yellow"))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if result.ubatch_hint:
        parts.append(Text(f"hint: {result.ubatch_hint}", style="dim"))
    return Group(*parts, Text(""), *_commands(result))
