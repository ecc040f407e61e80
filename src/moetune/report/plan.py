"""`moetune plan`: the placement, the memory table, the checks and the commands."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.core.facts import ModelFacts
from moetune.core.frontier import Frontier
from moetune.core.memory import MemoryEstimate
from moetune.core.plan import PlacementResult, PlanResult
from moetune.core.ram import RamFigure
from moetune.core.speed import Forecast
from moetune.report.common import (
    ShellLine,
    forecast_label,
    new_table,
    plural,
    ram_line,
    shell_line,
)
from moetune.units import format_bytes, format_speed


def device_word(mem: MemoryEstimate) -> str:
    """What one device is called in the memory table: ``GPU``; an RPC server by its name
    (``RPC0``: a process serving a backend, not a card)."""
    names = [d.name for d in mem.devices]
    return names[0] if len(names) == 1 and names[0].startswith("RPC") else "GPU"


def _overhead_label(mem: MemoryEstimate) -> str:
    names = [d.name for d in mem.devices]
    cuda = bool(names) and all(name.startswith("CUDA") for name in names)
    return "runtime overhead (CUDA context)" if cuda or not names else "runtime overhead"


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
        (_overhead_label(mem), mem.gpu_overhead_bytes, "GPU"),
        ("experts on the CPU", mem.cpu_expert_bytes, "RAM"),
        (
            "other weights on the CPU (embedding)",
            mem.cpu_weights_bytes - mem.cpu_expert_bytes,
            "RAM",
        ),
        ("host KV and compute buffers", mem.host_kv_bytes + mem.host_compute_bytes, "RAM"),
        *_extras_rows(mem),
    ]


def _extras_rows(mem: MemoryEstimate) -> list[tuple[str, int, str]]:
    """The projector's and the draft's rows, where each part lands (only when present)."""
    rows: list[tuple[str, int, str]] = []
    if (mm := mem.mmproj) is not None:
        where = "RAM" if mm.device == "CPU" else "GPU"
        rows += [
            (f"projector weights ({mm.projector_type})", mm.mmproj_weights_bytes, where),
            (f"projector compute ({mm.warmup})", mm.mmproj_compute_bytes, where),
        ]
        if mm.host_compute_bytes:
            rows.append(("projector host compute", mm.host_compute_bytes, "RAM"))
    if (dr := mem.draft) is not None:
        parts = (
            ("draft weights", dr.draft_weights_bytes, "GPU"),
            ("draft KV cache", dr.draft_kv_bytes, "GPU"),
            ("draft compute buffer", dr.draft_compute_bytes, "GPU"),
            ("draft weights on the CPU", dr.host_weights_bytes, "RAM"),
            ("draft host KV and compute", dr.host_kv_bytes + dr.host_compute_bytes, "RAM"),
        )
        rows += [part for part in parts if part[1]]
    if (mt := mem.mtp) is not None:
        parts = (
            ("MTP/NextN blocks (draft-mtp)", mt.mtp_weights_bytes, "GPU"),
            ("MTP KV cache", mt.mtp_kv_bytes, "GPU"),
            ("MTP compute buffer", mt.mtp_compute_bytes, "GPU"),
            ("MTP/NextN weights on the CPU", mt.host_weights_bytes, "RAM"),
            ("MTP host KV and compute", mt.host_kv_bytes + mt.host_compute_bytes, "RAM"),
        )
        rows += [part for part in parts if part[1]]
    return rows


def _memory_table(result: PlanResult) -> Table:
    mem = result.first.memory
    table = new_table("memory", ("component", "size", "where"), right=("size",))
    word = device_word(mem)
    for label, n_bytes, where in _memory_rows(mem):
        table.add_row(label.replace("GPU", word), format_bytes(n_bytes), where.replace("GPU", word))
    gpu_style = "green" if mem.gpu_bytes <= result.budget_bytes else "red"
    table.add_section()
    table.add_row(
        Text(f"{word} total", style="bold"),
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


def _devices_table(result: PlanResult) -> Table:
    """Several devices: a column per device, the host below."""
    mem = result.first.memory
    names = [d.name for d in mem.devices]
    table = new_table("memory per device", ("component", *names), right=tuple(names))
    rows = [
        ("dense weights", [d.weights_bytes - d.expert_bytes for d in mem.devices]),
        ("experts", [d.expert_bytes for d in mem.devices]),
        ("KV cache (+ state)", [d.kv_bytes for d in mem.devices]),
        ("compute buffer", [d.compute_bytes for d in mem.devices]),
        ("runtime overhead", [d.overhead_bytes for d in mem.devices]),
    ]
    if mem.mmproj is not None:
        rows += [
            ("projector weights", [d.mmproj_weights_bytes for d in mem.devices]),
            ("projector compute", [d.mmproj_compute_bytes for d in mem.devices]),
        ]
    if mem.draft is not None:
        rows += [
            ("draft weights", [d.draft_weights_bytes for d in mem.devices]),
            ("draft KV cache", [d.draft_kv_bytes for d in mem.devices]),
            ("draft compute", [d.draft_compute_bytes for d in mem.devices]),
        ]
    if mem.mtp is not None:
        rows += [
            ("MTP/NextN blocks", [d.mtp_weights_bytes for d in mem.devices]),
            ("MTP KV cache", [d.mtp_kv_bytes for d in mem.devices]),
            ("MTP compute", [d.mtp_compute_bytes for d in mem.devices]),
        ]
    for label, values in rows:
        table.add_row(label, *(format_bytes(v) for v in values))
    table.add_section()
    totals = [
        Text(format_bytes(d.total_bytes), style="green" if d.total_bytes <= b else "red")
        for d, b in zip(mem.devices, result.device_budgets, strict=True)
    ]
    table.add_row(Text("total", style="bold"), *totals)
    table.add_row("budget", *(format_bytes(b) for b in result.device_budgets))
    return table


def _host_lines(result: PlanResult) -> list[RenderableType]:
    mem, ram = result.first.memory, result.ram
    style = {"ok": "green", "warn": "yellow", "fail": "red"}.get(ram.status, "")
    line = Text("RAM: ")
    line.append(format_bytes(mem.host_bytes), style=style)
    line.append(
        f" ({format_bytes(mem.cpu_expert_bytes)} of experts, "
        f"{format_bytes(mem.cpu_weights_bytes - mem.cpu_expert_bytes)} other weights, "
        f"{format_bytes(mem.host_kv_bytes + mem.host_compute_bytes)} buffers"
        + (
            f", {format_bytes(mem.host_extras_bytes)} projector, draft and MTP"
            if mem.host_extras_bytes
            else ""
        )
        + f"), available {format_bytes(ram.available_bytes)}"
    )
    return [line]


def _overhead_lines(result: PlanResult) -> list[RenderableType]:
    """How each device's runtime overhead was chosen: the default (from public figures),
    measured on the card by a run (its hardware profile), or --overhead; none on devices
    without one (an RPC server)."""
    from moetune.core.overhead import DEFAULT_CUDA_OVERHEAD_BYTES, default_overhead_why

    given = [d for d in result.first.memory.devices if d.overhead_bytes]
    measured = result.overhead_sources
    default = [
        d.name
        for d in given
        if d.overhead_bytes == DEFAULT_CUDA_OVERHEAD_BYTES and d.name not in measured
    ]
    lines: list[RenderableType] = []
    if default:
        lines.append(
            Text(
                f"runtime overhead {format_bytes(DEFAULT_CUDA_OVERHEAD_BYTES)} on "
                f"{', '.join(default)}: {default_overhead_why()}",
                style="dim",
            )
        )
    for device in given:
        if device.name in measured:
            lines.append(
                Text(
                    f"runtime overhead {format_bytes(device.overhead_bytes)} on {device.name}, "
                    f"{measured[device.name]}",
                    style="dim",
                )
            )
    own = [
        f"{d.name} {format_bytes(d.overhead_bytes)}"
        for d in given
        if d.name not in default and d.name not in measured
    ]
    if own:
        lines.append(Text(f"runtime overhead given (--overhead): {', '.join(own)}", style="dim"))
    return lines


def _placement_lines(result: PlanResult) -> list[RenderableType]:
    rec, alt = result.recommended, result.alternative
    lines: list[RenderableType] = []
    if not result.is_moe:
        lines.append(Text(f"dense model: expert offload does not apply; -ngl {rec.n_gpu_layers}"))
        return lines
    if result.override_first and alt is not None:  # the -ot form first, N beside it
        lines += _override_lines(result, alt)
        lines += _split_lines(result)
        lines.append(_n_line(rec, _on(result), prefix="or ", after=_simpler_note(result)))
        return lines
    lines.append(_n_line(rec, _on(result)))
    lines += _split_lines(result)
    if not rec.moved_layers and rec.fits:
        lines.append(Text(f"-ot not needed: every expert fits on the {_on(result)}"))
    elif alt is not None:
        lines += _override_lines(result, alt)
    return lines


def _on(result: PlanResult) -> str:
    """What the plan's devices are called in prose: ``GPU``, ``devices``, ``RPC0``."""
    return "devices" if result.device_names else device_word(result.first.memory)


