"""Rendering for humans (rich) and machines (JSON). The only module that formats output."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.command import shell_join
from moetune.gguf.roles import Role
from moetune.memory import MemoryEstimate
from moetune.model import LayerFacts, ModelFacts
from moetune.planner import PlanResult
from moetune.runner import RunResult
from moetune.units import format_bytes

SCHEMA_VERSION = 1

# Column order for per-layer tables; roles absent from a model are left out.
_LAYER_ROLES = (
    Role.EXPERTS,
    Role.SHARED_EXPERTS,
    Role.ROUTER,
    Role.DENSE_FFN,
    Role.ATTENTION,
    Role.SSM,
    Role.NORM,
    Role.NEXTN,
    Role.OTHER,
)
_ROLE_LABEL = {
    Role.TOKEN_EMBD: "token embedding",
    Role.OUTPUT: "output",
    Role.OUTPUT_NORM: "output norm",
    Role.ATTENTION: "attention",
    Role.NORM: "norms",
    Role.SSM: "linear attn / SSM",
    Role.ROUTER: "router",
    Role.SHARED_EXPERTS: "shared experts",
    Role.EXPERTS: "routed experts",
    Role.DENSE_FFN: "dense FFN",
    Role.NEXTN: "NextN/MTP (not loaded)",
    Role.OTHER: "other",
}


def to_json(payload: dict[str, Any]) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, **payload}, indent=2)


def inspect_payload(facts: ModelFacts, with_tensors: bool = False) -> dict[str, Any]:
    exclude = None if with_tensors else {"tensors"}
    return facts.model_dump(mode="json", exclude=exclude)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _summary(facts: ModelFacts) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    files = (
        facts.paths[0]
        if len(facts.paths) == 1
        else f"{facts.paths[0]} (+{len(facts.paths) - 1} shards)"
    )
    grid.add_row("file", files)
    note = "  [yellow]header only: tensor data absent[/]" if facts.header_only else ""
    grid.add_row("file size", format_bytes(facts.file_bytes) + note)
    grid.add_row("architecture", facts.architecture + (f"  ({facts.name})" if facts.name else ""))
    blocks = f"{facts.n_layers}"
    if facts.n_nextn_layers:
        blocks += f" ({facts.n_nextn_layers} NextN/MTP, not loaded by default)"
    grid.add_row("blocks", blocks)
    if facts.is_moe:
        grid.add_row(
            "experts",
            f"{facts.n_experts} total, {facts.n_experts_used} used per token"
            f", {facts.n_experts_shared} shared",
        )
        grid.add_row("leading dense blocks", str(facts.n_leading_dense))
    else:
        grid.add_row("experts", "none (dense model: expert offload does not apply)")
    grid.add_row("training context", str(facts.context_length or "unknown"))
    total = format_bytes(facts.total_bytes)
    if facts.unknown_size_tensors:
        total = f">= {total} ({facts.unknown_size_tensors} tensors of unknown type)"
    grid.add_row("weights", total)
    grid.add_row(
        "routed experts",
        f"{format_bytes(facts.expert_bytes)} ({_pct(facts.expert_bytes, facts.total_bytes)})",
    )
    grid.add_row("everything else", format_bytes(facts.non_expert_bytes))
    moe_layers = [layer for layer in facts.layers if layer.has_experts]
    if moe_layers:
        per_layer = facts.expert_bytes // len(moe_layers)
        grid.add_row("experts per MoE block", f"{format_bytes(per_layer)} (x{len(moe_layers)})")
    return grid


def _roles_table(facts: ModelFacts) -> Table:
    totals: dict[Role, int] = dict(facts.global_bytes_by_role)
    for layer in facts.layers:
        for role, n_bytes in layer.bytes_by_role.items():
            totals[role] = totals.get(role, 0) + n_bytes
    table = Table(title="bytes by role", title_justify="left")
    table.add_column("role")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    for role, n_bytes in sorted(totals.items(), key=lambda item: -item[1]):
        table.add_row(_ROLE_LABEL[role], format_bytes(n_bytes), _pct(n_bytes, facts.total_bytes))
    return table


def _quant_table(facts: ModelFacts) -> Table:
    table = Table(title="tensor types", title_justify="left")
    table.add_column("type")
    table.add_column("tensors", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    for stat in facts.quant_types:
        table.add_row(
            stat.type,
            str(stat.n_tensors),
            format_bytes(stat.bytes),
            _pct(stat.bytes, facts.total_bytes),
        )
    return table


def _layer_note(layer: LayerFacts) -> str:
    if layer.is_nextn:
        return "NextN/MTP"
    if not layer.has_experts:
        return "dense"
    return ""


def _layers_table(facts: ModelFacts) -> Table:
    present = [r for r in _LAYER_ROLES if any(r in layer.bytes_by_role for layer in facts.layers)]
    table = Table(title="per block", title_justify="left")
    table.add_column("blk", justify="right")
    for role in present:
        table.add_column(_ROLE_LABEL[role], justify="right")
    table.add_column("total", justify="right")
    table.add_column("")
    for layer in facts.layers:
        cells = [
            format_bytes(layer.bytes_by_role[r]) if r in layer.bytes_by_role else ""
            for r in present
        ]
        total = layer.expert_bytes + layer.non_expert_bytes
        table.add_row(str(layer.index), *cells, format_bytes(total), _layer_note(layer))
    return table


def render_inspect(facts: ModelFacts, show_layers: bool) -> RenderableType:
    parts: list[RenderableType] = [
        _summary(facts),
        Text(""),
        _roles_table(facts),
        _quant_table(facts),
    ]
    if show_layers:
        parts.append(_layers_table(facts))
    return Group(*parts)


def render_error(message: str, hint: str | None) -> Text:
    text = Text("moetune: error: ", style="bold red")
    text.append(message)
    if hint:
        text.append(f" ({hint})", style="dim")
    return text


def plan_payload(result: PlanResult) -> dict[str, Any]:
    """The recommended placement's figures at the top level, everything else nested."""
    rec = result.recommended
    mem = rec.memory
    top: dict[str, Any] = {
        "n_cpu_moe": rec.n_cpu_moe,
        "n_gpu_layers": rec.n_gpu_layers,
        "override_tensor": result.alternative.override_tensor if result.alternative else [],
        "command": rec.command,
        "override_command": result.alternative.command if result.alternative else None,
        "n_ctx": result.settings.n_ctx,
        "gpu_bytes": mem.gpu_bytes,
        "gpu_weights_bytes": mem.gpu_weights_bytes,
        "gpu_kv_bytes": mem.gpu_kv_bytes,
        "gpu_compute_bytes": mem.gpu_compute_bytes,
        "gpu_overhead_bytes": mem.gpu_overhead_bytes,
        "cpu_weights_bytes": mem.cpu_weights_bytes,
        "host_bytes": mem.host_bytes,
        "budget_bytes": result.budget_bytes,
        "fits": result.fits,
    }
    return {**top, "plan": result.model_dump(mode="json")}


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


