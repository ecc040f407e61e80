"""One flag table for llama-server's arguments (core/flags.py) against ``llama-server --help``
and ``llama-fit-params --help`` of the build the tests run."""

from __future__ import annotations

import re
import subprocess

from moetune.core.flags import FLAGS, ServerFlag

from support.llama import bin_path

# --- the table against the build ---------------------------------------------------------------


def _head(entry: ServerFlag) -> str:
    """How common_arg::to_string prints a flag's names and value hints."""
    names = entry.names
    text = names[0] if len(names) == 1 else f"{names[0] + ', ':<7}" + ", ".join(names[1:])
    return " ".join([text, *(hint for hint in (entry.value, entry.value_2) if hint is not None)])


def _help_heads(text: str) -> set[str]:
    """The first line of each flag in ``--help`` up to its help text (at column 40, or on
    the next line when the names and hints run past column 37)."""
    heads = set()
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        short = len(line) > 40 and line[37:40] == "   "
        heads.add(line[:40].rstrip() if short else line.rstrip())
    return heads


def _help(tool: str) -> str:
    done = subprocess.run(
        [str(bin_path(tool)), "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def test_the_table_is_llama_servers_help() -> None:
    """Every flag of this build's llama-server, with its spellings and value hints, is in the
    table, and nothing else: a new or changed flag fails here instead of being mis-parsed."""
    heads = _help_heads(_help("llama-server"))
    table = {_head(entry) for entry in FLAGS}
    assert sorted(heads - table) == []  # in llama-server, not in the table
    assert sorted(table - heads) == []  # in the table, not in llama-server
    assert len(heads) == len(FLAGS)


_ENV_RE = re.compile(r"\(env: ([A-Za-z0-9_]+)\)")


def _help_envs(text: str) -> dict[str, str]:
    """Each flag's head (as ``_help_heads`` reads it) and the variable its help text ends
    with (``common_arg::set_env`` adds ``(env: NAME)``), for the flags that have one."""
    found: dict[str, str] = {}
    head = None
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            short = len(line) > 40 and line[37:40] == "   "
            head = line[:40].rstrip() if short else line.rstrip()
        elif not line.startswith(" "):
            head = None  # a blank line or a section's title: no flag's help
        if head is not None and (match := _ENV_RE.search(line)):
            assert head not in found, head
            found[head] = match.group(1)
    return found


def test_env_is_the_variable_llama_server_reads() -> None:
    """Each row's ``env`` is the variable ``--help`` names for that flag, and the flags that
    name none have none: a launch leaves out the right names (llamacpp/process.py)."""
    envs = _help_envs(_help("llama-server"))
    assert len(envs) > 100  # the help still says (env: ...)
    assert {_head(e): e.env for e in FLAGS if e.env is not None} == envs


def test_fit_says_which_flags_llama_fit_params_takes() -> None:
    heads = _help_heads(_help("llama-fit-params"))
    assert sorted(_head(e) for e in FLAGS if e.fit and _head(e) not in heads) == []
    assert sorted(_head(e) for e in FLAGS if not e.fit and _head(e) in heads) == []


def test_llama_server_takes_no_equals_form() -> None:
    """What the tokenizer's reading of NAME=VALUE is not: llama-server's own."""
    done = subprocess.run(
        [str(bin_path("llama-server")), "--threads=4"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "invalid argument: --threads=4" in done.stdout + done.stderr
