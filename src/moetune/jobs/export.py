"""``moetune export``: serve what was tuned, several models from one config.

- ``preset``: llama-server's router mode (``llama-server --models-preset FILE``, build 11434
  tools/server/README.md "Model presets"): an INI file, a section per model whose keys are
  the long flag names without dashes (``n-cpu-moe = 12``), a bare flag ``= true``, the model
  as ``model = PATH`` or ``hf-repo = user/model:QUANT``; ``[*]`` holds what every model
  shares.
- ``llama-swap``: its YAML ``models:`` map, each entry a ``cmd`` with ``${PORT}``; the
  shared flags are one macro, ``${moetune-shared}``.

Each model's entry comes from its tuned profile (the measured winner), else from its plan
(marked predicted). Re-exporting into an existing file replaces moetune's own entries (they
are marked) and keeps everything written by hand: other sections and models, and in
moetune's entries whatever follows the "kept" line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.models import Model
    from moetune.store.tuned import ProfileStore, TunedProfile
    from moetune.units import Ctx, Sizes

from moetune.core.flags import Pair, pairs, words

FORMATS = ("preset", "llama-swap")
MARK = "moetune:"  # the comment that starts each of moetune's entries
KEPT = "--- below this line: your own, kept on re-export ---"
SHARED_MACRO = "moetune-shared"
# the source of a model: never shared, never in [*]
_SOURCE_KEYS = ("model", "hf-repo", "model-url", "mmproj", "model-draft")
# llama-server's long names for the short flags moetune writes (common/arg.cpp, build 11434)
LONG_NAMES = {
    "-m": "model",
    "-hf": "hf-repo",
    "-hfr": "hf-repo",
    "-mu": "model-url",
    "-mm": "mmproj",
    "-md": "model-draft",
    "-ngl": "n-gpu-layers",
    "-fa": "flash-attn",
    "-ctk": "cache-type-k",
    "-ctv": "cache-type-v",
    "-c": "ctx-size",
    "-ot": "override-tensor",
    "-ts": "tensor-split",
    "-t": "threads",
    "-ub": "ubatch-size",
    "-b": "batch-size",
    "-np": "parallel",
    "-dev": "device",
    "-sm": "split-mode",
    "-mg": "main-gpu",
    "-ncmoe": "n-cpu-moe",
    "-cmoe": "cpu-moe",
    "-fit": "fit",
    "-ngld": "spec-draft-ngl",
    "-devd": "spec-draft-device",
    "-ctkd": "spec-draft-type-k",
    "-ctvd": "spec-draft-type-v",
    "-otd": "spec-draft-override-tensor",
    "-ncmoed": "spec-draft-n-cpu-moe",
    "-cmoed": "spec-draft-cpu-moe",
    "-mmdev": "mmproj-device",
    "-lm": "load-mode",
}


class ServeEntry(NamedTuple):
    """One model to serve: its name (the section, the model id requests use), llama-server's
    arguments (no binary), and where they come from."""

    name: str
    args: tuple[str, ...]
    tuned: bool
    note: str  # one line: tuned when, on what, how fast; or what the plan predicts


def arg_pairs(args: Sequence[str]) -> list[Pair]:
    """(flag, values) in order, by llama-server's flag table (core/flags.py)."""
    return pairs(args)


def preset_keys(args: Sequence[str]) -> dict[str, str]:
    """llama-server's arguments as preset keys: long names without dashes; a bare flag is
    ``true``."""
    keys: dict[str, str] = {}
    for pair in arg_pairs(args):
        keys[_key(pair)] = "true" if pair.value is None else " ".join(pair.values)
    return keys


def _key(pair: Pair) -> str:
    """The pair's preset key: its long name without dashes."""
    return LONG_NAMES.get(pair.key, pair.key.lstrip("-"))


def _shared(entries: Sequence[dict[str, str]]) -> dict[str, str]:
    """The keys every entry has with the same value (never a model's source)."""
    if len(entries) < 2:
        return {}
    first = entries[0]
    return {
        k: v
        for k, v in first.items()
        if k not in _SOURCE_KEYS and all(e.get(k) == v for e in entries[1:])
    }


# --- the preset (INI) --------------------------------------------------------------------------


class _Section(NamedTuple):
    name: str | None  # None: the lines before the first section
    lines: list[str]

    @property
    def ours(self) -> bool:
        return any(line.startswith(f"; {MARK}") for line in self.lines[1:2])

    def kept(self) -> list[str]:
        """The user's lines in one of moetune's sections (after the kept line)."""
        for index, line in enumerate(self.lines):
            if KEPT in line:
                return self.lines[index + 1 :]
        return []


