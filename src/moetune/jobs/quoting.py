"""Names and values written into another program's syntax as data: a comment's text, a word
of bash/zsh or fish. Every character either comes back exactly or is shown as an escape."""

from __future__ import annotations

import re
import shlex

from moetune.errors import BadValueError

_FISH_SAFE_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _escape(char: str) -> str:
    """One character as a ``\\xHH``/``\\uHHHH``/``\\UHHHHHHHH`` escape."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with each character that is not printable (line breaks, controls, lone
    surrogates) written as its escape: safe in any comment."""
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def word_bytes(word: str) -> bytes:
    """The bytes a program gets for ``word`` as an argument (a path's undecodable bytes
    included); BadValueError for what no argument can hold."""
    if "\0" in word:
        raise BadValueError(f"an argument holds a NUL character: {visible(word)!r}")
    try:
        return word.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise BadValueError(f"an argument is not UTF-8 text: {visible(word)!r}") from None


def sh_quote(word: str) -> str:
    """One bash/zsh word: single quotes, or ``$'...'`` with escapes where a character is not
    printable (a ``\\r`` or newline survives editors and text-mode reads as an escape)."""
    if word.isprintable():
        return shlex.quote(word)
    word_bytes(word)
    out: list[str] = []
    for char in word:
        if char in "\\'":
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out += [f"\\x{b:02x}" for b in char.encode("utf-8", "surrogateescape")]
    return "$'" + "".join(out) + "'"


def fish_quote(word: str) -> str:
    """One fish word: inside fish's single quotes only ``\\`` and ``'`` are special; a
    character that is not printable is a ``\\XHH`` byte escape outside them."""
    if word and _FISH_SAFE_RE.match(word):
        return word
    word_bytes(word)
    parts: list[str] = []
    quoted: list[str] = []
    for char in word:
        if char.isprintable():
            quoted.append(char.replace("\\", "\\\\").replace("'", "\\'"))
            continue
        if quoted:
            parts.append("'" + "".join(quoted) + "'")
            quoted = []
        parts += [f"\\X{b:02x}" for b in char.encode("utf-8", "surrogateescape")]
    if quoted or not parts:
        parts.append("'" + "".join(quoted) + "'")
    return "".join(parts)
