"""Fuzz: the user's environment (issue 38), seeded, in-process where it can be.

- ``LLAMA_ARG_*`` variables (llama.cpp's, a few at a time, hostile values: empty, NaN,
  5,000 digits, ``-ot`` rules, shell syntax) never move what moetune plans: `plan`, `alias`
  and `export preset` print exactly what they print without them; `run` ends in one line.
- ``MOETUNE_HOME`` pointing at a file, below a file, at a dangling link, a loop of links, a
  FIFO, ``/dev/null``, a path too long for the system, a relative one, ``~``, empty, and (run
  as a user that the modes bind) a folder that may not be read or written;
  ``MOETUNE_LLAMA_SERVER``, ``MOETUNE_NO_MEASURE``, ``GGML_OP_OFFLOAD_MIN_BATCH`` and
  ``COLUMNS`` with hostile values: each command ends in its normal output or in one line with
  a named code, under ``--json`` in one document.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from moetune.core.flags import FLAGS
from moetune.report import line, render

from support.factory import ModelFactory
from support.fuzz import Case, Fuzz, outcome_problems
from support.helpers import EXAMPLE_QWEN, ROOT, as_ordinary_user, cli, moetune

SEED = 38
LLAMA_CASES = 40
EXAMPLE = str(EXAMPLE_QWEN)
GOOD_BENCH = ROOT / "tests" / "data" / "llama_bench" / "readme_rtx4080_qwen2.5_7b.jsonl"
LLAMA_ARGS = sorted({n for e in FLAGS for n in e.env_names if n.startswith("LLAMA_ARG_")})
# those a shell profile sets to move the placement, drawn more often
PLACEMENT_ARGS = (
    "LLAMA_ARG_N_CPU_MOE",
    "LLAMA_ARG_CPU_MOE",
    "LLAMA_ARG_OVERRIDE_TENSOR",
    "LLAMA_ARG_N_GPU_LAYERS",
    "LLAMA_ARG_TENSOR_SPLIT",
    "LLAMA_ARG_CTX_SIZE",
    "LLAMA_ARG_UBATCH",
    "LLAMA_ARG_BATCH",
    "LLAMA_ARG_THREADS",
    "LLAMA_ARG_MODEL",
    "LLAMA_ARG_DEVICE",
    "LLAMA_ARG_FIT",
)
HOSTILE = (
    "",
    "0",
    "-1",
    "12",
    "1e309",
    "nan",
    "9" * 5000,
    "١٢",
    "exps=CPU",
    r"blk\.([0-9]|[1-4][0-9])\.ffn_.*_exps\.=CPU",
    "a;b,c",
    "\n",
    "$(touch pwned)",
    "'; touch pwned; '",
    "/nonexistent.gguf",
    "on",
)


@pytest.fixture
def fresh_consoles() -> Iterator[None]:
    """Each case's consoles made under its own environment (COLUMNS), and after the test
    under the usual one again."""
    render.stdout.cache_clear()
    line.stderr_console.cache_clear()
    yield
    render.stdout.cache_clear()
    line.stderr_console.cache_clear()


def run_with(fuzz: Fuzz, case: Case, env: dict[str, str]) -> tuple[int, str, str] | None:
    """``case`` in-process with ``env`` set over the test's environment, then put back."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    render.stdout.cache_clear()
    line.stderr_console.cache_clear()
    try:
        return fuzz.run(case)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.mark.usefixtures("fresh_consoles")