def _n_line(rec: PlacementResult, on: str, *, prefix: str = "", after: str = "") -> Text:
    """``--n-cpu-moe 11  (experts of blocks 0-10 on the CPU)``, with ``after`` appended;
    ``on``: what the devices are called (``every expert on the GPU``)."""
    where = (
        f"experts of blocks 0-{(rec.n_cpu_moe or 1) - 1} on the CPU"
        if rec.n_cpu_moe
        else f"every expert on the {on}"
    )
    return Text.assemble(
        prefix, ("--n-cpu-moe ", "bold"), (str(rec.n_cpu_moe), "bold cyan"), f"  ({where}){after}"
    )


def _split_lines(result: PlanResult) -> list[RenderableType]:
    """The first command's ``-ts`` and each device's layers (several devices)."""
    first = result.first
    if not first.tensor_split:
        return []
    split = ",".join(f"{v:g}" for v in first.tensor_split)
    shares = ", ".join(_shares(result))
    return [
        Text.assemble(("-ts ", "bold"), (split, "bold cyan"), f"  (layers per device: {shares})")
    ]


def _override_lines(result: PlanResult, alt: PlacementResult) -> list[RenderableType]:
    """The ``-ot`` rules and what they leave on the CPU (where the N form is first: what
    they keep beyond it)."""
    detail = f"{plural(len(alt.moved_layers), 'whole block')}"
    if alt.partial_layer is not None:
        detail += f" + {'/'.join(alt.partial_parts)} of block {alt.partial_layer}"
    if not result.override_first:  # the N form first: what the -ot form keeps beyond it
        detail += f"; keeps {format_bytes(result.override_gain_bytes)} more on the {_on(result)}"
    rule = ShellLine("-ot ", style="bold")
    rule.append(",".join(alt.override_tensor), style="cyan")
    return [rule, Text(f"    experts on the CPU: {detail}")]


