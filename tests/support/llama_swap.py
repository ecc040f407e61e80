"""llama-swap's reading of its config, re-implemented for the tests (mostlygeek/llama-swap
proxy/config/config.go): the YAML (gopkg.in/yaml.v3 refuses a repeated map key), the macros
substituted into each ``cmd`` (``MODEL_ID``, then the global ones, last first; a ``${...}``
left over is an error), ``${PORT}``, comment lines dropped, and ``SanitizeCommand``'s split
(billziss-gh/golib shlex, its POSIX dialect)."""

from __future__ import annotations

import re
from typing import Any

import yaml

_MACRO = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")


class SwapConfigError(ValueError):
    """llama-swap refuses the config."""


def _unique_keys(node: Any) -> None:
    """yaml.v3's "mapping key already defined", anywhere in the document."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, yaml.MappingNode):
            keys = [k.value for k, _ in item.value if isinstance(k, yaml.ScalarNode)]
            repeated = {k for k in keys if keys.count(k) > 1 and k != "<<"}
            if repeated:
                raise SwapConfigError(f"mapping key {sorted(repeated)[0]!r} already defined")
            stack += [v for pair in item.value for v in pair]
        elif isinstance(item, yaml.SequenceNode):
            stack += item.value


def posix_split(line: str) -> list[str]:
    """billziss-gh/golib shlex ``Posix.Split``: blanks are space, tab and newline (not CR);
    quotes and backslash as in sh, no comments."""
    tokens: list[str] = []
    token: list[str] | None = None
    state = [" "]
    chars = list(line)
    i = 0
    while i < len(chars):
        r = chars[i]
        r0 = chars[i + 1] if i + 1 < len(chars) else None
        s = state[-1]
        escaped: str | None = None
        if r == "\\" and s in (" ", "A", '"'):
            if r0 in ("\n", None):
                i += 2
                continue
            if s != '"' or r0 in ("$", "`", '"', "\\"):
                escaped = r0
        if escaped is not None:
            i += 1
        if s == " ":
            if escaped is not None:
                state.append("A")
                token = [escaped]
            elif r in ('"', "'"):
                state += ["A", r]
                token = []
            elif r not in (" ", "\t", "\n"):
                state.append("A")
                token = [r]
        elif s == "A":
            assert token is not None
            if escaped is not None:
                token.append(escaped)
            elif r in ('"', "'"):
                state.append(r)
            elif r in (" ", "\t", "\n"):
                state.pop()
                tokens.append("".join(token))
                token = None
            else:
                token.append(r)
        else:
            assert token is not None
            if escaped is not None:
                token.append(escaped)
            elif r == s:
                state.pop()
            else:
                token.append(r)
        i += 1
    if token is not None:
        tokens.append("".join(token))
    return tokens


def sanitize_command(cmd: str) -> list[str]:
    """``SanitizeCommand``: comment lines dropped, a trailing backslash joins lines, split."""
    lines = []
    for line in cmd.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed.removesuffix("\\") + " " if trimmed.endswith("\\") else line)
    args = posix_split("\n".join(lines))
    if not args:
        raise SwapConfigError("empty command")
    return args


def load_swap(text: str, start_port: int = 5800) -> dict[str, list[str]]:
    """Each model's argv as llama-swap starts it (ports from ``start_port`` in name order)."""
    _unique_keys(yaml.compose(text, Loader=yaml.SafeLoader))
    config = yaml.safe_load(text) or {}
    macros = dict(config.get("macros") or {})
    for name, value in macros.items():
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,63}", name):
            raise SwapConfigError(f"macro name {name!r} contains invalid characters")
        if isinstance(value, str) and len(value) >= 1024:
            raise SwapConfigError(f"macro value for {name!r} exceeds 1024 characters")
    argv: dict[str, list[str]] = {}
    port = start_port
    for model in sorted(config.get("models") or {}):
        cmd = str(config["models"][model]["cmd"])
        cmd = "\n".join(ln for ln in cmd.split("\n") if not ln.strip().startswith("#"))
        for name, value in reversed([("MODEL_ID", model), *macros.items()]):
            cmd = cmd.replace("${" + name + "}", str(value))
        if "${PORT}" in cmd:
            cmd = cmd.replace("${PORT}", str(port))
            port += 1
        left = _MACRO.search(cmd)
        if left:
            raise SwapConfigError(f"unknown macro '${{{left[1]}}}' found in {model}.cmd")
        argv[model] = sanitize_command(cmd)
    return argv
