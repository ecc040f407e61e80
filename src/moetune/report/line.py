"""The one error line, ``moetune: error: MESSAGE (HINT) [NAME, exit N]``, in its pieces: plain
text for a stderr that is not a terminal (no renderer is imported for it) and the pieces the
styled line of report/common.py is made of; the one stderr console, and the one warning line."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from moetune.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

LEAD = "moetune: error: "


def error_pieces(message: str, hint: str | None, code: ExitCode | None) -> tuple[str, str, str]:
    """The line's message (its own line breaks folded), its hint and its code, as shown."""
    body = " ".join(message.split())
    shown_hint = f" ({' '.join(hint.split())})" if hint else ""
    shown_code = f" [{code.name}, exit {int(code)}]" if code is not None else ""
    return body, shown_hint, shown_code


def error_line(message: str, hint: str | None, code: ExitCode | None = None) -> str:
    """The whole line, plain."""
    return LEAD + "".join(error_pieces(message, hint, code))


@functools.lru_cache(maxsize=1)
def stderr_console() -> Console:
    """The one console on stderr: progress, warnings and the styled error line (rich is loaded
    on the first use, so a command that says nothing there loads no renderer)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def warn(text: str) -> None:
    """The one warning line on stderr, ``warning: TEXT`` (yellow where colour is shown): what
    every command hands its jobs as their ``warn`` callback."""
    stderr_console().print(f"warning: {text}", style="yellow", highlight=False)
