"""One vocabulary: every command's options, read off the real CLI. Each shared name exists
wherever it applies and parses the same inputs to the same values (and refuses the same ones
with the same words)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer.core import TyperCommand

from moetune.cli import app
from moetune.cli.base import PASS_THROUGH, BadValueParameter
from moetune.cli.typer_app import declared_types
from moetune.units import GIB, MIB, Ctx, Sizes

from support.helpers import EXAMPLE_QWEN, cli, moetune

SHARED = (
    "--ctx",
    "--vram",
    "--gpu",
    "--ram",
    "--target-vram",
    "--headroom",
    "--cache-type",
    "--json",
)
# Where each shared name applies: the commands that plan take the machine (--vram, --gpu,
# --ram); the ones that launch take the device's own memory and only a target.
# Several devices add two more: the RPC servers, and the runtime overhead per device.
LAUNCHING = (
    "--ctx",
    "--target-vram",
    "--headroom",
    "--cache-type",
    "--json",
    "--rpc",
    "--overhead",
)
# Every command that takes a model by name or URL bounds its network steps.
WHERE: dict[str, tuple[str, ...]] = {
    "plan": (*SHARED, "--rpc", "--overhead", "--timeout"),
    "doctor": (*SHARED, "--rpc"),
    "run": (*LAUNCHING, "--timeout"),
    "bench": (*LAUNCHING, "--timeout"),
    # the plan they fall back to without a tuned profile is for a GPU: given or a profile
    "alias": ("--ctx", "--cache-type", "--vram", "--gpu", "--timeout"),
    "export": ("--ctx", "--cache-type", "--vram", "--gpu", "--timeout"),
    "inspect": ("--json", "--timeout"),
    "report": ("--json",),
    "calibrate": ("--json",),
    "profiles list": ("--json",),
    "profiles show": ("--json",),
}
GOOD: dict[str, list[tuple[str, Any]]] = {
    "--ctx": [
        ("32768", Ctx(32768)),
        ("32k", Ctx(32768)),
        ("128K", Ctx(131072)),
        ("max", Ctx(None)),
        ("MAX", Ctx(None)),
    ],
    "--vram": [
        ("16G", Sizes((16 * GIB,))),
        ("22.5GiB", Sizes((22 * GIB + GIB // 2,))),
        ("24000MiB", Sizes((24000 * MIB,))),
        ("24G,12G", Sizes((24 * GIB, 12 * GIB))),
    ],
    "--ram": [("64G", 64 * GIB), ("512M", 512 * MIB)],
    "--target-vram": [("12G", Sizes((12 * GIB,))), ("40M,30M", Sizes((40 * MIB, 30 * MIB)))],
    "--headroom": [
        ("1.5G", Sizes((1536 * MIB,))),
        ("0", Sizes((0,))),
        ("800M,1G", Sizes((800 * MIB, GIB))),
    ],
    "--cache-type": [("q8_0", "q8_0"), ("F16", "f16"), ("q4_0", "q4_0")],
    "--gpu": [("rtx4090", "rtx4090")],
    "--rpc": [("127.0.0.1:50052,10.0.0.2:50052", "127.0.0.1:50052,10.0.0.2:50052")],
    "--overhead": [("0", Sizes((0,))), ("512M,0", Sizes((512 * MIB, 0)))],
    "--timeout": [("30", 30.0), ("2.5", 2.5), ("1e3", 1000.0)],
}
BAD: dict[str, list[tuple[str, str]]] = {
    "--ctx": [("lots", "not a token count"), ("0", "must be positive")],
    "--vram": [("16", "did you mean 16G?"), ("24Q", "not a size"), ("0", "")],
    "--ram": [("64", "did you mean 64G?")],
    "--target-vram": [("12", "did you mean 12G?"), ("-1G", ""), ("12G,", "not a size list")],
    "--headroom": [("1", "did you mean 1G?")],
    "--cache-type": [("q3_z", "cache type")],
    "--timeout": [("0", "above 0"), ("-1", "above 0"), ("inf", "above 0"), ("1m", "seconds")],
}


def commands() -> dict[str, TyperCommand]:
    """Every leaf command by its full name ("profiles show")."""
    found: dict[str, TyperCommand] = {}

    def walk(command: Any, prefix: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            found[prefix] = command

    walk(typer.main.get_command(app), "")
    return found


def options(command: TyperCommand) -> dict[str, Any]:
    return {opt: p for p in command.params if p.param_type_name == "option" for opt in p.opts}


def test_every_command_is_covered() -> None:
    assert set(commands()) == {*WHERE, "profiles rm"}


@pytest.mark.parametrize("name", sorted(WHERE))
def test_shared_names_exist_where_they_apply(name: str) -> None:
    have = set(options(commands()[name]))
    assert set(WHERE[name]) <= have, f"{name} lacks {set(WHERE[name]) - have}"
    # and nowhere else under another spelling: no --context, --kv-type, --vram-target, ...
    lookalikes = {"--context", "--kv-type", "--cache", "--vram-target", "--target", "--gpu-mem"}
    assert not have & lookalikes


def _parse(command: TyperCommand, option: str, text: str) -> Any:
    param = options(command)[option]
    with typer.Context(command) as context:  # closed: what a callback holds ends here
        return param.process_value(context, text)


@pytest.mark.parametrize("option", sorted(GOOD))
def test_same_inputs_same_values(option: str) -> None:
    users = [c for name, c in commands().items() if option in WHERE.get(name, ())]
    assert len(users) >= 2 or option == "--gpu"
    for text, value in GOOD[option]:
        got = {command.name: _parse(command, option, text) for command in users}
        assert set(got.values()) == {value}, (option, text, got)


@pytest.mark.parametrize("option", sorted(BAD))
def test_same_inputs_refused_alike(option: str) -> None:
    users = [c for name, c in commands().items() if option in WHERE.get(name, ())]
    for text, words in BAD[option]:
        messages = set()
        for command in users:
            with pytest.raises(BadValueParameter) as info:
                _parse(command, option, text)
            messages.add(f"{info.value.error.message} ({info.value.error.hint})")
        assert len(messages) == 1 and words in messages.pop(), (option, text)


@pytest.mark.parametrize("command", ["plan", "doctor"])
def test_unitless_size_is_one_line_and_bad_value(command: str) -> None:
    code, _, err = cli(command, str(EXAMPLE_QWEN), "--vram", "16")
    assert code == 5, err
    assert err.strip() == (
        "moetune: error: --vram: '16' has no unit (did you mean 16G?) [BAD_VALUE, exit 5]"
    )


def test_help_names_real_types() -> None:
    """No ``<bool>``, ``{model}`` or bare ``TEXT`` where a value has a real name."""
    for name in commands():
        code, out, _ = cli(*name.split(), "--help")
        assert code == 0
        assert "<bool>" not in out and "{" not in out.split("Options:")[0], out
    code, out, _ = cli("plan", "--help")
    for shown in (
        "--ctx N|max",
        "--vram SIZE",
        "--target-vram SIZE",
        "--cache-type TYPE",
        "--gpu ID",
        "MODEL",
    ):
        assert shown in out, out


# --- every option of every command, as typer parses it ---------------------------------------

# values each option takes, by name (GOOD's too); any other option gets values by its type
SAMPLES: dict[str, list[str]] = {
    "--cache-type": ["F16", "q4_0"],
    "--objective": ["prefill", "balanced"],
    "--workload": ["8k:512"],
    "--ram-bandwidth": ["60", "60G", "56G/s", "ddr5-6000x2"],
    "--max-spread": ["10%", "0.2"],
    "--max-time": ["30"],
    "--fill": ["4k"],
    "--depths": ["0,16k"],
    "--n-prompt": ["512"],
    "--ubatch": ["512", "2048"],
    "--parallel": ["1", "7", "256"],
    "--gpu-index": ["0", "7", "63"],
    "--weights": ["2,1", "1, 1, 0.5"],
}
BY_TYPE: dict[Any, list[str]] = {
    int: ["1", "7", "512"],
    float: ["2.5"],
    str: ["x", "a b"],
    Path: ["some.gguf", "dir/x.json"],
}


def _values(command: TyperCommand, args: list[str]) -> dict[str, Any]:
    with command.make_context(command.name or "moetune", list(args)) as context:
        return dict(context.params)


def _texts(param: Any, types: dict[str, Any]) -> list[str]:
    name = max(param.opts, key=len)
    texts = SAMPLES.get(name) or [text for text, _ in GOOD.get(name, [])]
    texts = texts or BY_TYPE.get(types.get(param.name), [])
    assert texts, f"{name}: give it a sample in SAMPLES"
    return texts


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_option_parses(name: str) -> None:
    """Each option of each command parses each of its samples (given apart or after ``=``,
    to the same value; a shared name to its value in GOOD), a flag both ways, and all of them
    at once, in declared and in reversed order, to the values each gives alone."""
    command = commands()[name]
    types = declared_types(command.callback)
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    many = bool(arguments) and arguments[-1].nargs == -1
    head = [str(EXAMPLE_QWEN)] * (len(arguments) + many)  # a list argument: two values
    alone: dict[str, Any] = {}
    every: list[list[str]] = []
    for param in command.params:
        if param.param_type_name == "argument":
            continue
        assert param.name is not None
        option = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            for spelling in (*param.opts, *param.secondary_opts):
                value = _values(command, [*head, spelling])[param.name]
                assert value is (spelling in param.opts), (name, spelling)
            alone[param.name] = True
            every.append([option])
            continue
        expected = dict(GOOD.get(option, []))
        for text in _texts(param, types):
            value = _values(command, [*head, option, text])[param.name]
            assert value == _values(command, [*head, f"{option}={text}"])[param.name], text
            assert value == expected.get(text, value), (name, option, text)
            alone.setdefault(param.name, value)
        every.append([option, _texts(param, types)[0]])
    assert alone or name == "profiles rm"
    for args in (
        [*head, *itertools.chain(*every)],
        [*itertools.chain(*reversed(every)), *head],
    ):
        values = _values(command, args)
        assert {k: values[k] for k in alone} == alone, args


def test_what_follows_the_two_dashes_goes_to_llama_server() -> None:
    plan = commands()["plan"]
    args = [str(EXAMPLE_QWEN), "--vram", "24G", "--", "-t", "8", "--vram"]
    with plan.make_context("plan", args) as context:
        assert context.meta[PASS_THROUGH] == ("-t", "8", "--vram")
        assert context.params["vram"] == Sizes((24 * GIB,))
    code, _, err = cli("inspect", str(EXAMPLE_QWEN), "--", "-c", "4096")
    assert code == 2 and "`moetune inspect` passes nothing to llama-server" in err, err


def test_usage_errors_and_refused_values() -> None:
    """A misspelt option: typer's usage error with its did-you-mean (USAGE); a value our
    parser refuses: one line and BAD_VALUE, with ``--json`` its document on stdout too."""
    wrong = moetune("plan", str(EXAMPLE_QWEN), "--vrma", "24G")
    assert wrong.returncode == 2, wrong.stderr
    assert "No such option: --vrma (Possible options: --overhead, --ram, --vram)" in wrong.stderr
    bad = moetune("plan", str(EXAMPLE_QWEN), "--vram", "16", "--json")
    assert bad.returncode == 5, bad.stderr
    assert bad.stderr == (
        "moetune: error: --vram: '16' has no unit (did you mean 16G?) [BAD_VALUE, exit 5]\n"
    )
    assert json.loads(bad.stdout)["error"]["name"] == "BAD_VALUE"


def test_the_version_among_the_apps_own_options() -> None:
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("moetune ")
    for argv in (["--version"], ["--debug", "--version"], ["--version", "plan"]):
        done = moetune(*argv)
        assert (done.returncode, done.stdout) == (0, out), argv
    assert moetune("--version", "--bogus").returncode == 2  # no such option


def test_a_start_registers_the_command_it_runs() -> None:
    """``moetune NAME ...`` loads the module that registers NAME (each command and group of
    the whole tree), nothing for --version, every module for the help or an unknown name."""
    from moetune.cli import COMMAND_MODULES, modules_for

    registered = {
        info.name or info.callback.__name__: info.callback.__module__
        for info in app.registered_commands
        if info.callback is not None
    }
    for group in app.registered_groups:
        assert group.typer_instance is not None and group.name is not None
        callback = group.typer_instance.registered_commands[0].callback
        assert callback is not None
        registered[group.name] = callback.__module__
    assert set(registered) == set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    for name, module in registered.items():
        assert modules_for([name, "--json"]) == (module.rsplit(".", 1)[1],), name
        assert modules_for(["--debug", name]) == (module.rsplit(".", 1)[1],), name
    assert modules_for(["--version"]) == ()
    for argv in ([], ["--help"], ["insp"], ["--", "plan"], None):
        assert modules_for(argv) == COMMAND_MODULES, argv


def test_the_help_and_a_misspelt_command_see_every_command() -> None:
    done = moetune("--help")
    assert done.returncode == 0, done.stderr
    for name in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
        assert f"\n  {name} " in done.stdout, name
    wrong = moetune("insp", str(EXAMPLE_QWEN))
    assert wrong.returncode == 2 and "Did you mean 'inspect'?" in wrong.stderr, wrong.stderr


def test_a_share_is_a_percentage_or_a_fraction() -> None:
    from moetune.cli.options import parse_share
    from moetune.errors import BadValueError

    assert parse_share("10%") == pytest.approx(0.10)
    assert parse_share(" 2.5 % ") == pytest.approx(0.025)
    assert parse_share("0.25") == 0.25 and parse_share("0") == 0.0
    for bad in ("", "%", "ten", "-1", "nan", "inf%"):
        with pytest.raises(BadValueError):
            parse_share(bad)