def _sections(text: str) -> list[_Section]:
    sections = [_Section(None, [])]
    for line in text.splitlines():
        header = re.match(r"^\s*\[(.+)\]\s*$", line)
        if header:
            sections.append(_Section(header[1], [line]))
        else:
            sections[-1].lines.append(line)
    return sections


def _ini_section(name: str, note: str, keys: dict[str, str], kept: list[str]) -> list[str]:
    lines = [f"[{name}]", f"; {MARK} {note}"]
    lines += [f"{key} = {value}" for key, value in keys.items()]
    lines += [f"; {KEPT}", *kept]
    while lines and not lines[-1].strip():
        lines.pop()
    return [*lines, ""]


def preset_text(entries: Sequence[ServeEntry], existing: str | None = None) -> str:
    """The preset for ``entries``, merged into ``existing`` (a file exported before and
    edited by hand) when given."""
    old = _sections(existing) if existing else [_Section(None, [])]
    by_name = {s.name: s for s in old if s.name is not None}
    user_globals = "*" in by_name and not by_name["*"].ours
    keys = [preset_keys(e.args) for e in entries]
    shared = {} if user_globals else _shared(keys)
    if not shared and "*" in by_name and by_name["*"].ours:  # one model now: no [*] of ours
        shared = _shared([*keys, *keys])
    mine = {
        e.name: _ini_section(
            e.name,
            ("tuned" if e.tuned else "PREDICTED") + f": {e.note}",
            {k: v for k, v in kv.items() if k not in shared},
            by_name[e.name].kept() if e.name in by_name else [],
        )
        for e, kv in zip(entries, keys, strict=True)
    }
    globals_ = _ini_section(
        "*",
        "shared by every model moetune exported",
        shared,
        by_name["*"].kept() if "*" in by_name else [],
    )
    head = old[0].lines or [
        "; llama-server --models-preset THIS_FILE (written by moetune export preset)",
        "version = 1",
        "",
    ]
    out: list[str] = list(head)
    wrote_globals = False
    for section in old[1:]:
        if section.name == "*" and section.ours:
            out += globals_ if shared else []
            wrote_globals = True
        elif section.name in mine and section.ours:
            out += mine.pop(section.name)
        else:
            out += section.lines
    if shared and not wrote_globals and not user_globals:
        out += globals_
    for lines in mine.values():
        out += lines
    return "\n".join(out).rstrip("\n") + "\n"


# --- llama-swap (YAML) -------------------------------------------------------------------------


def _yaml_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _swap_block(entry: ServeEntry, binary: str, shared: Sequence[Pair]) -> list[str]:
    own = [pair for pair in arg_pairs(entry.args) if pair not in shared]
    cmd = shlex.join([binary, "--port", "PORT_", *words(own)]).replace("PORT_", "${PORT}")
    if shared:
        cmd += " ${" + SHARED_MACRO + "}"
    return [
        f"  # {MARK} begin {entry.name}",
        f"  # {'tuned' if entry.tuned else 'PREDICTED'}: {entry.note}",
        f"  {_yaml_quote(entry.name)}:",
        f"    cmd: {_yaml_quote(cmd)}",
        f"  # {MARK} end {entry.name}",
    ]


def _shared_pairs(entries: Sequence[ServeEntry]) -> list[Pair]:
    """The flag-value pairs every command has, never a model's source."""
    if len(entries) < 2:
        return []
    found = [arg_pairs(e.args) for e in entries]
    return [
        pair
        for pair in found[0]
        if _key(pair) not in _SOURCE_KEYS and all(pair in other for other in found[1:])
    ]


