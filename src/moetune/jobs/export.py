"""``moetune export``: serve what was tuned, several models from one config.

- ``preset``: llama-server's router mode (``llama-server --models-preset FILE``, build 11434
  tools/server/README.md "Model presets"): an INI file, a section per model whose keys are
  the long flag names without dashes (``n-cpu-moe = 12``), a bare flag ``= true``, the model
  as ``model = PATH`` or ``hf-repo = user/model:QUANT``; ``[*]`` holds what every model
  shares and nothing that moves memory or placement (the router cascades ``[*]`` into every
  model's arguments, a model added by hand too: tools/server/server-models.cpp). How many
  models stay loaded is the router's own ``--models-max`` (default 4; beyond it the least
  recently used is unloaded), never a preset key: ``router_command`` is the command line to
  start it with, ``--models-max 1`` unless the models fit together (``check_together``).
- ``llama-swap``: its YAML ``models:`` map, each entry a ``cmd`` with ``${PORT}``; the
  shared flags are one macro, ``${moetune-shared}``. No group (or matrix set) names them, so
  llama-swap runs one of them at a time (its default: a model in no group, or in no set of
  its ``matrix``, runs alone).

Each model's entry comes from its tuned profile (the measured winner), else from its plan
(marked predicted). Re-exporting into an existing file replaces moetune's own entries of the
models exported (they are marked) and keeps the rest: other models' entries, and everything
written by hand (other sections and models, and in a preset's entries whatever follows the
"kept" line).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from moetune.core.plan import PlanResult
    from moetune.errors import ProfileNotFoundError
    from moetune.jobs.models import Model
    from moetune.jobs.pick import Pick
    from moetune.store.tuned import ProfileStore, TunedProfile

from moetune.core.flags import FLAGS, FlagRole, Pair, flag, pairs, words
from moetune.core.settings import OP_OFFLOAD_ENV
from moetune.errors import BadValueError
from moetune.jobs.quoting import visible, word_bytes
from moetune.record import OMIT_EMPTY, record

FORMATS = ("preset", "llama-swap")
MARK = "moetune:"  # the comment that starts each of moetune's entries
KEPT = "--- below this line: your own, kept on re-export ---"
SHARED_MACRO = "moetune-shared"
# the preset-only key that loads a model when the router starts (common/arg.cpp, build 11434;
# server-models.cpp refuses more of them than --models-max)
LOAD_ON_STARTUP = "load-on-startup"
# the source of a model, never shared, never in [*]: the preset keys of the flags that name the
# model (-m, -hf, -mu) or a companion's file (-mm, -md)
_SOURCE_KEYS = frozenset(
    f.preset
    for f in FLAGS
    if f.preset is not None and (f.role is FlagRole.MODEL or f.file or f is flag("-m"))
)


@record(frozen=True, kw_only=True)
class DevicePeak:
    """What one model holds on one device when it is loaded: its measured peak (a tuned
    profile on one device), else its target (tuned on several: each device's) or its plan's
    predicted peak; and the budget it was tuned or planned for there."""

    device: str  # llama.cpp's name (CUDA0), an RPC device with its server (RPC0 host:port)
    peak_bytes: int
    budget_bytes: int
    size_bytes: int | None = field(default=None, metadata=OMIT_EMPTY)  # the device's memory
    measured: bool = False


@record(frozen=True)
class ServeEntry:
    """One model to serve: its name (the section, the model id requests use), llama-server's
    arguments (no binary), and where they come from."""

    name: str
    args: tuple[str, ...]
    tuned: bool
    note: str  # one line: tuned when, on what, how fast; or what the plan predicts
    # the variables its llama-server runs with (the op-offload threshold): llama-swap sets
    # them per model (``env:``); a preset cannot, they belong to the router's process
    env: tuple[tuple[str, str], ...] = ()
    peaks: tuple[DevicePeak, ...] = ()  # what it holds on each device (check_together)
    # planned together (--together): loaded when the router starts (``load-on-startup``), one
    # of llama-swap's group that runs them at once
    load_on_startup: bool = False


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
    """The pair's preset key, without dashes: a short flag by its long name (the flag table's
    ``preset``), a long one as written."""
    if pair.flag is not None and pair.flag.preset is not None and not pair.key.startswith("--"):
        return pair.flag.preset
    return pair.key.lstrip("-")


def shareable(pair: Pair) -> bool:
    """Whether ``pair`` may go into what every model shares (``[*]``, llama-swap's macro):
    a flag of llama-server's table that moetune passes through as it is and that moves no
    memory or speed (sampling, the chat template, the HTTP server's); never the model, a
    placement, the context, the cache, the slots, the batch sizes, the devices, ``--fit``
    (the flag table's roles and ``moves``, as ``moving_env`` reads them), nor a word the
    table does not know."""
    return pair.flag is not None and pair.flag.role is FlagRole.PASS and not pair.flag.moves


def _shared(entries: Sequence[dict[str, str]], tuned: frozenset[str]) -> dict[str, str]:
    """The keys every entry has with the same value, but a model's source and the keys of
    ``tuned`` (those that move memory or placement in any entry)."""
    if len(entries) < 2:
        return {}
    first = entries[0]
    return {
        k: v
        for k, v in first.items()
        if k not in _SOURCE_KEYS and k not in tuned and all(e.get(k) == v for e in entries[1:])
    }


def _tuned_keys(entries: Sequence[ServeEntry]) -> frozenset[str]:
    """The preset keys of the arguments of ``entries`` that may not be shared."""
    return frozenset(
        _key(pair) for e in entries for pair in arg_pairs(e.args) if not shareable(pair)
    )


# --- names and values: what each format can hold -----------------------------------------------


def _lines(text: str) -> list[str]:
    """``text``'s lines, split where llama-server's preset parser and YAML break a line
    (``\\r\\n``, ``\\n``, ``\\r``; never on the other characters ``str.splitlines`` takes)."""
    lines = re.split(r"\r\n|\n|\r", text)
    return lines[:-1] if lines and not lines[-1] else lines


def _check_name(entry: ServeEntry, fmt: str) -> None:
    """A model name is the id clients send: printable text, no space at either end."""
    name = entry.name
    problem = None
    if not name:
        problem = "it is empty"
    elif not name.isprintable():
        bad = next(char for char in name if not char.isprintable())
        problem = f"it holds {visible(bad)!r}, a character that is not printable"
    elif name != name.strip():
        problem = "it starts or ends with a space"
    elif fmt == "preset" and "]" in name:
        problem = "a preset section's name cannot hold ']'"
    elif fmt == "preset" and name == "*":
        problem = "[*] is the preset's section for every model"
    elif fmt == "llama-swap" and "${" in name:
        problem = "llama-swap reads '${' as the start of a macro"
    if problem:
        raise BadValueError(
            f"cannot export the model {visible(name)!r} ({fmt}): {problem}",
            hint="rename the model file (or give -hf a plain name)",
        )


def _check_unique(names: Sequence[str], fmt: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadValueError(
                f"two models would both be {name!r} in the {fmt} file",
                hint="export them one at a time, or rename one of the model files",
            )
        seen.add(name)


# --- the preset (INI) --------------------------------------------------------------------------

# common/preset.cpp, build 11434: ident ::= [a-zA-Z_] [a-zA-Z0-9_.-]*
_INI_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_DEFAULT_SECTION = "default"  # COMMON_PRESET_DEFAULT_NAME: the keys before any section


def router_name(section: str) -> str:
    """The model id llama-server's router gives a section (``load_from_ini``): the tag
    after the last ``:`` canonical (``user/m:ud-q4_k_xl`` -> ``user/m:Q4_K_XL``)."""
    if section in ("*", _DEFAULT_SECTION) or ":" not in section:
        return section
    head, tag = section.rsplit(":", 1)
    found = re.search(r"[-.]([A-Z0-9_]+)\Z", tag, re.IGNORECASE | re.ASCII)
    canon = found[1] if found else tag
    return f"{head}:{''.join(c.upper() if c.isascii() else c for c in canon)}"


def _ini_problem(value: str) -> str | None:
    """What in ``value`` a preset line cannot hold: the value runs from the first character
    after ``= `` to the last before a line break, ``;``/``#`` or trailing blanks."""
    if "\n" in value or "\r" in value:
        return "a line break"
    for char in ";#":
        if char in value:
            return f"{char!r} (a comment starts there)"
    if value != value.strip(" \t"):
        return "a space or tab at its start or end"
    if "\0" in value:
        return "a NUL character"
    if any("\ud800" <= char <= "\udfff" for char in value):
        return "bytes that are not UTF-8"
    return None


def _check_preset_keys(entry: ServeEntry, keys: dict[str, str]) -> None:
    for key, value in keys.items():
        if not _INI_KEY.fullmatch(key):
            raise BadValueError(
                f"cannot export the model {entry.name!r} (preset): its argument "
                f"{visible(key)!r} is not a flag llama-server's preset can name"
            )
        problem = _ini_problem(value)
        if problem:
            raise BadValueError(
                f"cannot export the model {entry.name!r} (preset): its {key} "
                f"{visible(value)!r} holds {problem}, which llama-server's preset cannot hold",
                hint="rename that file or folder, or export llama-swap (it quotes arguments)",
            )


def _header(line: str) -> str | None:
    """The section a line opens (``header-line ::= "[" ws name ws "]" eol``), else None."""
    if not line.startswith("["):
        return None
    rest = line[1:].lstrip(" \t")
    end = rest.find("]")
    tail = rest[end + 1 :].lstrip(" \t")
    if end < 1 or (tail and tail[0] not in ";#"):
        return None
    return rest[:end]


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
    for line in _lines(text):
        name = _header(line)
        if name is not None:
            sections.append(_Section(name, [line]))
        else:
            sections[-1].lines.append(line)
    return sections


def router_env_notes(entry: ServeEntry) -> list[str]:
    """What a preset cannot say of ``entry``'s variables, as comments: a preset holds flags
    only, and the router starts each model with a copy of its own environment
    (tools/server/server-models.cpp: ``base_env`` is read once when the router starts and
    copied into every child's), so a variable is process-wide: every model gets the one
    the router was started with."""
    return [
        f"{MARK} needs {visible(key)}={visible(value)}: a process-wide variable of the "
        f"router, not a preset key: start it as {visible(key)}={visible(value)} "
        "llama-server --models-preset FILE (every model it starts inherits it)"
        for key, value in entry.env
    ]


def _ini_section(
    name: str, note: str, keys: dict[str, str], kept: list[str], notes: Sequence[str] = ()
) -> list[str]:
    lines = [f"[{name}]", f"; {MARK} {visible(note)}", *(f"; {n}" for n in notes)]
    lines += [f"{key} = {value}" for key, value in keys.items()]
    lines += [f"; {KEPT}", *kept]
    while lines and not lines[-1].strip():
        lines.pop()
    return [*lines, ""]


_HEAD = re.compile(
    r"^; llama-server --models-preset THIS_FILE .*\(written by moetune export preset\)$"
)


def _head_line(models_max: int) -> str:
    return (
        f"; llama-server --models-preset THIS_FILE --models-max {models_max} "
        "(written by moetune export preset)"
    )


def _section_keys(section: _Section) -> dict[str, str]:
    """The ``key = value`` lines of ``section`` (comments and the header left out; the
    value as the preset parser reads it: up to a comment, blanks stripped)."""
    found: dict[str, str] = {}
    for line in section.lines[1:]:
        if line.lstrip(" \t").startswith((";", "#")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        found[key.strip(" \t")] = re.split(r"[;#]", value, maxsplit=1)[0].strip(" \t")
    return found


def _inherit(section: _Section, keys: dict[str, str]) -> list[str]:
    """One of moetune's sections kept on re-export with ``keys`` (what it took from the old
    ``[*]`` and the new one no longer holds) written into it, before its kept line."""
    own = _section_keys(section)
    missing = [f"{k} = {v}" for k, v in keys.items() if k not in own]
    if not missing:
        return section.lines
    at = next((i for i, line in enumerate(section.lines) if KEPT in line), len(section.lines))
    return [*section.lines[:at], *missing, *section.lines[at:]]


def preset_text(
    entries: Sequence[ServeEntry], existing: str | None = None, models_max: int = 1
) -> str:
    """The preset for ``entries``, merged into ``existing`` (a file exported before and
    edited by hand) when given. Each section is named as the router names it; a name or
    value the format cannot hold, or a section of that name written by hand, is refused.
    ``[*]`` holds only what every model shares and moves neither memory nor placement
    (``shareable``); a section of moetune's that this export keeps as it was gets what it
    took from an older ``[*]`` that the new one no longer holds. The head's comment names
    the router's command line (``models_max``: its ``--models-max``)."""
    keys = [preset_keys(e.args) for e in entries]
    for entry, kv in zip(entries, keys, strict=True):
        _check_name(entry, "preset")
        _check_preset_keys(entry, kv)
    names = [router_name(e.name) for e in entries]
    _check_unique(names, "preset")
    old = _sections(existing) if existing else [_Section(None, [])]
    by_name = {router_name(s.name): s for s in old if s.name is not None}
    for entry, name in zip(entries, names, strict=True):
        hand = next((s for s in old[1:] if router_name(s.name or "") == name and not s.ours), None)
        if hand is not None:
            raise BadValueError(
                f"the preset already has a section [{hand.name}] written by hand: moetune's "
                f"entry for {entry.name!r} would be a second one",
                hint="rename or remove that section, or leave the model out of the export",
            )
    user_globals = "*" in by_name and not by_name["*"].ours
    tuned = _tuned_keys(entries)
    shared = {} if user_globals else _shared(keys, tuned)
    if not shared and "*" in by_name and by_name["*"].ours:  # one model now: no [*] of ours
        shared = _shared([*keys, *keys], tuned)
    old_globals = _section_keys(by_name["*"]) if "*" in by_name and by_name["*"].ours else {}
    lost = {k: v for k, v in old_globals.items() if shared.get(k) != v}
    mine = {
        name: _ini_section(
            name,
            ("tuned" if e.tuned else "PREDICTED") + f": {e.note}",
            {k: v for k, v in kv.items() if k not in shared}
            | ({LOAD_ON_STARTUP: "true"} if e.load_on_startup else {}),
            by_name[name].kept() if name in by_name else [],
            router_env_notes(e),
        )
        for e, name, kv in zip(entries, names, keys, strict=True)
    }
    globals_ = _ini_section(
        "*",
        "shared by every model moetune exported",
        shared,
        by_name["*"].kept() if "*" in by_name else [],
    )
    head = [
        _head_line(models_max) if _HEAD.match(line) else line
        for line in old[0].lines or [_head_line(models_max), "version = 1", ""]
    ]
    out: list[str] = list(head)
    wrote_globals = False
    written: set[str] = set()
    for section in old[1:]:
        name = router_name(section.name or "")
        if section.ours and name in written:  # a second copy of one of moetune's sections
            continue
        if name == "*" and section.ours:
            out += globals_ if shared else []
            wrote_globals = True
        elif name in mine and section.ours:
            out += mine.pop(name)
        elif section.ours and lost:
            out += _inherit(section, lost)
        else:
            out += section.lines
        written.add(name)
    if shared and not wrote_globals and not user_globals:
        out += globals_
    for lines in mine.values():
        out += lines
    return "\n".join(out).rstrip("\n") + "\n"


# --- llama-swap (YAML) -------------------------------------------------------------------------

_NO_FOLD = 1 << 30  # PyYAML's line width: never fold a scalar
_MACRO_MAX = 1023  # llama-swap refuses a macro value of 1024 characters or more


def _yaml_lines(mapping: dict[str, object], indent: str) -> list[str]:
    """``mapping`` through PyYAML's safe dumper, every scalar double-quoted (its escapes hold
    any character), indented by ``indent``."""
    import yaml

    text = yaml.safe_dump(
        mapping, default_style='"', allow_unicode=True, sort_keys=False, width=_NO_FOLD
    )
    return [indent + line for line in _lines(text)]


def swap_word(entry: ServeEntry, word: str) -> str:
    """``word`` quoted for llama-swap's ``cmd``: it drops comment lines and splits the rest
    POSIX-style (billziss-gh/golib shlex), so a single-quoted word comes back exactly unless
    it holds a newline or a ``${`` macro."""
    problem = None
    if "\n" in word:
        problem = "a newline (llama-swap reads cmd line by line)"
    elif "${" in word:
        problem = "'${' (llama-swap reads it as the start of a macro)"
    else:
        try:
            word_bytes(word)
        except BadValueError as exc:
            problem = str(exc)
    if problem:
        raise BadValueError(
            f"cannot export the model {entry.name!r} (llama-swap): its argument "
            f"{visible(word)!r} holds {problem}",
            hint="rename that file or folder",
        )
    return shlex.quote(word)


def _swap_cmd(entry: ServeEntry, binary: str, shared: Sequence[Pair]) -> str:
    own = [pair for pair in arg_pairs(entry.args) if pair not in shared]
    quoted = [swap_word(entry, word) for word in words(own)]
    cmd = " ".join([swap_word(entry, binary), "--port", "${PORT}", *quoted])
    return cmd + (" ${" + SHARED_MACRO + "}" if shared else "")


def _swap_block(entry: ServeEntry, cmd: str) -> list[str]:
    settings: dict[str, object] = {"cmd": cmd}
    if entry.env:  # llama-swap's env: a list of "NAME=value" set for this model's cmd
        settings["env"] = [f"{key}={value}" for key, value in entry.env]
    return [
        f"  # {MARK} begin {entry.name}",
        f"  # {'tuned' if entry.tuned else 'PREDICTED'}: {visible(entry.note)}",
        *_yaml_lines({entry.name: settings}, "  "),
        f"  # {MARK} end {entry.name}",
    ]


GROUP = "moetune-together"  # llama-swap's group of the models planned together
_GROUP_MARK = "group "  # its marked block's name: "moetune: begin group moetune-together"


def _group_block(entries: Sequence[ServeEntry]) -> list[str]:
    """llama-swap's group of the models planned together (its legacy ``groups:``, which a
    config holds instead of a ``matrix:``): ``swap: false`` runs every member at once,
    ``exclusive: true`` unloads the other groups' models when one of these loads."""
    return [
        f"  # {MARK} begin {_GROUP_MARK}{GROUP}",
        f"  # the models moetune planned together: {len(entries)} loaded at once",
        f'  "{GROUP}":',
        "    swap: false",
        "    exclusive: true",
        *_yaml_lines({"members": [e.name for e in entries]}, "    "),
        f"  # {MARK} end {_GROUP_MARK}{GROUP}",
    ]


def _shared_pairs(entries: Sequence[ServeEntry]) -> list[Pair]:
    """The flag-value pairs every command has, never a model's source nor a flag that moves
    memory or placement in any of them (``shareable``)."""
    if len(entries) < 2:
        return []
    found = [arg_pairs(e.args) for e in entries]
    tuned = _tuned_keys(entries)
    return [
        pair
        for pair in found[0]
        if _key(pair) not in _SOURCE_KEYS
        and _key(pair) not in tuned
        and all(pair in other for other in found[1:])
    ]


def _opens(line: str, key: str) -> bool:
    """``line`` opens the top-level block map ``key`` (``models:``, maybe a comment after)."""
    return re.match(rf"^{key}:[ \t]*(#.*)?$", line) is not None


_BEGIN = re.compile(rf"^\s*# {MARK} begin (.+)$")
_END = re.compile(rf"^\s*# {MARK} end ")
_MACRO_LINE = re.compile(rf'^  "?{SHARED_MACRO}"?:')


def _swap_merge(
    existing: str,
    blocks: dict[str, list[str]],
    macro: list[str] | None,
    keep: Callable[[list[str]], list[str]] | None = None,
) -> list[str]:
    """``existing`` with moetune's marked blocks of ``blocks``' models replaced where they
    stand and its macro replaced by ``macro`` (None: dropped); new blocks after ``models:``;
    the marked block of another model through ``keep`` (None: dropped); everything else kept
    as written."""
    lines = _lines(existing)
    present = {begin[1] for line in lines if (begin := _BEGIN.match(line))}
    replaced = set(blocks)
    new = {name: block for name, block in blocks.items() if name not in present}
    out: list[str] = []

    def closed(name: str, block: list[str]) -> list[str]:
        if name in replaced:
            return blocks.get(name, [])
        return keep(block) if keep else []

    current: tuple[str, list[str]] | None = None  # the marked block being read
    for line in lines:
        if current is not None:
            current[1].append(line)
            if _END.match(line):
                out += closed(*current)
                current = None
            continue
        if begin := _BEGIN.match(line):
            current = (begin[1], [line])
            continue
        if _MACRO_LINE.match(line):
            out += macro or []
            macro = None
            continue
        out.append(line)
        if _opens(line, "models"):
            for block in new.values():
                out += block
            new = {}
        if _opens(line, "macros") and macro:
            out += macro
            macro = None
    if current is not None:  # the file ends inside a marked block
        out += closed(*current)
    if macro:
        out[:0] = ["macros:", *macro]
    if new:
        out.append("models:")
        for block in new.values():
            out += block
    return out


def _shared_value(text: str) -> str | None:
    """The value of moetune's shared macro in a llama-swap file, None where it has none (or
    is not YAML: _swap_keys says so)."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return None
    macros = doc.get("macros") if isinstance(doc, dict) else None
    value = macros.get(SHARED_MACRO) if isinstance(macros, dict) else None
    return value if isinstance(value, str) else None


def _kept_block(block: list[str], old: str | None, new: str) -> list[str]:
    """Another model's marked block, kept on re-export: as it was, unless its ``cmd`` uses the
    shared macro and the macro's value changes (from ``old`` to ``new``, "" for none): then
    with the old value written in the macro's place, so that its command stays the same."""
    import yaml

    macro = "${" + SHARED_MACRO + "}"
    if old is None or old == new or not any(macro in line for line in block):
        return block
    try:
        doc = yaml.safe_load("\n".join(block))
    except (yaml.YAMLError, RecursionError):
        return block
    if not isinstance(doc, dict) or len(doc) != 1:
        return block
    name, entry = next(iter(doc.items()))
    if not isinstance(entry, dict) or not isinstance(entry.get("cmd"), str):
        return block
    entry = {**entry, "cmd": entry["cmd"].replace(macro, old)}
    body = [i for i, line in enumerate(block) if not line.lstrip().startswith("#")]
    if not body:
        return block
    return [*block[: body[0]], *_yaml_lines({name: entry}, "  "), *block[body[-1] + 1 :]]


def _swap_keys(text: str, what: str) -> tuple[dict[str, object], list[str]]:
    """The document ``text`` and the keys of its ``models:`` map (as llama-swap reads them:
    a repeated key there or at the top is an error); BadValueError when it is not one."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadValueError(f"{what} is not YAML moetune can merge into: {first}") from None
    if root is None:
        return {}, []
    if not isinstance(root, yaml.MappingNode) or not isinstance(doc, dict):
        raise BadValueError(f"{what} is not a YAML map of llama-swap settings")
    models: list[str] = []
    for key, value in root.value:
        if key.value == "models" and isinstance(value, yaml.MappingNode):
            models = [k.value for k, _ in value.value if isinstance(k, yaml.ScalarNode)]
    for keys, where in (([k.value for k, _ in root.value], "at its top"), (models, "in models:")):
        repeated = next((k for k in keys if keys.count(k) > 1), None)
        if repeated is not None:
            raise BadValueError(f"{what} has {repeated!r} twice {where}")
    return doc, models


def llama_swap_text(
    entries: Sequence[ServeEntry], binary: str, existing: str | None = None, group: bool = False
) -> str:
    """The llama-swap config for ``entries``, merged into ``existing`` when given: moetune's
    blocks (between its begin/end comments) of these models and its macro are replaced, the
    rest kept (other models' blocks too, the old macro's value written into those that use
    it when it changes). ``group``: the models were planned together, and one group of
    llama-swap's ``groups:`` (``swap: false``: its members run at once; ``exclusive: true``:
    loading one unloads the other groups' models) names them (``_group_block``).
    Every value goes through PyYAML's safe dumper; the result is read back to check that it
    holds exactly the entries meant and every model written by hand."""
    for entry in entries:
        _check_name(entry, "llama-swap")
    _check_unique([e.name for e in entries], "llama-swap")
    shared_pairs = _shared_pairs(entries)
    shared = " ".join(shlex.quote(w) for w in words(shared_pairs))
    if len(shared) > _MACRO_MAX:
        shared_pairs, shared = [], ""
    cmds = {e.name: _swap_cmd(e, binary, shared_pairs) for e in entries}
    blocks = {e.name: _swap_block(e, cmds[e.name]) for e in entries}
    macro = _yaml_lines({SHARED_MACRO: shared}, "  ") if shared_pairs else None
    hand: list[str] = []
    kept: list[str] = []  # the models of moetune's blocks that this export leaves as they are
    if existing:
        _, hand = _swap_keys("\n".join(_swap_merge(existing, {}, None)), "the llama-swap file")
        clash = next((e.name for e in entries if e.name in hand), None)
        if clash is not None:
            raise BadValueError(
                f"the llama-swap file already has a model {clash!r} written by hand: "
                "moetune's entry would be a second one",
                hint="rename or remove that entry, or leave the model out of the export",
            )
        old_shared = _shared_value(existing)
        kept = [
            name
            for line in _lines(existing)
            if (begin := _BEGIN.match(line))
            and (name := begin[1]) not in cmds
            and not name.startswith(_GROUP_MARK)
        ]
        present = any(
            (begin := _BEGIN.match(line)) and begin[1] == _GROUP_MARK + GROUP
            for line in _lines(existing)
        )
        merged = dict(blocks)
        if group and present:  # replaced where it stands
            merged[_GROUP_MARK + GROUP] = _group_block(entries)
        lines = _swap_merge(
            existing,
            merged,
            macro,
            lambda block: _kept_block(block, old_shared, shared),
        )
        if group and not present:
            old_doc, _ = _swap_keys(existing, "the llama-swap file")
            taken = next((k for k in ("groups", "matrix") if k in old_doc), None)
            if taken is not None:
                raise BadValueError(
                    f"the llama-swap file has its own {taken}: moetune's group of the models "
                    "planned together would be a second way to run models at once",
                    hint="export --together to a new file and merge the group by hand",
                )
            lines += ["groups:", *_group_block(entries)]
    else:
        lines = ["# llama-swap config written by moetune export llama-swap"]
        lines += ["macros:", *macro] if macro else []
        lines += ["models:"]
        for block in blocks.values():
            lines += block
        if group:
            lines += ["groups:", *_group_block(entries)]
    text = "\n".join(lines) + "\n"
    doc, models = _swap_keys(text, "the merged llama-swap file")
    got = doc.get("models")
    macros = doc.get("macros")
    meant = (
        isinstance(got, dict)
        and all(isinstance(got.get(n), dict) and got[n].get("cmd") == c for n, c in cmds.items())
        and set(models) == set(hand) | set(kept) | set(cmds)
        and (not shared_pairs or (isinstance(macros, dict) and macros.get(SHARED_MACRO) == shared))
    )
    if group:
        groups = doc.get("groups")
        ours = groups.get(GROUP) if isinstance(groups, dict) else None
        meant = meant and isinstance(ours, dict) and ours.get("members") == list(cmds)
    if not meant:
        raise BadValueError(
            "cannot merge into the llama-swap file: moetune adds its models under a "
            "top-level block `models:` (and its macro under `macros:`)",
            hint="write those two keys in block style, or export to a new file",
        )
    return text


def export_text(
    fmt: str,
    entries: Sequence[ServeEntry],
    binary: str,
    existing: str | None = None,
    models_max: int = 1,
    *,
    group: bool = False,
) -> str:
    """``fmt``'s text of ``entries`` (a preset, or a llama-swap config whose commands run
    ``binary``), merged into ``existing``; ``models_max``: the router's ``--models-max``
    that a preset's head names."""
    if fmt == "preset":
        return preset_text(entries, existing, models_max)
    return llama_swap_text(entries, binary, existing, group)


def check_out(path: Path) -> None:
    """Refuse at once an ``--out`` file moetune could not write (before any plan is made)."""
    from moetune.store.files import check_writable

    check_writable(path)


def write_export(
    path: Path,
    fmt: str,
    entries: Sequence[ServeEntry],
    binary: str,
    models_max: int = 1,
    *,
    group: bool = False,
) -> None:
    """Update ``path`` with ``fmt``'s text of ``entries``: moetune's own entries replaced,
    everything written by hand kept (a read-merge-write under the file's lock)."""
    from moetune.store.files import update_text

    update_text(
        path, lambda existing: export_text(fmt, entries, binary, existing, models_max, group=group)
    )


@record(frozen=True, kw_only=True)
class ExportResult:
    """What ``export`` wrote (or printed) and how to serve it: ``router_command``, the
    command line that starts the router (llama-swap) on it, with the ``--models-max`` that
    keeps the models within their devices."""

    format: str
    out: str | None  # the file written; None: printed on stdout
    router_command: list[str]
    models_max: int
    models: tuple[ServeEntry, ...]
    left_out: list[str] = field(default_factory=list)  # models whose plan does not fit
    notes: list[str] = field(default_factory=list)  # what the stderr note says
    text: str | None = None  # the config, when printed (not written)


def serve_notes(
    fmt: str, command: Sequence[str], models_max: int, *, group: bool = False
) -> list[str]:
    """What to tell the user about serving the export: its command line, and how many of
    the models stay loaded (``group``: the models planned together, all loaded at once)."""
    line = shlex.join(command)
    if group and fmt == "preset":
        return [
            f"serve it with: {line} (the {models_max} models planned together load when the "
            "router starts and stay loaded; --models-max is the router's own flag)"
        ]
    if group:
        return [
            f"serve it with: {line} (its group {GROUP} runs the models planned together at once)"
        ]
    if fmt == "preset":
        held = (
            "one model loaded at a time: the router unloads the least recently used before it "
            "loads another"
            if models_max == 1
            else f"at most {models_max} models loaded at once"
            if models_max
            else "no limit on the models loaded at once"
        )
        return [f"serve it with: {line} ({held}; --models-max is the router's own flag)"]
    return [
        f"serve it with: {line} (llama-swap runs one of these models at a time: no group "
        "names them)"
    ]


# --- how many models at once: the router's command line ------------------------------------------

PRESET_PLACEHOLDER = "models.ini"  # the preset's name in router_command when it is printed
SWAP_PLACEHOLDER = "config.yaml"


def router_command(fmt: str, binary: str, out: Path | None, models_max: int) -> list[str]:
    """The command line that serves the export: the router (``binary``, the llama-server
    the models were tuned with where known) on the preset with ``--models-max``, a flag of
    its own command line (common/arg.cpp; a ``models-max`` key in the preset is only
    cascaded into the models' arguments); or llama-swap on its config. ``out`` None: the
    file's name is a placeholder (the export was printed)."""
    if fmt == "preset":
        path = str(out) if out is not None else PRESET_PLACEHOLDER
        return [binary, "--models-preset", path, "--models-max", str(models_max)]
    return ["llama-swap", "--config", str(out) if out is not None else SWAP_PLACEHOLDER]


def _rpc(device: str) -> bool:
    return re.fullmatch(r"RPC\d+( .*)?", device) is not None


def check_together(
    fmt: str, entries: Sequence[ServeEntry], models_max: int, *, group: bool = False
) -> None:
    """Refuse a ``models_max`` under which the models would not fit together: on some
    device the ``models_max`` largest of their peaks there (every model for 0, the router's
    "unlimited") add up to more than the smallest budget they were tuned or planned for
    there, or two of them would share an RPC device (ggml-rpc-server serves one client
    process at a time: the second waits for ever). llama-swap runs one at a time here (no
    group names them), so only 1 is taken."""
    from moetune.units import format_bytes

    if models_max < 0:
        raise BadValueError(f"--models-max {models_max}: give 1 or more (0: no limit)")
    if fmt != "preset" and models_max != 1 and not group:
        raise BadValueError(
            f"--models-max {models_max}: llama-swap runs one of these models at a time "
            "(no group names them); --models-max is the router's (export preset)"
        )
    at_once = len(entries) if models_max == 0 or group else min(models_max, len(entries))
    if at_once < 2:
        return
    unknown = [e.name for e in entries if not e.peaks]
    if unknown:
        raise BadValueError(
            f"--models-max {models_max}: moetune knows no device peak of {unknown[0]!r}, so "
            "it cannot tell whether the models fit together",
            hint="leave --models-max at 1: one model loaded at a time",
        )
    on: dict[str, list[DevicePeak]] = {}
    for entry in entries:
        for peak in entry.peaks:
            on.setdefault(peak.device, []).append(peak)
    for device, peaks in on.items():
        top = sorted(peaks, key=lambda p: p.peak_bytes, reverse=True)[:at_once]
        if len(top) < 2:
            continue
        need = " + ".join(format_bytes(p.peak_bytes) for p in top)
        if _rpc(device):
            raise BadValueError(
                f"--models-max {models_max}: {len(top)} models at once would share {device}, "
                "and an RPC device serves one process at a time (the second waits for ever)",
                hint="leave --models-max at 1: one model loaded at a time",
            )
        budget = min(peaks, key=lambda p: p.budget_bytes)
        if sum(p.peak_bytes for p in top) > budget.budget_bytes:
            has = f"which has {format_bytes(budget.budget_bytes)}"
            if budget.size_bytes is not None and budget.size_bytes != budget.budget_bytes:
                has = (
                    f"whose budget is {format_bytes(budget.budget_bytes)} "
                    f"of its {format_bytes(budget.size_bytes)}"
                )
            raise BadValueError(
                f"--models-max {models_max}: {len(top)} models at once need {need} on "
                f"{device}, {has}",
                hint="leave --models-max at 1: one model loaded at a time",
            )


# --- each model's entry: its tuned profile, else its plan -----------------------------------------


def export_entries(
    models: list[str],
    pick: Pick,
    require_tuned: bool,
    *,
    warn: Callable[[str], None],
    left_out: list[str] | None = None,
) -> tuple[list[ServeEntry], str]:
    """Each model's entry (the tuned profile ``pick`` chooses, else its plan for the devices
    and RAM of ``pick``: ``warn`` says so) and the llama-server the commands run; no
    ``models``: the tuned profile ``pick`` chooses of every model that has one (a model with
    several that match is refused, as a named one is). A model whose plan does not fit is
    said through ``warn``, left out and named in ``left_out``; when every model is left out,
    DoesNotFitError."""
    from moetune.errors import DoesNotFitError
    from moetune.store.tuned import ProfileStore, every_model_profile

    store = ProfileStore()
    if not models:
        tokens = pick.ctx.tokens if pick.ctx is not None else None
        profiles = every_model_profile(
            store, tokens, pick.cache_type, warn=warn, select=pick.select
        )
        if not profiles:
            raise BadValueError(
                "no tuned profiles to export",
                hint="tune one with `moetune run MODEL`, or name the models",
            )
        return [_tuned(p) for p in profiles], profiles[0].command[0]
    entries: list[ServeEntry] = []
    binary: str | None = None
    dropped: list[str] = []
    for text in models:
        try:
            entry, tuned_binary = _entry(store, text, pick, require_tuned, warn=warn)
        except DoesNotFitError as exc:
            if len(models) == 1:
                raise
            warn(f"left out of the export: {exc.message}")
            dropped.append(text)
            continue
        entries.append(entry)
        binary = binary or tuned_binary
    if left_out is not None:
        left_out += dropped
    if not entries:
        raise DoesNotFitError(f"no model fits: {', '.join(dropped)} (each said above)")
    from moetune.llamacpp.process import server_for_commands

    return entries, binary or server_for_commands()


def _entry(
    store: ProfileStore,
    text: str,
    pick: Pick,
    require_tuned: bool,
    *,
    warn: Callable[[str], None],
) -> tuple[ServeEntry, str | None]:
    """One model's entry: its tuned profile, else its plan; and the binary it was tuned with."""
    from moetune.jobs.launch import check_loadable
    from moetune.jobs.models import open_model
    from moetune.jobs.pick import tuned_profile
    from moetune.store.tuned import TunedProfile

    named = open_model(text).absolute()
    check_loadable(named.facts, "an entry", "export")  # as alias refuses it
    found = tuned_profile(store, named, pick, require_tuned=require_tuned, warn=warn)
    if isinstance(found, TunedProfile):
        return _tuned(found), found.command[0]
    return _planned(named, pick, found, warn=warn), None


def _name(args: list[str], fallback: str) -> str:
    """The model id requests use: the -hf name, else the file's name without .gguf."""
    if "-hf" in args[:-1]:
        return args[args.index("-hf") + 1]
    return fallback.removesuffix(".gguf")


def device_label(device: str, name: str | None) -> str:
    """A device as check_together tells devices apart: llama.cpp's name (``CUDA0``), an RPC
    device with its server (``RPC0 127.0.0.1:50052``: RPC0 of two routers' models may be
    two servers)."""
    return f"{device} {name}" if _rpc(device) and name else device


def _tuned_peaks(profile: TunedProfile) -> tuple[DevicePeak, ...]:
    """What the tuned model holds on each device: its measured peak on one device; on
    several (the profile keeps their sum) each device's target, which it was tuned within."""
    devices = profile.device_set
    settings = profile.settings
    if len(devices) == 1:
        d = devices[0]
        measured = profile.measured.vram_bytes
        return (
            DevicePeak(
                device=device_label(d.device, d.name),
                peak_bytes=settings.target_bytes if measured is None else measured,
                budget_bytes=settings.target_bytes,
                size_bytes=d.vram_total_bytes,
                measured=measured is not None,
            ),
        )
    targets = settings.device_targets
    if len(targets) != len(devices):
        targets = [settings.target_bytes] * len(devices)
    return tuple(
        DevicePeak(
            device=device_label(d.device, d.name),
            peak_bytes=t,
            budget_bytes=t,
            size_bytes=d.vram_total_bytes,
        )
        for d, t in zip(devices, targets, strict=True)
    )


def _tuned(profile: TunedProfile) -> ServeEntry:
    from moetune.units import format_bytes

    m = profile.measured
    speed = f", decode {m.decode_tps:.1f} tok/s" if m.decode_tps is not None else ""
    note = (
        f"{profile.model.file_name} on {profile.describe_devices()}, {profile.tuned_at[:10]}, "
        f"ctx {profile.settings.n_ctx}, peak {format_bytes(m.vram_bytes)}{speed}"
    )
    args = list(profile.command[1:])
    threshold = profile.settings.op_offload_min_batch
    env = () if threshold is None else ((OP_OFFLOAD_ENV, str(threshold)),)
    return ServeEntry(
        _name(args, profile.model.file_name), tuple(args), True, note, env, _tuned_peaks(profile)
    )


def _planned(
    named: Model,
    pick: Pick,
    missing: ProfileNotFoundError,
    *,
    warn: Callable[[str], None],
) -> ServeEntry:
    from moetune.errors import DoesNotFitError
    from moetune.jobs.pick import fallback_plan
    from moetune.units import format_bytes

    plan, source = fallback_plan(named, pick, missing)
    if not plan.fits:
        raise DoesNotFitError(f"{named.facts.paths[0]} does not fit: {plan.reason}")
    rec = plan.first  # the command a plan prints first
    warn(f"{missing.message}: exporting moetune's plan (predicted, not measured)")
    note = (
        f"no tuned profile; plan for GPU {source}, ctx {plan.settings.n_ctx}, predicted "
        f"peak {format_bytes(rec.memory.gpu_bytes)}"
    )
    args = list(rec.command[1:])
    name = _name(args, Path(str(named.facts.paths[0])).name)
    peaks = _planned_peaks(plan, pick.rpc)
    return ServeEntry(name, tuple(args), False, note, tuple(rec.env.items()), peaks)


def _planned_peaks(plan: PlanResult, rpc: str | None) -> tuple[DevicePeak, ...]:
    """What the planned model is predicted to hold on each device, and each one's budget
    (an RPC device named with its server from ``rpc``, in order)."""
    servers = [s.strip() for s in rpc.split(",") if s.strip()] if rpc else []
    several = bool(plan.device_budgets)
    peaks: list[DevicePeak] = []
    n_rpc = 0
    for index, memory in enumerate(plan.first.memory.devices):
        server = None
        if _rpc(memory.name):
            server = servers[n_rpc] if n_rpc < len(servers) else None
            n_rpc += 1
        budget = plan.device_budgets[index] if several else plan.budget_bytes
        peaks.append(
            DevicePeak(
                device=device_label(memory.name, server),
                peak_bytes=memory.total_bytes,
                budget_bytes=budget,
                size_bytes=None if several else plan.device_bytes,
            )
        )
    return tuple(peaks)


# --- models planned together (--together) ---------------------------------------------------------


def together_entries(
    models: Sequence[str],
    pick: Pick,
    weights: str | None,
    *,
    warn: Callable[[str], None],
) -> tuple[list[ServeEntry], str, bool]:
    """The entries of ``models`` tuned together (``run A B --together``: the newest set of
    their tuned profiles, measured), else planned to stay loaded together on the devices and
    RAM of ``pick`` (core/together.py: the budgets shared, the split by the weighted
    forecast), each loaded when the router starts; with an RPC device among them, planned
    one at a time (``warn`` says so) and not loaded on startup. The llama-server the commands
    run, and whether they are together."""
    from moetune.core.goal import goal_of
    from moetune.core.together import parse_weights, plan_together
    from moetune.jobs.devices import plan_devices
    from moetune.jobs.figures import ram_figure
    from moetune.jobs.launch import check_loadable
    from moetune.jobs.models import open_model
    from moetune.jobs.names import DEFAULT_CACHE_TYPE
    from moetune.jobs.plan import machine_figures, plan_inputs, plan_request
    from moetune.llamacpp.process import server_for_commands
    from moetune.units import format_bytes

    if len(models) < 2:
        raise BadValueError("--together: name two models or more")
    shares = parse_weights(weights, len(models))
    opened = []
    for text in models:
        named = open_model(text).absolute()
        check_loadable(named.facts, "an entry", "export")
        opened.append(named)
    tuned = _tuned_set(opened, pick, warn)
    if tuned is not None:
        return tuned
    found = plan_devices(
        vram=pick.vram,
        rpc=pick.rpc,
        gpu_index=None,
        gpu_profile=pick.gpu,
        overhead=None,
        server=None,
    )
    inputs = plan_inputs(
        found,
        pass_through=(),
        ctx=pick.ctx,
        cache_type=pick.cache_type or DEFAULT_CACHE_TYPE,
        targets=pick.targets,
        ram=pick.ram,
    )
    figures = machine_figures(found, ram_figure(None, measure=False, warn=warn), inputs.ram[2])
    inputs = inputs._replace(figures=figures)
    planned = [(Path(str(m.facts.paths[0])).name, m.facts, plan_request(m, inputs)) for m in opened]
    together = plan_together(planned, goal_of(None, None), shares)
    for line in together.warnings:
        warn(line)
    entries: list[ServeEntry] = []
    for member in together.models:
        rec = member.plan.first
        peaks = tuple(
            replace_peak(peak, budget)
            for peak, budget in zip(
                _planned_peaks(member.plan, pick.rpc), together.device_budgets, strict=True
            )
        )
        with_ = "together with the others" if together.together else "alone (one at a time)"
        note = (
            f"no tuned profile; planned {with_} for GPU {found.source}, ctx "
            f"{member.plan.settings.n_ctx}, predicted peak {format_bytes(rec.memory.gpu_bytes)}"
        )
        args = tuple(rec.command[1:])
        entries.append(
            ServeEntry(
                _name(list(args), member.name),
                args,
                False,
                note,
                tuple(rec.env.items()),
                peaks,
                load_on_startup=together.together,
            )
        )
    warn("exporting moetune's plans of the models together (predicted, not measured)")
    return entries, server_for_commands(), together.together


def replace_peak(peak: DevicePeak, budget: int) -> DevicePeak:
    """``peak`` with the whole device's budget (a model planned together within a share)."""
    from dataclasses import replace

    return replace(peak, budget_bytes=budget)


def _tuned_set(
    opened: Sequence[Model], pick: Pick, warn: Callable[[str], None]
) -> tuple[list[ServeEntry], str, bool] | None:
    """The entries of the tuned profiles of ``opened`` tuned together as one set (``run A B
    --together``: the newest set of exactly these model files, at ``pick``'s context and
    targets where given), each loaded when the router starts; None where no set has them."""
    from moetune.store.tuned import ProfileStore, model_identity, together_profiles

    identities = [model_identity(m.facts.paths[0]) for m in opened]
    n_ctx = pick.ctx.tokens if pick.ctx is not None else None
    targets = pick.targets.values if pick.targets is not None else ()
    found = together_profiles(ProfileStore().good(warn), identities, n_ctx=n_ctx, targets=targets)
    if found is None:
        return None
    from dataclasses import replace

    entries = [replace(_tuned(p), load_on_startup=True) for p in found]
    return entries, found[0].llama_cpp.binary, True