def test_llama_arg_variables(
    model_factory: ModelFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 seeded sets of one to three LLAMA_ARG_* variables: every output as without them."""
    for name in [n for n in os.environ if n.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # "$(touch pwned)" would land here
    model = str(model_factory("qwen3moe"))
    commands: tuple[tuple[str, ...], ...] = (
        ("plan", EXAMPLE, "--vram", "24G", "--ram", "64G", "--json"),  # --ram: the same RAM
        ("plan", EXAMPLE, "--vram", "24G", "--ram", "64G"),
        ("alias", "fz", model, "--vram", "24G"),
        ("export", "preset", model, "--vram", "24G"),
        ("run", model, "--target-vram", "1G"),  # no llama-server here: one line
    )
    baseline = {args: cli(*args) for args in commands}
    assert [code for code, _, _ in baseline.values()][:4] == [0, 0, 0, 0], baseline
    rng = random.Random(SEED)
    fuzz = Fuzz(limit_s=10.0)
    for i in range(LLAMA_CASES):
        names = [
            rng.choice(PLACEMENT_ARGS if rng.random() < 0.6 else LLAMA_ARGS)
            for _ in range(rng.randint(1, 3))
        ]
        env = {name: rng.choice(HOSTILE) for name in names}
        args = commands[i % len(commands)]
        what = ", ".join(f"{k}={v[:30]!r}" for k, v in env.items())
        done = run_with(fuzz, Case(args, what, len(env), succeed=args[0] != "run"), env)
        if done is not None and args[0] != "run" and done[1] != baseline[args][1]:
            fuzz.add("the output is not the one without the variables", Case(args, what))
    assert not (tmp_path / "pwned").exists()
    fuzz.check(min_runs=LLAMA_CASES)


def _file(d: Path) -> str:
    (d / "file").write_text("not a folder")
    return str(d / "file")


def _below_file(d: Path) -> str:
    return _file(d) + "/home"


def _dangling(d: Path) -> str:
    (d / "dangling").symlink_to(d / "nowhere")
    return str(d / "dangling")


def _loop(d: Path) -> str:
    (d / "a").symlink_to(d / "b")
    (d / "b").symlink_to(d / "a")
    return str(d / "a")


def _fifo(d: Path) -> str:
    os.mkfifo(d / "fifo")
    return str(d / "fifo")


def _broken_inside(d: Path) -> str:
    """A home whose speed, profiles and hardware entries are files, folders and FIFOs where
    the others are expected."""
    home = d / "home"
    (home / "speed").mkdir(parents=True)
    (home / "speed" / "a.json").mkdir()
    os.mkfifo(home / "speed" / "b.json")
    (home / "profiles").write_text("a file, not a folder")
    (home / "hardware").symlink_to(home / "hardware")
    return str(home)


# (what, MOETUNE_HOME made in a fresh folder); the environment also sets HOME and the XDG
# folders to that folder, so an empty or "~" home never reaches the user's own
HOMES: tuple[tuple[str, Callable[[Path], str]], ...] = (
    ("a file", _file),
    ("below a file", _below_file),
    ("a dangling link", _dangling),
    ("a loop of links", _loop),
    ("a FIFO", _fifo),
    ("/dev/null", lambda d: "/dev/null"),
    ("a path too long", lambda d: str(d / ("x" * 300) / ("y" * 5000))),
    ("a relative path", lambda d: "relative/home"),
    ("~", lambda d: "~"),
    ("empty", lambda d: ""),
    ("a newline in the path", lambda d: str(d / "a\nb")),
    ("broken entries inside", _broken_inside),
)


@pytest.mark.usefixtures("fresh_consoles")
def test_moetune_home(
    model_factory: ModelFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every MOETUNE_HOME above through five commands (of eight, seeded) that read or write
    it: normal output or one line."""
    model = str(model_factory("qwen3moe"))
    commands: tuple[tuple[str, ...], ...] = (
        ("plan", EXAMPLE, "--vram", "24G"),
        ("plan", EXAMPLE, "--vram", "24G", "--json"),
        ("calibrate", str(GOOD_BENCH)),
        ("calibrate", str(GOOD_BENCH), "--json"),
        ("profiles", "list"),
        ("profiles", "list", "--json"),
        ("export", "preset", model, "--vram", "24G"),
        ("alias", "fz", model, "--vram", "24G"),
    )
    rng = random.Random(SEED)
    fuzz = Fuzz(limit_s=10.0)
    for index, (what, make) in enumerate(HOMES):
        for args in rng.sample(commands, 5):
            folder = tmp_path / f"{index}-{len(fuzz.problems)}-{rng.randrange(10**6)}"
            folder.mkdir()
            monkeypatch.chdir(folder)
            env = {
                "MOETUNE_HOME": make(folder),
                "HOME": str(folder),
                "XDG_CONFIG_HOME": str(folder / "config"),
                "XDG_DATA_HOME": str(folder / "data"),
                "XDG_CACHE_HOME": str(folder / "cache"),
            }
            run_with(fuzz, Case(args, f"MOETUNE_HOME: {what}"), env)
    fuzz.check(min_runs=len(HOMES) * 5)


@pytest.mark.parametrize("mode", [0o000, 0o500], ids=["unreadable", "read-only"])
def test_a_home_the_user_may_not_use(tmp_path: Path, mode: int) -> None:
    """A MOETUNE_HOME its user may not read (or not write), as a user the modes bind (root
    without its capabilities): one line naming it, or the normal output."""
    prefix = as_ordinary_user()
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(mode)
    try:
        plan = ("plan", EXAMPLE, "--vram", "24G", "--json")
        for args in (
            *((plan,) if mode == 0 else ()),
            ("calibrate", str(GOOD_BENCH)),
            ("profiles", "list"),
        ):
            done = moetune(*args, home=home, prefix=prefix, timeout=60)
            problems = outcome_problems(args, done.returncode, done.stdout, done.stderr)
            assert not problems, (args, problems, done.stderr)
            # plan may answer without its home; calibrate writes there, and profiles list
            # reads what it may not (a home it may read holds no profiles: none to list)
            if args[0] == "calibrate" or (args[0] == "profiles" and mode == 0):
                assert done.returncode != 0 and "denied" in done.stderr.lower(), done.stderr
    finally:
        home.chmod(0o700)


LAUNCHED = ("MOETUNE_LLAMA_SERVER", "GGML_OP_OFFLOAD_MIN_BATCH")  # read by run as well
OTHERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MOETUNE_LLAMA_SERVER", ("", "/nonexistent", "/etc/passwd", "/", "a" * 5000, "\n")),
    ("MOETUNE_NO_MEASURE", ("1", "yes", "a" * 1000, " ")),
    ("GGML_OP_OFFLOAD_MIN_BATCH", ("", "0", "-1", "1e309", "nan", "9" * 5000, "١٢", " 32")),
    ("COLUMNS", ("0", "1", "-1", "nan", "9" * 30, "١٢")),
    ("LINES", ("0", "-1", "nan")),
)


@pytest.mark.usefixtures("fresh_consoles")
def test_other_variables() -> None:
    """Each hostile value of the other variables moetune reads, through `plan` (and `run`
    where it reads them too): normal output or one line, and a plan's text never empty."""
    fuzz = Fuzz(limit_s=10.0)
    runs = 0
    for name, values in OTHERS:
        for value in values:
            commands: tuple[tuple[str, ...], ...] = (
                ("plan", EXAMPLE, "--vram", "24G"),
                ("plan", EXAMPLE, "--vram", "24G", "--json"),
            )
            if name in LAUNCHED:
                commands += (("run", EXAMPLE, "--target-vram", "1G", "--json"),)
            for args in commands:
                runs += 1
                case = Case(args, f"{name}={value[:30]!r}")
                done = run_with(fuzz, case, {name: value})
                if done is not None and done[0] == 0 and args[0] == "plan":
                    shown = json.loads(done[1]) if "--json" in args else done[1].strip()
                    if not shown:
                        fuzz.add("exit 0 and no plan printed", case)
    fuzz.check(min_runs=runs)
