"""The one error line, ``moetune: error: MESSAGE (HINT) [NAME, exit N]``, in its pieces: plain
text for a stderr that is not a terminal (no renderer is imported for it) and the pieces the
styled line of report/common.py is made of."""

from __future__ import annotations

from moetune.errors import ExitCode

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
