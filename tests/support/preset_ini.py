"""llama-server's router preset reader, build 11434, re-implemented for the tests: the PEG
grammar of ``parse_ini_from_file`` and the section naming of ``load_from_ini``
(common/preset.cpp), so an exported file is read back the way the router reads it.

    newline     ::= "\\r\\n" / "\\n" / "\\r"
    ws          ::= [ \\t]*
    comment     ::= [;#] (!newline .)*
    eol         ::= ws comment? (newline / EOF)
    ident       ::= [a-zA-Z_] [a-zA-Z0-9_.-]*
    value       ::= (!(ws ([;#] / newline / EOF)) .)*
    header-line ::= "[" ws [^]]+ ws "]" eol
    kv-line     ::= ident ws "=" ws value eol
    comment-line::= ws comment (newline / EOF)
    blank-line  ::= ws (newline / EOF)
    ini         ::= (header-line / kv-line / comment-line / blank-line)* EOF

Each repetition is greedy and never gives back (a PEG), unlike a regular expression.
"""

from __future__ import annotations

import re
from typing import NamedTuple

DEFAULT = "default"  # COMMON_PRESET_DEFAULT_NAME
_IDENT_START = re.compile(r"[a-zA-Z_]")
_IDENT_REST = re.compile(r"[a-zA-Z0-9_.-]")


class PresetSyntaxError(ValueError):
    """The router refuses the file: "failed to parse server config file"."""


class Preset(NamedTuple):
    """What the router takes from a preset: ``[*]``'s keys and each model's."""

    shared: dict[str, str]
    models: dict[str, dict[str, str]]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def at(self, pos: int) -> str:
        return self.text[pos] if pos < len(self.text) else ""

    def ws(self, pos: int) -> int:
        while self.at(pos) in (" ", "\t"):
            pos += 1
        return pos

    def newline(self, pos: int) -> int | None:
        if self.text.startswith("\r\n", pos):
            return pos + 2
        if self.at(pos) in ("\n", "\r"):
            return pos + 1
        return None

    def end_of_line(self, pos: int) -> int | None:
        """newline / EOF: where the next line starts."""
        if pos >= len(self.text):
            return pos
        return self.newline(pos)

    def comment(self, pos: int) -> int | None:
        if self.at(pos) not in (";", "#"):
            return None
        pos += 1
        while pos < len(self.text) and self.newline(pos) is None:
            pos += 1
        return pos

    def eol(self, pos: int) -> int | None:
        pos = self.ws(pos)
        after = self.comment(pos)
        return self.end_of_line(after if after is not None else pos)

    def eol_start(self, pos: int) -> bool:
        pos = self.ws(pos)
        return pos >= len(self.text) or self.at(pos) in (";", "#") or self.newline(pos) is not None

    def header(self, pos: int) -> tuple[int, str] | None:
        if self.at(pos) != "[":
            return None
        start = self.ws(pos + 1)
        end = start
        while end < len(self.text) and self.text[end] != "]":
            end += 1
        if end == start:
            return None
        after = self.ws(end)
        if self.at(after) != "]":
            return None
        next_line = self.eol(after + 1)
        return None if next_line is None else (next_line, self.text[start:end])

    def key_value(self, pos: int) -> tuple[int, str, str] | None:
        if not _IDENT_START.fullmatch(self.at(pos) or "\0"):
            return None
        end = pos + 1
        while _IDENT_REST.fullmatch(self.at(end) or "\0"):
            end += 1
        key = self.text[pos:end]
        at = self.ws(end)
        if self.at(at) != "=":
            return None
        start = self.ws(at + 1)
        stop = start
        while not self.eol_start(stop):
            stop += 1
        next_line = self.eol(stop)
        return None if next_line is None else (next_line, key, self.text[start:stop])

    def comment_or_blank(self, pos: int) -> int | None:
        at = self.ws(pos)
        after = self.comment(at)
        return self.end_of_line(after if after is not None else at)


def parse_sections(text: str) -> dict[str, dict[str, str]]:
    """``parse_ini_from_file``: each section's keys (a repeated section starts over, a
    repeated key keeps its last value; keys before any section are ``default``'s)."""
    parser = _Parser(text)
    parsed: dict[str, dict[str, str]] = {}
    section = DEFAULT
    pos = 0
    while pos < len(text):
        header = parser.header(pos)
        if header is not None:
            pos, section = header
            parsed[section] = {}
            continue
        pair = parser.key_value(pos)
        if pair is not None:
            pos, key, value = pair
            parsed.setdefault(section, {})[key] = value
            continue
        after = parser.comment_or_blank(pos)
        if after is None or after == pos:
            line = text[:pos].count("\n") + 1
            raise PresetSyntaxError(f"failed to parse server config file (line {line})")
        pos = after
    return parsed


def canonical_tag(tag: str) -> str:
    """``canonical_tag``: ``ud-q4_k_xl`` -> ``Q4_K_XL``, ``q8_0`` -> ``Q8_0`` (ASCII only)."""
    found = re.search(r"[-.]([A-Z0-9_]+)\Z", tag, re.IGNORECASE | re.ASCII)
    canon = found[1] if found else tag
    return "".join(char.upper() if char.isascii() else char for char in canon)


def load_preset(text: str) -> Preset:
    """``load_from_ini``: sections in the router's order (byte order), ``name:tag`` sections
    with a canonical tag, ``version`` dropped, an empty ``default`` skipped."""
    shared: dict[str, str] = {}
    models: dict[str, dict[str, str]] = {}
    parsed = parse_sections(text)
    for raw in sorted(parsed, key=lambda s: s.encode("utf-8", "surrogatepass")):
        name = raw
        if name not in ("*", DEFAULT) and ":" in name:
            head, tag = name.rsplit(":", 1)
            name = f"{head}:{canonical_tag(tag)}"
        keys = {k: v for k, v in parsed[raw].items() if k != "version"}
        if name == DEFAULT and not keys:
            continue
        if name == "*":
            shared = keys
        else:
            models[name] = keys
    return Preset(shared, models)
