"""Prose wrapped between phrases (report.wrap): a size and its unit, a flag and its value,
"KV q8_0/q8_0" and a path are never broken, at any width."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.text import Text

from moetune.report.render import print_report
from moetune.report.wrap import phrases

from support.width import broken_phrases

PATH = "/home/me/.local/share/moetune/profiles/Qwen3-30B-A3B-32k-q8_0-22G.json"
SENTENCE = (
    "    experts on the CPU: 14 whole blocks + down of block 33; keeps 216.00 MiB more on "
    "the GPU with -ctk q8_0 and --n-cpu-moe 12, ctx 32768, KV q8_0/q8_0, saved in "
    f"{PATH}"
)
WHOLE = (
    "216.00 MiB",
    "-ctk q8_0",
    "--n-cpu-moe 12,",
    "ctx 32768,",
    "KV q8_0/q8_0,",
)


def _printed(text: Text, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    print_report(text, console)
    return console.export_text()


@pytest.mark.parametrize("width", range(30, 121))
def test_no_phrase_is_broken_at_any_width(width: int) -> None:
    """At every width from 30 to 120 (rich alone broke "216.00 ⏎ MiB", "-ctk ⏎ q8_0" or
    "KV ⏎ q8_0/q8_0" at some of them), each phrase is whole on one line, the path too where
    a line holds it (else it is cut, never lost), no line is wider than the console, and the
    text is all there, in order."""
    printed = _printed(Text(SENTENCE), width)
    lines = printed.splitlines()
    for phrase in (*WHOLE, PATH) if width >= len(PATH) + 4 else WHOLE:
        assert any(phrase in line for line in lines), (phrase, printed)
    assert all(len(line) <= width for line in lines), printed
    assert not broken_phrases(printed), printed
    joined = " ".join(printed.split())
    assert joined.replace(" ", "") == SENTENCE.replace(" ", "")
    assert joined == " ".join(SENTENCE.split()) or width < len(PATH) + 4
    assert all(line.startswith("    ") for line in lines), printed  # the indent is kept


def test_rich_alone_breaks_a_size_from_its_unit() -> None:
    """What the wrapping is for: rich breaks at the space of ``216.00 MiB``."""
    console = Console(width=71, record=True, color_system=None, file=io.StringIO())
    console.print(Text(SENTENCE))
    assert broken_phrases(console.export_text())
    assert not broken_phrases(_printed(Text(SENTENCE), 71))


def test_the_styles_are_kept() -> None:
    text = Text("decode ")
    text.append("41.5 tok/s", style="bold green")
    text.append(" over three requests of the server at 127.0.0.1:50052, noisy")
    console = Console(width=30, record=True, color_system="truecolor", file=io.StringIO())
    print_report(text, console)
    assert "41.5 tok/s" in console.export_text(clear=False)
    assert "\x1b[1;32m41.5 tok/s" in console.export_text(styles=True)


def test_a_value_its_unit_and_a_short_aside_are_one_phrase() -> None:
    """The bench's margin line broke as "-fitt 24075 (MiB" / "kept free)"."""
    line = (
        "every configuration: --fit on -fitt 24075 (MiB kept free), then a longer aside "
        "(one that goes on for more words than fit) ends"
    )
    found = [line[start:end] for start, end in phrases(line)]
    assert "-fitt 24075 (MiB kept free)," in found
    assert "(one" in found and "fit)" in found  # a long aside breaks as prose


@pytest.mark.parametrize("width", range(32, 60))
def test_a_path_wider_than_the_line_is_cut_after_a_slash(width: int) -> None:
    """Not inside a name ("...profiles/Qwen3-30B-A3B-32k-q8_0-22G.j" / "son"), where a line
    holds the name (31 characters)."""
    lines = _printed(Text(f"saved in {PATH}"), width).splitlines()
    assert "".join("".join(line.split()) for line in lines) == f"savedin{PATH}"
    for line in lines[:-1]:
        assert line.rstrip().endswith(("/", "saved in")), lines


def test_the_phrases_of_a_line() -> None:
    line = "keeps 216.00 MiB more (-ub 2048 -b 2048), --overhead sets yours"
    found = [line[start:end] for start, end in phrases(line)]
    assert found == [
        "keeps",
        "216.00 MiB",
        "more",
        "(-ub 2048 -b 2048),",  # a short aside is whole
        "--overhead",
        "sets",
        "yours",
    ]