def _simpler_note(result: PlanResult) -> str:
    """What the ``--n-cpu-moe`` form gives up beside the ``-ot`` form, and its ``-ts``
    where it differs from the first command's."""
    rec, first = result.recommended, result.first
    split = (
        f" at -ts {','.join(f'{v:g}' for v in rec.tensor_split)}"
        if rec.tensor_split != first.tensor_split
        else ""
    )
    return f"{split}: simpler; {format_bytes(result.override_gain_bytes)} more experts in RAM"


def _check_lines(result: PlanResult) -> list[RenderableType]:
    """llama.cpp's dry run beside the prediction, per device; or why there is none."""
    if not result.checks:
        return [Text(f"{result.checked}: not checked by llama.cpp", style="dim")]
    mem = result.first.memory
    alone = (
        ", the model alone: it counts no projector, draft or MTP"
        if mem.mmproj or mem.draft or mem.mtp
        else ""
    )
    head = Text(
        f"checked by {result.checked} (llama-fit-params, its own dry run: "
        f"one sequence, logits for the whole batch{alone}):",
        style="dim",
    )
    lines: list[RenderableType] = [head]
    for c in result.checks:
        style = "green" if c.agrees else "yellow"
        lines.append(
            Text(
                f"  llama.cpp projects {c.device} {c.projected_mib:,} MiB; predicted "
                f"{c.predicted_mib:,} (model {c.model_mib[0]}/{c.model_mib[1]}, "
                f"context {c.context_mib[0]}/{c.context_mib[1]}, compute "
                f"{c.compute_mib[0]}/{c.compute_mib[1]})",
                style=style,
            )
        )
    return lines


def _shares(result: PlanResult) -> list[str]:
    counts = [int(v) for v in result.first.tensor_split]
    return [f"{name} {count}" for name, count in zip(result.device_names, counts, strict=True)]


def _budget_line(result: PlanResult) -> str:
    if result.device_names:
        return f"each device within its own budget; the tightest: {result.limiting_device}"
    if result.target_bytes is not None:
        return f"budget = --target-vram {format_bytes(result.budget_bytes)}"
    device, headroom = format_bytes(result.device_bytes), format_bytes(result.headroom_bytes)
    return (
        f"budget = {_on(result)} {device} - headroom {headroom} = "
        f"{format_bytes(result.budget_bytes)}"
    )


