"""Every number an option takes, at its edges: ``1e300``, ``inf``, ``nan``, ``-1``, ``0`` where
it is refused, a 5,000-digit number and ``abc`` each end in one error line with its code
(BAD_VALUE: the option's parser, or the command where it reads the list), under ``--json``
in one JSON document on stdout, and none of them hangs. A workload is held to the context."""

from __future__ import annotations

import contextlib
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import typer.main

from moetune.cli import app
from moetune.cli.typer_app import declared_types
from moetune.errors import BadValueError, ExitCode
from moetune.units import Ctx, RamRate, Sizes, Workload

from support.helpers import EXAMPLE_QWEN, assert_one_line_error, cli, moetune

QWEN = str(EXAMPLE_QWEN)
LINE = re.compile(r"\[[A-Z_]+, exit \d+\]$")
HUGE = "9" * 5000  # int() refuses it (4,300 digits at most); float() makes it inf
EDGES = ("1e300", "inf", "nan", "-1", "0", HUGE, "abc")
CASE_SECONDS = 20  # a case that takes longer hangs

# what each command needs before the option so that the option is what fails
HEAD: dict[str, list[str]] = {
    "inspect": [QWEN],
    "plan": [QWEN, "--vram", "24G"],
    "run": [QWEN],
    "bench": [QWEN],
    "calibrate": ["--measure", QWEN],
    "alias": ["qwen", QWEN],
    "export": ["preset", QWEN],
    "doctor": [],
}
# how an edge is written into an option's value (default "{}"): a size with its unit, a
# workload in either of its places, a bandwidth bare (GB/s), per second or as a RAM's rate
TEMPLATES: dict[str, tuple[str, ...]] = {
    "--vram": ("{}G",),
    "--target-vram": ("{}G",),
    "--headroom": ("{}G",),
    "--overhead": ("{}G",),
    "--ram": ("{}G",),
    "--ram-bandwidth": ("{}", "{}G/s", "ddr5-{}x2"),
    "--workload": ("{}:512", "8k:{}"),
    "--ctx": ("{}", "{}k"),
}
# the values an option takes: 0 is refused elsewhere
ZERO_TAKEN = {
    ("--n-cpu-moe", "{}"),
    ("--gpu-index", "{}"),
    ("--headroom", "{}G"),
    ("--overhead", "{}G"),
    ("--max-spread", "{}"),
    ("--depths", "{}"),
    ("--workload", "{}:512"),
    ("--models-max", "{}"),  # the router's own: 0 is no limit
}
# the word the error line names (default: the option)
NAMED = {"--depths": "depth"}
NUMERIC_TYPES = (int, float, Sizes, Ctx, Workload, RamRate)


def commands() -> dict[str, Any]:
    """Every leaf command by its full name ("profiles show")."""
    found: dict[str, Any] = {}
    groups = [("", typer.main.get_command(app))]
    while groups:
        prefix, group = groups.pop()
        for name, sub in getattr(group, "commands", {}).items():
            full = f"{prefix} {name}".strip()
            if hasattr(sub, "commands"):
                groups.append((full, sub))
            else:
                found[full] = sub
    return found


def numeric_options() -> list[tuple[str, str]]:
    """(command, option) for every option whose value is a number, a size, a count or a list
    of counts (``N,...``), read off the real CLI."""
    found: list[tuple[str, str]] = []
    for name, command in commands().items():
        types = declared_types(command.callback)
        for param in command.params:
            if param.param_type_name != "option" or getattr(param, "is_flag", False):
                continue
            counts = param.metavar in ("N", "N,...")
            if types.get(str(param.name)) in NUMERIC_TYPES or counts:
                found.append((name, max(param.opts, key=len)))
    return found


def cases() -> list[Any]:
    found = []
    for name, option in numeric_options():
        for template in TEMPLATES.get(option, ("{}",)):
            for edge in EDGES:
                if edge == "0" and (option, template) in ZERO_TAKEN:
                    continue
                shown = "HUGE" if edge == HUGE else edge
                case_id = f"{name}{option}={template.format(shown)}"
                found.append(pytest.param(name, option, template.format(edge), id=case_id))
    return found


class Hung(BaseException):
    """A case ran past CASE_SECONDS (a BaseException: no handler of moetune's takes it)."""


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_every_numeric_option_is_covered() -> None:
    """Every command with a numeric option has a HEAD, and the list finds what it should."""
    found = numeric_options()
    assert {name for name, _ in found} <= set(HEAD)
    for expected in [
        ("plan", "--n-cpu-moe"),
        ("plan", "--parallel"),
        ("plan", "--ubatch"),
        ("plan", "--gpu-index"),
        ("plan", "--ram-bandwidth"),
        ("plan", "--workload"),
        ("doctor", "--ram-bandwidth"),
        ("run", "--port"),
        ("run", "--fill"),
        ("bench", "--depths"),
        ("bench", "--threads"),
        ("calibrate", "--ubatch"),
        ("calibrate", "--repetitions"),
        ("inspect", "--timeout"),
    ]:
        assert expected in found, expected


