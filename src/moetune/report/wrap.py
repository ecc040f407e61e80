"""Wrapping prose between phrases: a size and its unit (``216.00 MiB``), a flag and its value
(``-ctk q8_0``, ``--n-cpu-moe 12``), a label and its figure (``ctx 32768``, ``KV q8_0/q8_0``)
and a short bracketed aside (``(MiB kept free)``) are never broken over two lines, nor is a
path where a line holds it (one wider than the line is cut, never lost).

Rich breaks at any space, a non-breaking one too, so the text is cut here, at the width rich
asks for, and each line handed back fits it: :class:`Phrases` is a Text whose wrapping is
this one (a line indented keeps its indent on the lines it wraps into).
"""

from __future__ import annotations

import re

from rich.console import Console, ConsoleOptions, JustifyMethod, OverflowMethod
from rich.containers import Lines
from rich.measure import Measurement
from rich.text import Text

# a figure: 216.00, 32,768, -1.5, ~40 (an opening bracket before it)
_NUMBER_RE = re.compile(r"^[(\[]?[-+~≈]?\d[\d,.]*$")
# what a figure is counted in (a comma, a closing bracket or a full stop may follow it; an
# opening bracket may come before it: ``24075 (MiB kept free)``)
_UNIT_RE = re.compile(
    r"^\(?(B|KiB|MiB|GiB|TiB|kB|MB|GB|TB|[KMGT]iB/s|[kMGT]B/s|tok/s|tokens|ms|s|%)[,;:.)\]]*$"
)
# a flag of llama.cpp's or moetune's (an opening bracket or a backtick before it)
_FLAG_RE = re.compile(r"^[(\[`]?--?[a-zA-Z][a-zA-Z0-9-]*$")
# the words that read as a flag's value: a figure or size, a cache type, a path, a switch
_VALUE_RE = re.compile(r"^(?!-[a-zA-Z])(\S*[0-9/._]\S*|(on|off|auto|max|none)[,;:.)]*)$")
# a label and what follows it: ctx 32768, KV q8_0/q8_0, depth 0, block 33
_LABELS = frozenset({"ctx", "KV", "depth", "block"})
_WORD_RE = re.compile(r"\S+")


def _glued(word: str, after: str) -> bool:
    """Whether ``word`` and the word ``after`` it are one phrase (never broken between)."""
    if _NUMBER_RE.match(word) and _UNIT_RE.match(after):
        return True
    if _FLAG_RE.match(word) and _VALUE_RE.match(after):
        return True
    return word.lstrip("(") in _LABELS and (after[:1].isdigit() or "/" in after)


_ASIDE_CHARS = 24  # a bracketed aside this short stays whole: ``(MiB kept free)``


def _aside_end(line: str, words: list[tuple[int, int]], index: int) -> int | None:
    """Where a short bracketed aside that opens at word ``index`` closes (its last word's
    index), or None: not an aside, or too long to keep whole."""
    start, end = words[index]
    if not line[start:end].startswith("(") or ")" in line[start:end]:
        return None
    for last in range(index + 1, min(index + 4, len(words))):
        if words[last][1] - start > _ASIDE_CHARS:
            return None
        if ")" in line[words[last][0] : words[last][1]]:
            return last
    return None


def phrases(line: str) -> list[tuple[int, int]]:
    """The unbreakable runs of ``line`` (one line, no newline), as (start, end) offsets."""
    words = [(m.start(), m.end()) for m in _WORD_RE.finditer(line)]
    runs: list[tuple[int, int]] = []
    aside_to = -1  # the last word of the aside being read
    for index, (start, end) in enumerate(words):
        glued = index <= aside_to or (
            index > 0 and _glued(line[words[index - 1][0] : words[index - 1][1]], line[start:end])
        )
        if glued:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
        aside_to = max(aside_to, _aside_end(line, words, index) or -1)
    return runs


def break_offsets(line: str, width: int, indent: int = 0) -> list[int]:
    """Where the lines after the first start, filling each up to ``width`` (the lines after
    the first: ``indent`` less) with whole phrases; a phrase wider than a line is cut where
    it must (words, then characters)."""
    offsets: list[int] = []
    start, room = 0, width
    for run_start, run_end in phrases(line):
        if run_end - start <= room:
            continue
        if run_start > start and line[start:run_start].strip():
            offsets.append(run_start)
            start, room = run_start, max(1, width - indent)
        while run_end - start > room:  # a phrase wider than a line: at a space, after a
            # path's slash, else anywhere
            space = line.rfind(" ", start + 1, start + room + 1)
            slash = line.rfind("/", start + 1, start + room)
            cut = space + 1 if space > start else slash + 1 if slash > start else start + room
            offsets.append(cut)
            start, room = cut, max(1, width - indent)
    return offsets


class Phrases(Text):
    """A Text that wraps between phrases only (see the module)."""

    def wrap(
        self,
        console: Console,
        width: int,
        *,
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        tab_size: int = 8,
        no_wrap: bool | None = None,
    ) -> Lines:
        if no_wrap or self.no_wrap or overflow == "ignore":
            return super().wrap(
                console, width, justify=justify, overflow=overflow, tab_size=tab_size, no_wrap=True
            )
        how = justify or self.justify or "default"
        lines = Lines()
        for line in self.split(allow_blank=True):
            if "\t" in line:
                line.expand_tabs(tab_size)
            plain = line.plain
            indent = len(plain) - len(plain.lstrip(" "))
            indent = indent if indent < width // 2 else 0
            parts = line.divide(break_offsets(plain, width, indent))
            for index, part in enumerate(parts):
                part.rstrip()
                lines.append(Text(" " * indent) + _lstripped(part) if index else part)
        if how != "default":
            lines.justify(console, width, justify=how, overflow=overflow or "fold")
        return lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [len(line) for line in self.plain.splitlines()] or [0]
        runs = [end - start for line in self.plain.splitlines() for start, end in phrases(line)]
        return Measurement(min(max(runs or widths), options.max_width), max(widths))


def _lstripped(text: Text) -> Text:
    """``text`` without its leading spaces, styles kept."""
    cut = len(text.plain) - len(text.plain.lstrip(" "))
    return text[cut:] if cut else text


def phrased(text: Text) -> Phrases:
    """``text`` (its styles kept) as :class:`Phrases`."""
    found = Phrases(
        text.plain,
        style=text.style,
        justify=text.justify,
        overflow=text.overflow,
        no_wrap=text.no_wrap,
        end=text.end,
        tab_size=text.tab_size,
    )
    found.spans = list(text.spans)
    return found
