"""`moetune inspect`: the model's summary, bytes by role, tensor types and blocks."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.archs import arch_of
from moetune.core.facts import LayerFacts, ModelFacts
from moetune.gguf.roles import Role
from moetune.report.common import label_grid, new_table, short_path
from moetune.units import format_bytes

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


# The per-block table's headers: short, so that every column fits 80 columns.
_BLOCK_LABEL = {
    Role.EXPERTS: "experts",
    Role.SHARED_EXPERTS: "shared",
    Role.ROUTER: "router",
    Role.DENSE_FFN: "dense FFN",
    Role.ATTENTION: "attn",
    Role.SSM: "SSM",
    Role.NORM: "norms",
    Role.NEXTN: "NextN",
    Role.OTHER: "other",
}


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _verified(arch: str) -> Text:
    """Whether moetune's fixture matrix checks this architecture against llama.cpp."""
    record = arch_of(arch)
    if record.verified:
        return Text("yes: plans match llama.cpp's own accounting")
    if record.known:
        return Text(
            "not verified: its cache rules are read from llama.cpp, not yet tested", style="yellow"
        )
    return Text(
        "not verified: an architecture moetune has not been taught; plans are "
        "conservative estimates",
        style="yellow",
    )


def _summary(facts: ModelFacts) -> Table:
    grid = label_grid()
    files = Text(short_path(str(facts.paths[0])))
    if len(facts.paths) > 1:
        files.append(f" (+{len(facts.paths) - 1} shards)")
    grid.add_row("file", files)
    size = Text(format_bytes(facts.file_bytes))
    if facts.header_only:
        size.append("  header only: tensor data absent", style="yellow")
    grid.add_row("file size", size)
    grid.add_row("architecture", facts.architecture + (f"  ({facts.name})" if facts.name else ""))
    grid.add_row("verified", _verified(facts.architecture))
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
    table = new_table("bytes by role", ("role", "bytes", "share"), right=("bytes", "share"))
    for role, n_bytes in sorted(totals.items(), key=lambda item: -item[1]):
        table.add_row(_ROLE_LABEL[role], format_bytes(n_bytes), _pct(n_bytes, facts.total_bytes))
    return table


def _quant_table(facts: ModelFacts) -> Table:
    table = new_table(
        "tensor types", ("type", "tensors", "bytes", "share"), right=("tensors", "bytes", "share")
    )
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
    numbers = ("blk", *(_BLOCK_LABEL[role] for role in present), "total")
    table = new_table("per block", (*numbers, ""), right=numbers)
    for layer in facts.layers:
        cells = [
            format_bytes(layer.bytes_by_role[r], 1) if r in layer.bytes_by_role else ""
            for r in present
        ]
        total = layer.expert_bytes + layer.non_expert_bytes
        table.add_row(str(layer.index), *cells, format_bytes(total, 1), _layer_note(layer))
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
    parts += [Text(f"warning: {line}", style="yellow") for line in facts.warnings]
    return Group(*parts)
