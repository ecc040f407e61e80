"""The fast path (cli/fast.py) against typer's: the same names for every option of every
command, the same values for the same arguments, and typer's own answer wherever the fast
path is not certain (it declines, and typer parses)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import typer.main

from moetune.cli import app
from moetune.cli.base import REGISTRY, Spec
from moetune.cli.coercion import NOT_PLAIN
from moetune.cli.fast import Table, parse, planned, table_of

from support.helpers import EXAMPLE_QWEN, moetune

# a value each option takes (typer's and the fast path's values of it are compared), by name;
# an option of a plain type without one here gets one by its type
SAMPLES: dict[str, list[str]] = {
    "--ctx": ["32k", "max", "4096"],
    "--vram": ["24G", "24G,12G"],
    "--target-vram": ["22G", "10G,10G"],
    "--headroom": ["1G", "0", "512M,1G"],
    "--overhead": ["0", "512M,0"],
    "--ram": ["64G"],
    "--cache-type": ["F16", "q4_0"],
    "--timeout": ["2.5", "30"],
    "--objective": ["prefill", "balanced"],
    "--workload": ["8k:512"],
    "--ram-bandwidth": ["60", "56G/s"],
    "--max-spread": ["10%", "0.2"],
    "--max-time": ["30"],
    "--fill": ["4k"],
    "--depths": ["0,16k"],
    "--n-prompt": ["512"],
    "--ubatch": ["512", "2048"],
}
BY_TYPE = {int: ["1", "7", "512"], str: ["x", "a b"], Path: ["some.gguf", "dir/x.json"]}
# what only typer's parser answers: (a command's arguments, why)
DECLINED = [
    (["plan", "--help"], "help"),
    (["plan", "M", "--vramm", "24G"], "an unknown option (typer's did-you-mean)"),
    (["plan", "M", "--vram", "24G", "--vram", "12G"], "an option twice"),
    (["plan", "M", "--vram"], "an option without its value"),
    (["plan", "M", "--n-cpu-moe", "-1"], "a value that starts with -"),
    (["plan", "M", "N"], "an extra argument"),
    (["plan", "--vram", "24G"], "no model"),
    (["plan", "M", "--vram", "16"], "a value the parser refuses (BAD_VALUE, typer's words)"),
    (["plan", "M", "--json=1"], "a flag with a value"),
    (["plan", "M", "--n-cpu-moe", "1_000"], "an int typer reads its own way"),
    (["inspect", "M", "--", "-c", "4096"], "-- where nothing goes to llama-server"),
    (["profiles"], "a group without its command"),
    (["profiles", "lst"], "a group's command misspelt"),
    (["--help"], "the app's help"),
    (["insp", "M"], "no such command"),
    (["report"], "a required list argument given nothing"),
    (["export"], "a required argument missing"),
    (["plan", "M", "-x"], "a short option it does not have"),
]


def _commands() -> dict[str, Any]:
    """Every command of the typer app by its full name ("profiles show")."""
    found: dict[str, Any] = {}

    def walk(command: Any, prefix: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            if hasattr(sub, "commands"):
                walk(sub, f"{prefix}{name} ")
            else:
                found[f"{prefix}{name}"] = sub

    walk(typer.main.get_command(app), "")
    return found


def _full(spec: Spec) -> str:
    return f"{spec.group} {spec.name}" if spec.group else spec.name


def _specs() -> list[Spec]:
    return [s for s in REGISTRY if s.func is not None]


def _table(spec: Spec) -> Table | None:
    assert spec.func is not None
    return table_of(spec.func)


def _fast_specs() -> list[Spec]:
    return [s for s in _specs() if _table(s) is not None]


def test_every_command_can_run_without_typer() -> None:
    assert {_full(s) for s in _fast_specs()} == set(_commands())


@pytest.mark.parametrize("spec", _fast_specs(), ids=_full)
def test_the_same_names_for_every_option(spec: Spec) -> None:
    table = _table(spec)
    assert table is not None
    command = _commands()[_full(spec)]
    clicks = {p.name: p for p in command.params}
    assert [p.name for p in table.params] == list(clicks)
    for param in table.params:
        click = clicks[param.name]
        if param.argument:
            assert click.param_type_name == "argument", param.name
            continue
        assert set(param.names) == set(click.opts), param.name
        assert set(param.negative) == set(click.secondary_opts), param.name
        assert param.is_flag == bool(getattr(click, "is_flag", False)), param.name


def _typer_values(spec: Spec, args: list[str]) -> dict[str, Any]:
    command = _commands()[_full(spec)]
    with command.make_context(_full(spec), list(args)) as context:
        return dict(context.params)


def _fast_values(table: Table, args: list[str]) -> dict[str, Any] | None:
    values = parse(table, args)
    if values is None:
        return None
    return {p.name: values[p.name] if p.name in values else p.default_value() for p in table.params}


def _argument_lists(spec: Spec, table: Table) -> list[list[str]]:
    """Arguments each option appears in once (with each of its samples), the flags' other
    spelling, and the options all at once in declared and in reversed order."""
    many = bool(table.arguments) and table.arguments[-1].many
    head = [str(EXAMPLE_QWEN)] * (len(table.arguments) + many)  # a list argument: two values
    lists = [head]
    if many and table.arguments[-1].default is not NOT_PLAIN:
        lists.append(head[: len(table.arguments) - 1])  # the list given nothing
    every: list[list[str]] = []
    for param in table.params:
        if param.argument:
            continue
        if param.is_flag:
            spellings = [[n] for n in (*param.names, *param.negative)]
        else:
            texts = SAMPLES.get(param.names[0]) or BY_TYPE.get(param.base)
            assert texts, f"{_full(spec)} {param.names[0]}: give it a sample in SAMPLES"
            spellings = [[param.names[0], t] for t in texts]
            spellings.append([f"{param.names[-1]}={texts[0]}"] if param.names[-1][1] == "-" else [])
        lists += [[*head, *s] for s in spellings if s]
        every.append(spellings[0])
    lists.append([*head, *itertools.chain(*every)])
    lists.append([*itertools.chain(*reversed(every)), *head])
    return lists


@pytest.mark.parametrize("spec", _fast_specs(), ids=_full)
def test_the_same_values_as_typer(spec: Spec) -> None:
    table = _table(spec)
    assert table is not None
    checked = 0
    for args in _argument_lists(spec, table):
        fast = _fast_values(table, args)
        assert fast is not None, args
        assert fast == _typer_values(spec, args), args
        checked += 1
    assert checked >= len(table.params)


@pytest.mark.parametrize(("argv", "why"), DECLINED, ids=[why for _, why in DECLINED])
def test_what_the_fast_path_leaves_to_typer(argv: list[str], why: str) -> None:
    argv = [str(EXAMPLE_QWEN) if a == "M" else a for a in argv]
    assert planned(argv) is None, why


def test_what_follows_the_two_dashes_goes_to_llama_server() -> None:
    found = planned(["--debug", "plan", str(EXAMPLE_QWEN), "--vram", "24G", "--", "-t", "8"])
    assert found is not None
    spec, _, values, rest = found
    assert spec.name == "plan" and rest == ("-t", "8") and values["vram"].values == (24 << 30,)


def test_declined_arguments_get_typers_answer() -> None:
    """Where the fast path declines, the process still answers as typer does: a usage
    error with its did-you-mean, a value refused in moetune's words."""
    wrong = moetune("plan", str(EXAMPLE_QWEN), "--vramm", "24G")
    assert wrong.returncode == 2 and "Possible options:" in wrong.stderr, wrong.stderr
    bad = moetune("plan", str(EXAMPLE_QWEN), "--vram", "16", "--json")
    assert bad.returncode == 5, bad.stderr
    assert "--vram: '16' has no unit" in bad.stderr and '"BAD_VALUE"' in bad.stdout


def test_the_version_without_typer_is_typers() -> None:
    """``--version`` among the app's own options: the fast path prints what typer's would."""
    from support.helpers import cli

    code, out, _ = cli("--version")
    assert code == 0
    for argv in (["--version"], ["--debug", "--version"], ["--version", "plan"]):
        done = moetune(*argv)
        assert (done.returncode, done.stdout) == (0, out), argv
    assert moetune("--version", "--bogus").returncode == 2  # typer's: no such option
