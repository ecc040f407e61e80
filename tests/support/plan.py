"""``moetune plan`` in-process with a tiny budget: the arguments and the call."""

from __future__ import annotations

from support.helpers import cli

TINY = ["--ram", "1G", "--headroom", "0", "--overhead", "0", "--ctx", "4096"]


def plan(*args: str) -> tuple[int, str]:
    code, out, _ = cli("plan", *args)
    return code, out
