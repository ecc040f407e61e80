"""`moetune export`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from moetune.cli.app import app, err, handle_errors
from moetune.cli.options import Command, CtxOpt, GpuProfileOpt, PickCacheTypeOpt, VramOpt
from moetune.errors import BadValueError

if TYPE_CHECKING:
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.export import ServeEntry
    from moetune.jobs.models import Model
    from moetune.store.tuned import ProfileStore, TunedProfile
    from moetune.units import Ctx, Sizes


@app.command("export", cls=Command)
@handle_errors
def export(
    fmt: Annotated[str, typer.Argument(help="preset or llama-swap.", metavar="FORMAT")],
    models: Annotated[
        list[str] | None,
        typer.Argument(
            help="Models (paths or user/model:quant; default: every tuned profile).",
            metavar="[MODEL]...",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Write (and update) this file instead of printing.", metavar="FILE"
        ),
    ] = None,
    ctx: CtxOpt = None,
    cache_type: PickCacheTypeOpt = None,
    gpu: GpuProfileOpt = None,
    vram: VramOpt = None,
    require_tuned: Annotated[
        bool,
        typer.Option("--require-tuned", help="Refuse a model with no tuned profile (no plan)."),
    ] = False,
) -> None:
    """Serve what was tuned: llama-server's router preset, or a llama-swap config.

    Each model gets its tuned placement and context; one without a tuned profile gets its
    plan for the detected GPU (or --gpu/--vram), marked as predicted. Flags every model shares
    go into [*] (a llama-swap macro). With --out, moetune's own entries are updated and
    everything written by hand is kept.
    """
    from moetune.jobs.export import FORMATS, llama_swap_text, preset_text
    from moetune.report.render import TextView, render

    if fmt not in FORMATS:
        raise BadValueError(f"unknown format {fmt!r}", hint=f"use {' or '.join(FORMATS)}")
    if ctx is not None and ctx.is_max:
        raise BadValueError("export uses the profile tuned at one context: give --ctx N")
    entries, binary = _entries(models or [], ctx, cache_type, (gpu, vram), require_tuned)
    existing = out.read_text(encoding="utf-8") if out is not None and out.is_file() else None
    text = (
        preset_text(entries, existing)
        if fmt == "preset"
        else llama_swap_text(entries, binary, existing)
    )
    if out is None:
        render(TextView(text))
        return
    out.write_text(text, encoding="utf-8")
    err().print(f"wrote {len(entries)} model(s) to {out}", highlight=False)


def _entries(
    models: list[str],
    ctx: Ctx | None,
    cache_type: str | None,
    hardware: tuple[str | None, Sizes | None],
    require_tuned: bool,
) -> tuple[list[ServeEntry], str]:
    """Each model's entry (tuned, else planned) and the llama-server the commands run."""
    from moetune.errors import ProfileError
    from moetune.store.tuned import ProfileStore

    store = ProfileStore()
    if not models:
        profiles = _newest_per_model([p for p in store.scan() if not isinstance(p, ProfileError)])
        if not profiles:
            raise BadValueError(
                "no tuned profiles to export",
                hint="tune one with `moetune run MODEL`, or name the models",
            )
        return [_tuned(p) for p in profiles], profiles[0].command[0]
    entries: list[ServeEntry] = []
    binary: str | None = None
    for text in models:
        entry, tuned_binary = _entry(store, text, ctx, cache_type, hardware, require_tuned)
        entries.append(entry)
        binary = binary or tuned_binary
    from moetune.llamacpp.process import server_for_commands

    return entries, binary or server_for_commands()


def _entry(
    store: ProfileStore,
    text: str,
    ctx: Ctx | None,
    cache_type: str | None,
    hardware: tuple[str | None, Sizes | None],
    require_tuned: bool,
) -> tuple[ServeEntry, str | None]:
    """One model's entry: its tuned profile, else its plan; and the binary it was tuned with."""
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.models import open_model, require_weights
    from moetune.store.tuned import model_identity, model_profile

    named = open_model(text).absolute()
    missing: ProfileNotFoundError | None = None
    if named.path is not None:
        try:
            profile = model_profile(
                store, model_identity(named.path), ctx.tokens if ctx else None, cache_type
            )
            return _tuned(profile), profile.command[0]
        except ProfileNotFoundError as exc:
            if require_tuned:
                raise
            missing = exc
    elif require_tuned:
        require_weights(named)
    return _planned(named, ctx, cache_type, hardware, missing), None


def _newest_per_model(profiles: list[TunedProfile]) -> list[TunedProfile]:
    """One profile per model file: the newest."""
    newest: dict[str, TunedProfile] = {}
    for profile in sorted(profiles, key=lambda p: p.tuned_at, reverse=True):
        newest.setdefault(profile.model.path, profile)
    return list(newest.values())


def _name(args: list[str], fallback: str) -> str:
    """The model id requests use: the -hf name, else the file's name without .gguf."""
    if "-hf" in args:
        return args[args.index("-hf") + 1]
    return fallback.removesuffix(".gguf")


def _tuned(profile: TunedProfile) -> ServeEntry:
    from moetune.jobs.export import ServeEntry
    from moetune.units import format_bytes

    m = profile.measured
    speed = f", decode {m.decode_tps:.1f} tok/s" if m.decode_tps is not None else ""
    note = (
        f"{profile.model.file_name} on {profile.gpu.name}, {profile.tuned_at[:10]}, "
        f"ctx {profile.settings.n_ctx}, peak {format_bytes(m.vram_bytes)}{speed}"
    )
    args = list(profile.command[1:])
    return ServeEntry(_name(args, profile.model.file_name), tuple(args), True, note)


def _planned(
    named: Model,
    ctx: Ctx | None,
    cache_type: str | None,
    hardware: tuple[str | None, Sizes | None],
    missing: ProfileNotFoundError | None,
) -> ServeEntry:
    from moetune.cli.options import DEFAULT_CACHE_TYPE
    from moetune.errors import DoesNotFitError
    from moetune.jobs.export import ServeEntry
    from moetune.jobs.plan import predicted_plan
    from moetune.units import format_bytes

    gpu, vram = hardware
    plan, source = predicted_plan(
        named,
        vram=vram,
        gpu=gpu,
        ctx=ctx,
        cache_type=cache_type or DEFAULT_CACHE_TYPE,
        missing=missing,
    )
    if not plan.fits:
        raise DoesNotFitError(f"{named.facts.paths[0]} does not fit: {plan.reason}")
    rec = plan.recommended
    err().print(
        f"warning: no tuned profile for {named.facts.paths[0]}: exporting moetune's "
        "plan (predicted, not measured)",
        style="yellow",
        highlight=False,
    )
    note = (
        f"no tuned profile; plan for GPU {source}, ctx {plan.settings.n_ctx}, predicted "
        f"peak {format_bytes(rec.memory.gpu_bytes)}"
    )
    args = list(rec.command[1:])
    return ServeEntry(_name(args, Path(str(named.facts.paths[0])).name), tuple(args), False, note)
