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
from collections.abc import Sequence
from typing import NamedTuple

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
