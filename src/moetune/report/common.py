"""What every renderer shares: the error line and small number formats."""

from __future__ import annotations

from rich.text import Text


def render_error(message: str, hint: str | None) -> Text:
    text = Text("moetune: error: ", style="bold red")
    text.append(message)
    if hint:
        text.append(f" ({hint})", style="dim")
    return text


def fmt(value: float | None, spec: str) -> str:
    """``value`` in ``spec``, or ``-`` when unknown."""
    return "-" if value is None else format(value, spec)