def llama_swap_text(entries: Sequence[ServeEntry], binary: str, existing: str | None = None) -> str:
    """The llama-swap config for ``entries``, merged into ``existing`` when given: moetune's
    model blocks (between its begin/end comments) and its macro are replaced, the rest kept."""
    shared_pairs = _shared_pairs(entries)
    blocks = {e.name: _swap_block(e, binary, shared_pairs) for e in entries}
    shared = words(shared_pairs)
    macro = f"  {SHARED_MACRO}: {_yaml_quote(shlex.join(shared))}"
    if not existing:
        lines = ["# llama-swap config written by moetune export llama-swap"]
        if shared:
            lines += ["macros:", macro]
        lines += ["models:"]
        for block in blocks.values():
            lines += block
        return "\n".join(lines) + "\n"
    out: list[str] = []
    skipping: str | None = None
    for line in existing.splitlines():
        begin = re.match(rf"^\s*# {MARK} begin (.+)$", line)
        if skipping is not None:
            if re.match(rf"^\s*# {MARK} end ", line):
                skipping = None
            continue
        if begin:
            name = begin[1].strip()
            out += blocks.pop(name, [])
            skipping = name
            continue
        if line.startswith(f"  {SHARED_MACRO}:"):
            out += [macro] if shared else []
            shared = []
            continue
        out.append(line)
        if line.rstrip() == "models:":
            for block in blocks.values():
                out += block
            blocks = {}
        if line.rstrip() == "macros:" and shared:
            out.append(macro)
            shared = []
    if shared:
        out[:0] = ["macros:", macro]
    if blocks:
        out.append("models:")
        for block in blocks.values():
            out += block
    return "\n".join(out) + "\n"


# --- each model's entry: its tuned profile, else its plan -----------------------------------------


def export_entries(
    models: list[str],
    ctx: Ctx | None,
    cache_type: str | None,
    hardware: tuple[str | None, Sizes | None],
    require_tuned: bool,
    *,
    warn: Callable[[str], None],
) -> tuple[list[ServeEntry], str]:
    """Each model's entry (tuned, else planned: ``warn`` says so) and the llama-server the
    commands run; no ``models``: every tuned profile's (the newest of each model file)."""
    from moetune.errors import BadValueError
    from moetune.store.tuned import ProfileStore

    store = ProfileStore()
    if not models:
        profiles = _newest_per_model(store.good(warn))
        if not profiles:
            raise BadValueError(
                "no tuned profiles to export",
                hint="tune one with `moetune run MODEL`, or name the models",
            )
        return [_tuned(p) for p in profiles], profiles[0].command[0]
    entries: list[ServeEntry] = []
    binary: str | None = None
    for text in models:
        entry, tuned_binary = _entry(
            store,
            text,
            ctx=ctx,
            cache_type=cache_type,
            hardware=hardware,
            require_tuned=require_tuned,
            warn=warn,
        )
        entries.append(entry)
        binary = binary or tuned_binary
    from moetune.llamacpp.process import server_for_commands

    return entries, binary or server_for_commands()


def _entry(
    store: ProfileStore,
    text: str,
    *,
    ctx: Ctx | None,
    cache_type: str | None,
    hardware: tuple[str | None, Sizes | None],
    require_tuned: bool,
    warn: Callable[[str], None],
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
                store,
                model_identity(named.path),
                ctx.tokens if ctx else None,
                cache_type,
                warn=warn,
            )
            return _tuned(profile), profile.command[0]
        except ProfileNotFoundError as exc:
            if require_tuned:
                raise
            missing = exc
    elif require_tuned:
        require_weights(named)
    return _planned(named, ctx, cache_type, hardware, missing, warn=warn), None


def _newest_per_model(profiles: list[TunedProfile]) -> list[TunedProfile]:
    """One profile per model file: the newest."""
    newest: dict[str, TunedProfile] = {}
    for profile in sorted(profiles, key=lambda p: p.tuned_at, reverse=True):
        newest.setdefault(profile.model.path, profile)
    return list(newest.values())


def _name(args: list[str], fallback: str) -> str:
    """The model id requests use: the -hf name, else the file's name without .gguf."""
    if "-hf" in args[:-1]:
        return args[args.index("-hf") + 1]
    return fallback.removesuffix(".gguf")


def _tuned(profile: TunedProfile) -> ServeEntry:
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
    *,
    warn: Callable[[str], None],
) -> ServeEntry:
    from moetune.errors import DoesNotFitError
    from moetune.jobs.names import DEFAULT_CACHE_TYPE
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
    why = missing.message if missing is not None else f"no tuned profile for {named.facts.paths[0]}"
    warn(f"{why}: exporting moetune's plan (predicted, not measured)")
    note = (
        f"no tuned profile; plan for GPU {source}, ctx {plan.settings.n_ctx}, predicted "
        f"peak {format_bytes(rec.memory.gpu_bytes)}"
    )
    args = list(rec.command[1:])
    return ServeEntry(_name(args, Path(str(named.facts.paths[0])).name), tuple(args), False, note)