@pytest.mark.parametrize(("name", "option", "value"), cases())
def test_an_edge_value_is_one_line_and_one_document(name: str, option: str, value: str) -> None:
    """With ``--json`` where the command takes it (the line on stderr is the same either
    way; without it stdout stays empty: test_json_errors.py)."""
    as_json = any(p.name == "as_json" for p in commands()[name].params)
    args = [*name.split(), *HEAD[name], option, value, *(["--json"] if as_json else [])]
    with deadline(CASE_SECONDS):
        code, out, err = cli(*args)
    assert code == ExitCode.BAD_VALUE, err
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and LINE.search(lines[0]), err
    assert lines[0].startswith("moetune: error: ") and NAMED.get(option, option) in lines[0]
    assert len(lines[0]) < 400, lines[0]  # a 5,000-digit value is shown cut
    if not as_json:
        assert out == ""
        return
    data = json.loads(out)  # exactly one document: json.loads refuses two
    assert data["error"]["name"] == "BAD_VALUE" and set(data) == {"schema_version", "error"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("7", 7), (" 12 ", 12), ("+5", 5), ("007", 7), ("-0", 0), ("256", 256)],
)
def test_a_whole_number_in_its_range(text: str, value: int) -> None:
    from moetune.cli.options import whole

    assert whole(0, 256)(text) == value


@pytest.mark.parametrize("text", ["257", "-1", "1.0", "1e2", "0x10", "", " ", "1_000", HUGE])
def test_a_whole_number_out_of_its_range(text: str) -> None:
    from moetune.cli.options import whole

    with pytest.raises(BadValueError) as info:
        whole(0, 256)(text)
    assert "0 to 256" in f"{info.value.message} ({info.value.hint})"


def test_the_bounds_name_llama_cpps_own() -> None:
    from moetune.core.kvcache import MAX_SEQ
    from moetune.jobs.names import MAX_PARALLEL

    assert MAX_PARALLEL == MAX_SEQ


# --- a workload against the context --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workload", "1000000:1", "--ctx", "32768"], "needs 1000001 tokens, more than the "),
        (["--workload", "32k:1"], "context of 32768 tokens"),
        (["--workload", "16k:1", "--parallel", "2"], "one slot's context of 16384 tokens"),
    ],
)
def test_a_workload_longer_than_the_context_is_refused(args: list[str], words: str) -> None:
    with deadline(CASE_SECONDS):
        code, out, err = cli("plan", QWEN, "--vram", "24G", *args, "--json")
    assert code == ExitCode.BAD_VALUE, err
    error = json.loads(out)["error"]
    assert words in error["message"] and "--workload" in error["message"], error
    assert error["hint"] == "raise --ctx, or give a shorter workload"
    assert len(err.strip().splitlines()) == 1


def test_a_workload_that_fits_is_planned() -> None:
    code, out, err = cli("plan", QWEN, "--vram", "24G", "--workload", "16k:512", "--json")
    assert code == 0, err
    assert json.loads(out)["frontier"]["goal"] == "workload 16384:512"


def test_a_request_fits_exactly_the_context_it_gets() -> None:
    """The check plan's frontier and run (before any launch) make: PROMPT + GEN tokens at
    most the context, or one slot's share of it where each slot has its own cache."""
    from dataclasses import replace

    from moetune.core.goal import check_workload
    from moetune.core.settings import Settings

    settings = Settings(n_ctx=4096)
    check_workload(Workload(4000, 96), settings)
    check_workload(None, settings)
    with pytest.raises(BadValueError, match="needs 4097 tokens"):
        check_workload(Workload(4000, 97), settings)
    slots = replace(settings, n_seq=4, kv_unified=False)
    check_workload(Workload(1000, 24), slots)
    with pytest.raises(BadValueError, match="one slot's context of 1024 tokens"):
        check_workload(Workload(1000, 25), slots)


def test_the_measured_cases_as_a_user_types_them(tmp_path: Path) -> None:
    """The issue's commands, as a child process with a time limit: no traceback, one line."""
    for args in (
        ["plan", QWEN, "--vram", "24G", "--ram-bandwidth", "1e300", "--json"],
        ["doctor", "--ram-bandwidth", "1e300", "--no-measure", "--json"],
        ["plan", QWEN, "--vram", "24G", "--workload", "100000000:1", "--json"],
        ["plan", QWEN, "--vram", "24G", "--n-cpu-moe", HUGE, "--json"],
    ):
        done = moetune(*args, home=tmp_path, timeout=60)
        line = assert_one_line_error(done, ExitCode.BAD_VALUE)
        assert LINE.search(line)
        assert json.loads(done.stdout)["error"]["name"] == "BAD_VALUE"