def _commands(result: PlanResult) -> list[RenderableType]:
    """The ready commands; when the plan does not fit, the nearest one that does instead,
    and the planned ones only as comments."""
    rec, alt = result.recommended, result.alternative
    if result.fits:
        first, simpler = result.first, result.simpler
        parts: list[RenderableType] = [Text("command:", style="bold")]
        parts.append(shell_line(first.command, env=first.env))
        if simpler is not None:
            gain = format_bytes(result.override_gain_bytes)
            label = f"--n-cpu-moe form (simpler; keeps {gain} more experts in RAM):"
            parts += [Text(label, style="bold"), shell_line(simpler.command, env=simpler.env)]
        elif alt is not None:
            parts += [Text("-ot form:", style="bold"), shell_line(alt.command, env=alt.env)]
        for placed in (first, *(p for p in (rec, alt) if p is not None and p is not first)):
            parts += [Text(f"note: {n}", style="dim") for n in placed.notes]
        return parts
    parts = [Text(f"does NOT fit: {result.reason}", style="bold red")]
    parts += [Text(f"  - {s}", style="yellow") for s in result.suggestions]
    if result.nearest is not None:
        parts += [
            Text("nearest command that fits:", style="bold"),
            shell_line(result.nearest.command, env=result.nearest.env),
        ]
    parts += [
        Text("the planned command (does not fit, not runnable as is):", style="dim"),
        shell_line(rec.command, prefix="# ", style="dim", env=rec.env),
    ]
    return parts


def forecast_line(found: Forecast) -> str:
    """``speed (uncalibrated, expected error ±16 %; assumed: CUDA0 FLOP/s): decode 95.2 tok/s
    at depth 0, prefill 850.1 tok/s (512 tokens, -ub 512)``; a figure it lacks (none where
    every figure has a value): ``; missing: ...``."""
    decode = f"decode {format_speed(found.decode_tok_s)}"
    if found.streams > 1:  # --parallel N: each stream's, and the N together
        decode = (
            f"decode {format_speed(found.decode_tps_per_stream)} per stream, "
            f"{format_speed(found.decode_tps_aggregate)} for {found.streams} streams together"
        )
    line = (
        f"speed ({forecast_label(found)}): {decode} at depth "
        f"{found.depth}, prefill {format_speed(found.prefill_tok_s)} ({found.n_prompt} tokens, "
        f"-ub {found.n_ubatch})"
    )
    return line + (f"; missing: {', '.join(found.missing)}" if found.missing else "")


def render_plan(
    result: PlanResult,
    facts: ModelFacts,
    gpu_source: str,
    frontier: Frontier | None = None,
    ram: RamFigure | None = None,
) -> RenderableType:
    header = Text(
        f"{facts.architecture}, {facts.n_layers} blocks, {facts.n_experts} experts "
        f"({facts.n_experts_used} used) | "
        f"{'devices' if result.device_names else device_word(result.first.memory)}: "
        f"{gpu_source} | ctx {result.settings.n_ctx}, "
        f"KV {result.settings.type_k}/{result.settings.type_v}"
    )
    parts: list[RenderableType] = [header, Text(""), *_placement_lines(result), Text("")]
    if result.device_names:
        parts += [_devices_table(result), *_host_lines(result)]
    else:
        parts.append(_memory_table(result))
    parts += _overhead_lines(result)
    parts += _check_lines(result)
    parts.append(Text(f"{_budget_line(result)}; RAM check: {result.ram.status}", style="dim"))
    if result.ram.status not in ("ok", "fail"):
        parts.append(Text(f"RAM: {result.ram.message}", style="yellow"))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if result.ctx_note:
        parts.append(Text(f"note: {result.ctx_note}", style="yellow"))
    if result.ubatch_hint:
        parts.append(Text(f"hint: {result.ubatch_hint}", style="dim"))
    if result.forecast is not None:
        parts.append(Text(forecast_line(result.forecast), style="dim"))
        if ram is not None:
            parts.append(Text(f"  {ram_line(ram)}", style="dim"))
    commands = _commands(result)
    if frontier is not None:
        from moetune.report.frontier import render_frontier

        parts += [Text(""), *render_frontier(frontier, facts.n_layers)]
        if frontier.switched:
            picked = frontier.entries[frontier.picked]
            commands = [Text("command (the frontier's pick):", style="bold")]
            commands += [
                shell_line(picked.command, env=picked.env),
                Text("the plan's own:", style="dim"),
            ]
            commands += _commands(result)[1:]
    return Group(*parts, Text(""), *commands)
