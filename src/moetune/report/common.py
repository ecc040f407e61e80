"""What every renderer shares: the error line, small number formats, tables for 80 columns."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.style import StyleType
from rich.table import Table
from rich.text import Text

from moetune.core.command import shell_join
from moetune.core.figures import estimated
from moetune.core.ram import RamFigure
from moetune.core.speed import Forecast
from moetune.errors import ExitCode
from moetune.report.line import LEAD, error_pieces
from moetune.report.wrap import Phrases, phrased
from moetune.units import format_rate


class ShellLine(Text):
    """A command to copy into a shell. Printed whole on its line: where the terminal is too
    narrow it wraps the line itself, rich never breaks it (a pasted break would end it)."""


def shell_line(
    argv: Sequence[str],
    prefix: str = "",
    style: str = "",
    env: Mapping[str, str] | None = None,
) -> ShellLine:
    """``argv`` quoted for a POSIX shell, after ``env``'s assignments, as one ShellLine
    (``prefix``: ``"# "`` for one that is shown, not meant to be run)."""
    return ShellLine(prefix + shell_join(argv, env), style=style)


def render_error(message: str, hint: str | None, code: ExitCode | None = None) -> Text:
    """``moetune: error: MESSAGE (HINT) [NAME, exit N]``: one line (a message's own line
    breaks are folded), the exit code named."""
    body, shown_hint, shown_code = error_pieces(message, hint, code)
    text = Text(LEAD, style="bold red")
    text.append(body)
    for dim in filter(None, (shown_hint, shown_code)):
        text.append(dim, style="dim")
    return text


def fmt(value: float | None, spec: str) -> str:
    """``value`` in ``spec``, or ``-`` when unknown."""
    return "-" if value is None else format(value, spec)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 launch``, ``2 launches``; ``many`` where adding -s/-es is wrong."""
    if count == 1:
        return f"1 {word}"
    if many is None:
        many = word + ("es" if word.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{count} {many}"


def short_path(path: str, width: int = 48) -> str:
    """``path`` within ``width`` characters, cut in the middle: the start of the folder, ``…``,
    and the whole file name (``/home/me/…/Qwen3-30B-A3B-Q4_K_M.gguf``)."""
    if len(path) <= width:
        return path
    head, sep, name = path.rpartition("/")
    if not sep:
        return path
    keep = width - len(name) - 2  # "…/"
    return (head[:keep] if keep > 0 else "") + "…/" + name


def new_table(
    title: str | None,
    columns: Sequence[str],
    *,
    right: Collection[str] = (),
    fold: Collection[str] = (),
) -> Table:
    """A table that reads at 80 columns: a light frame, no cell cut short with ``…``. Columns
    in ``fold`` break where they must (between phrases, then characters: report.wrap); the
    others never break, so names, flags and numbers stay whole."""
    grid = _Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in columns:
        wraps = name in fold
        grid.add_column(
            name, justify="right" if name in right else "left", no_wrap=not wraps, overflow="fold"
        )
    grid.folded = frozenset(i for i, name in enumerate(columns) if name in fold)
    return grid


def label_grid() -> Table:
    """Two columns without a frame: a bold label that never breaks, and its value, broken
    between phrases where it must (``model  Qwen3-30B-A3B-Q4_K_M.gguf (17.28 GiB)``)."""
    grid = _Table(box=None, padding=(0, 2), show_header=False, show_edge=False, pad_edge=False)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.folded = frozenset({1})
    return grid


class _Table(Table):
    """A table whose folding columns (``folded``: their indexes) break between phrases."""

    folded: frozenset[int] = frozenset()

    def add_row(
        self,
        *renderables: RenderableType | None,
        style: StyleType | None = None,
        end_section: bool = False,
    ) -> None:
        cells = [
            _phrases(cell) if index in self.folded else cell
            for index, cell in enumerate(renderables)
        ]
        super().add_row(*cells, style=style, end_section=end_section)


def _phrases(cell: RenderableType | None) -> RenderableType | None:
    if isinstance(cell, str):
        return Phrases(cell)
    if isinstance(cell, Text) and not isinstance(cell, Phrases):
        return phrased(cell)
    return cell


class _Fitted:
    """The first of several layouts that fits the console's width (else the last)."""

    def __init__(self, choices: Sequence[RenderableType]) -> None:
        self.choices = choices

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        unbounded = options.update_width(1 << 16)  # Measurement.get clamps to the width given
        for choice in self.choices[:-1]:
            if Measurement.get(console, unbounded, choice).maximum <= options.max_width:
                yield choice
                return
        yield self.choices[-1]


def fitted(*choices: RenderableType) -> RenderableType:
    """``choices`` from widest to narrowest: the renderer picks the first that fits."""
    return _Fitted(choices)


def ram_line(ram: RamFigure) -> str:
    """Where a forecast's RAM read bandwidth came from: ``RAM read 8.1 GB/s, measured on this
    machine 2026-12-07 (saved in FILE)``, ``... the peak of DDR5-6000 x2 (--ram-bandwidth)``."""
    text = f"RAM read {format_rate(ram.bytes_per_s)}"
    if ram.source == "given":
        peak = f", the peak of {ram.ram}" if ram.ram else ""
        return f"{text}{peak} (--ram-bandwidth)"
    when = "now" if ram.source == "measured" else (ram.measured_at or "")[:10]
    kept = f"saved in {ram.file}" if ram.file else "not saved"
    return f"{text}, measured on this machine {when} ({kept})"


def forecast_label(found: Forecast) -> str:
    """What a forecast rests on: its calibration, or ``uncalibrated, expected error ±16 %``
    with the figures it derived or assumed (``; assumed: CUDA0 FLOP/s, RAM bandwidth``)."""
    label = found.calibration.label
    if found.calibration.points:
        return label
    if found.expected_error is not None:
        label += f", expected error ±{found.expected_error:.0%}".replace("%", " %")
    for provenance, names in estimated(found.figures).items():
        label += f"; {provenance}: {', '.join(names)}"
    return label
