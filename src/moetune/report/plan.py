"""`moetune plan`: the placement, the memory table, the checks and the commands."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.command import shell_join
from moetune.core.facts import ModelFacts
from moetune.core.memory import MemoryEstimate
from moetune.core.planner import PlanResult
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
    table = Table(title="memory", title_justify="left")
    table.add_column("component")
    table.add_column("size", justify="right")
    table.add_column("where")
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


def _placement_lines(result: PlanResult) -> list[Text]:
    rec, alt = result.recommended, result.alternative
    lines: list[Text] = []
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
    if alt is not None and not alt.override_tensor:
        lines.append(Text("-ot not needed: every expert fits on the GPU"))
    elif alt is not None:
        detail = f"{len(alt.moved_layers)} whole blocks"
        if alt.partial_layer is not None:
            detail += f" + {'/'.join(alt.partial_parts)} of block {alt.partial_layer}"
        gain = result.override_gain_bytes
        lines.append(
            Text.assemble(
                ("-ot ", "bold"),
                (",".join(alt.override_tensor) or "(none)", "cyan"),
                f"\n    experts on the CPU: {detail}; keeps {format_bytes(gain)} more on the GPU",
            )
        )
    return lines


def render_plan(result: PlanResult, facts: ModelFacts, gpu_source: str) -> RenderableType:
    header = Text(
        f"{facts.architecture}, {facts.n_layers} blocks, {facts.n_experts} experts "
        f"({facts.n_experts_used} used) | GPU: {gpu_source} | ctx {result.settings.n_ctx}, "
        f"KV {result.settings.type_k}/{result.settings.type_v}"
    )
    parts: list[RenderableType] = [header, Text(""), *_placement_lines(result), Text("")]
    parts.append(_memory_table(result))
    parts.append(
        Text(
            f"budget = target {format_bytes(result.target_bytes)} - headroom "
            f"{format_bytes(result.headroom_bytes)}; RAM check: {result.ram.status}",
            style="dim",
        )
    )
    if result.ram.status != "ok":
        parts.append(Text(f"RAM: {result.ram.message}", style="yellow"))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if result.ubatch_hint:
        parts.append(Text(f"hint: {result.ubatch_hint}", style="dim"))
    parts += [
        Text(""),
        Text("command:", style="bold"),
        Text(shell_join(result.recommended.command)),
    ]
    if result.alternative and result.alternative.override_tensor:
        parts += [Text("-ot form:", style="bold"), Text(shell_join(result.alternative.command))]
    if not result.fits:
        parts.append(Text("does NOT fit: see the table above", style="bold red"))
    return Group(*parts)
