"""`moetune alias`'s functions for bash, zsh and fish: each shell's syntax check, and run for
real they hand a stand-in server exactly the tuned arguments (plus the caller's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from moetune.errors import BadValueError, ProfileNotFoundError
from moetune.jobs.alias import SHELLS, Shell, alias_text, check_name, shell_from_path
from moetune.jobs.quoting import fish_quote
from moetune.store.tuned import DeviceIdentity, TunedProfile
from moetune.units import GIB

from support.helpers import have
from support.profiles import TUNE_COMMAND, make_profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dotfiles"
TRICKY = [
    "-m",
    '/models/it\'s a "model" $HOME `x` !1.gguf',
    "-ngl",
    "99",
    "-ot",
    r"blk\.(3[4-9]|4[0-7])\.ffn_(up|down|gate)_(ch|)exps=CPU,blk\.33\.ffn_(down)_exps=CPU",
    "--alias",
    "a;b&&c|d*?[x]{y} \\ end",
    "--fit",
    "off",
]


def fake_server(tmp_path: Path) -> Path:
    """An executable that prints each argument it gets on its own NUL-terminated record."""
    script = tmp_path / "fake server"  # a space in the path, too
    script.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done\n')
    script.chmod(0o755)
    return script


def run_function(shell: Shell, text: str, call: str) -> list[str]:
    script = f"{text}\n{call}\n"
    done = subprocess.run([shell, "-c", script], capture_output=True, check=True, timeout=30)
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("shell", SHELLS)
def test_syntax_check(shell: Shell) -> None:
    if not have(shell):
        assert shell != "bash", "bash must be there"
        pytest.skip(f"{shell} is not installed")
    text = alias_text("qwen", make_profile(["/opt/llama/llama-server", *TRICKY]), shell)
    done = subprocess.run(
        [shell, "-n"], input=text, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr + text


@pytest.mark.parametrize("shell", SHELLS)
def test_runs_with_exact_arguments(tmp_path: Path, shell: Shell) -> None:
    if not have(shell):
        pytest.skip(f"{shell} is not installed")
    server = fake_server(tmp_path)
    text = alias_text("qwen", make_profile([str(server), *TRICKY]), shell)
    got = run_function(shell, text, "qwen --port 8081 'two words'")
    assert got == [*TRICKY, "--port", "8081", "two words"]


# what a dotfile must carry as data: line breaks, a CR, controls, unicode separators, a byte
# of a path that is not UTF-8 (as os.fsdecode gives it), quotes and shell syntax
CONTROL = [
    "-m",
    "/m/a\rb.gguf",
    "--alias",
    "x\n[evil]\nmodel=y",
    "\x1b[31mred\t\x7f",
    "sep\x85\u2028\u2029 ü模型",
    "/m/bad\udcffbyte'\\$(x)",
    "",
]


@pytest.mark.parametrize("shell", SHELLS)
def test_control_characters_come_back_exactly(tmp_path: Path, shell: Shell) -> None:
    """Each word is written in the shell's own escapes: the snippet is printable text, so an
    editor or a text-mode read (which turns a lone \\r into a newline) cannot change it, and
    the shell hands the server the exact bytes."""
    if not have(shell):
        pytest.skip(f"{shell} is not installed")
    server = fake_server(tmp_path)
    text = alias_text("qwen", make_profile([str(server), *CONTROL]), shell)
    assert all(char.isprintable() or char == "\n" for char in text), repr(text)
    dotfile = tmp_path / "dotfile"
    dotfile.write_text(text, encoding="utf-8")
    script = dotfile.read_text(encoding="utf-8") + "qwen\n"  # universal newlines
    done = subprocess.run([shell, "-c", script], capture_output=True, check=True, timeout=30)
    expected = [word.encode("utf-8", "surrogateescape") for word in CONTROL]
    assert done.stdout.split(b"\0")[:-1] == expected


@pytest.mark.parametrize("shell", SHELLS)
def test_a_nul_in_an_argument_is_refused(shell: Shell) -> None:
    with pytest.raises(BadValueError, match=r"cannot write the alias qwen: .*NUL"):
        alias_text("qwen", make_profile(["llama-server", "-m", "/m/a\0b.gguf"]), shell)


def test_comments_say_what_was_tuned() -> None:
    text = alias_text("qwen", make_profile(["llama-server", "-m", "/m.gguf"]), "bash")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert len(header) == 3
    assert "NVIDIA GeForce RTX 4090" in header[0] and "build 6500" in header[0]
    assert "--n-cpu-moe 12" in header[1] and "41.5 tok/s (40.2-42.0 over 3)" in header[1]
    # the re-tune hint is the user's whole command, --retune before the arguments after --
    assert header[2].endswith(
        " ".join([*TUNE_COMMAND[:11], "--retune", *TUNE_COMMAND[11:]])
        + ", then moetune alias qwen again"
    )


def two_server_profile() -> TunedProfile:
    """A profile tuned on two RPC servers (the first is also its ``gpu``)."""
    servers = [
        DeviceIdentity(name=f"127.0.0.1:{port}", device=f"RPC{i}", vram_total_bytes=23 * GIB)
        for i, port in enumerate((50052, 50053))
    ]
    profile = make_profile(["llama-server", "-m", "/m.gguf"])
    return profile.model_copy(update={"gpu": servers[0], "devices": servers})


def test_comments_and_profiles_name_every_device_of_the_set() -> None:
    from rich.console import Console

    from moetune.jobs.export import ServeEntry
    from moetune.report.profiles import render_tuned, tuned_list, tuned_table

    profile = two_server_profile()
    header = alias_text("qwen", profile, "bash").splitlines()[0]
    assert "127.0.0.1:50052" in header and "127.0.0.1:50053" in header, header
    from moetune.jobs.export import _tuned

    entry: ServeEntry = _tuned(profile)
    assert "127.0.0.1:50053" in entry.note
    for view in (
        tuned_table([profile], "/p"),
        tuned_list([profile], "/p"),
        render_tuned(profile, "/p/x.json"),
    ):
        console = Console(width=200, record=True)
        console.print(view)
        shown = console.export_text()
        assert "127.0.0.1:50052" in shown and "127.0.0.1:50053" in shown, shown


def test_newlines_in_names_cannot_escape_the_comment() -> None:
    profile = make_profile(["llama-server"], file_name="a\nrm -rf x.gguf")
    text = alias_text("qwen", profile, "bash")
    body = ("}", 'llama-server "$@"')
    assert all(
        line.startswith("#") or "qwen" in line or line.strip() in body for line in text.splitlines()
    )
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


@pytest.mark.parametrize("name", ["1abc", "if", "a b", "x;rm", "", "end", "qw$n"])
def test_bad_names(name: str) -> None:
    with pytest.raises(BadValueError):
        check_name(name)


@pytest.mark.parametrize("name", ["qwen", "qwen30b", "gpt_oss", "glm-air"])
def test_good_names(name: str) -> None:
    assert check_name(name) == name


def test_shell_from_path() -> None:
    assert shell_from_path("/usr/bin/zsh") == "zsh"
    assert shell_from_path("/usr/local/bin/fish") == "fish"
    assert shell_from_path("/bin/sh") == "bash"
    assert shell_from_path(None) == "bash"


def test_fish_quote() -> None:
    assert fish_quote("plain-word_1.gguf") == "plain-word_1.gguf"
    assert fish_quote("it's") == "'it\\'s'"
    assert fish_quote(r"a\.b") == r"'a\\.b'"
    assert fish_quote("") == "''"
    assert fish_quote("a\rb'") == "'a'\\X0d'b\\''"
    assert fish_quote("\n") == "\\X0a"


@pytest.mark.parametrize(("shell", "suffix"), [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")])
def test_example_dotfiles_parse(shell: str, suffix: str) -> None:
    path = EXAMPLES / f"moetune.{suffix}"
    assert path.is_file()
    if not have(shell):
        pytest.skip(f"{shell} is not installed")
    done = subprocess.run(
        [shell, "-n", str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr


def test_of_several_tuned_profiles_the_newest_unless_a_selector_says(tmp_path: Path) -> None:
    from moetune.store.tuned import ProfileStore, Selectors, model_profile

    store = ProfileStore(tmp_path)
    first = make_profile(["llama-server", "-m", "/m.gguf"])
    settings = first.settings.model_copy(update={"target_bytes": 20 * GIB})
    second = first.model_copy(
        update={
            "name": first.name + "-b",
            "settings": settings,
            "tuned_at": "2030-01-01T00:00:00+00:00",
        }
    )
    store.save(first)
    store.save(second)
    identity = first.model

    warned: list[str] = []

    def pick(select: Selectors | None = None) -> str:
        return model_profile(store, identity, warn=warned.append, select=select).name

    assert pick() == second.name  # the newest
    (said,) = warned
    assert f"using the newest, {second.name} (--target-vram 20G)" in said, said
    assert f"{first.name} (--target-vram 22G) also" in said and "--profile NAME" in said
    assert pick(Selectors(targets=(20 * GIB,))) == second.name
    assert pick(Selectors(targets=(22 * GIB,))) == first.name
    assert pick(Selectors(name=first.name)) == first.name  # exact, though a prefix of both
    assert pick(Selectors(name=second.name)) == second.name
    with pytest.raises(ProfileNotFoundError):
        pick(Selectors(rpc=("10.0.0.9:1",)))  # tuned on no RPC server: nothing matches