def run_payload(result: RunResult) -> dict[str, Any]:
    best = result.best
    return {
        "device": result.device,
        "probe": result.probe,
        "target_bytes": result.target_bytes,
        "planned_n_cpu_moe": result.planned_n_cpu_moe,
        "launches": len(result.attempts),
        "attempts": [a.model_dump(mode="json") for a in result.attempts],
        "best": None
        if best is None
        else {**best.model_dump(mode="json"), "command": result.command},
        "n_ctx": result.settings.n_ctx,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_run(result: RunResult) -> RenderableType:
    table = Table(
        title=f"attempts on {result.device} (memory: {result.probe})", title_justify="left"
    )
    for column in (
        "N",
        "predicted",
        "measured",
        "status",
        "TTFT s",
        "prompt tok/s",
        "decode tok/s",
    ):
        table.add_column(column, justify="right" if column != "status" else "left")
    for a in result.attempts:
        style = {"ok": "green", "over": "yellow", "oom": "red"}.get(a.status, "")
        table.add_row(
            str(a.n_cpu_moe),
            format_bytes(a.predicted_bytes),
            format_bytes(a.measured_bytes),
            Text(a.status, style=style),
            _fmt(a.ttft_s, ".2f"),
            _fmt(a.prompt_tps, ".1f"),
            _fmt(a.decode_tps, ".1f"),
        )
    parts: list[RenderableType] = [
        Text(
            f"target {format_bytes(result.target_bytes)}, ctx {result.settings.n_ctx}, "
            f"planned --n-cpu-moe {result.planned_n_cpu_moe}, {len(result.attempts)} launches"
        ),
        table,
    ]
    if result.best is not None:
        parts += [
            Text(f"best: --n-cpu-moe {result.best.n_cpu_moe}", style="bold green"),
            Text(shell_join(result.command)),
        ]
    return Group(*parts)
