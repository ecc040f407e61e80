"""`moetune alias`: functions for bash, zsh and fish that pass each shell's syntax check and,
run for real, hand llama-server exactly the tuned arguments (plus the caller's)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune.cli import app
from moetune.errors import BadValueError, ExitCode
from moetune.jobs.alias import SHELLS, Shell, alias_text, check_name, fish_quote, shell_from_path
from moetune.store.tuned import (
    BuildIdentity,
    DeviceIdentity,
    Measured,
    ModelIdentity,
    ProfileStore,
    TunedPlacement,
    TunedProfile,
    TuneKey,
    TuneSettings,
    model_identity,
    profile_name,
)
from moetune.units import GIB

from factory import write_model
from helpers import MOETUNE, moetune_env

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "dotfiles"
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


def have(shell: str) -> bool:
    return shutil.which(shell) is not None


def shells_here() -> list[Shell]:
    return [s for s in SHELLS if have(s)]


TUNE_COMMAND = [
    "moetune",
    "run",
    "/models/m.gguf",
    "--server",
    "/usr/bin/llama-server",
    "--target-vram",
    "22G",
    "--ctx",
    "32k",
    "--cache-type",
    "q8_0",
    "--",
    "--rpc",
    "10.0.0.2:50052",
]


def make_profile(
    command: list[str],
    file_name: str = "m.gguf",
    identity_path: str = "/models/m.gguf",
    n_ctx: int = 32768,
) -> TunedProfile:
    model = ModelIdentity(
        file_name=file_name, file_bytes=1, header_sha256="0" * 64, path=identity_path
    )
    gpu = DeviceIdentity(name="NVIDIA GeForce RTX 4090", device="CUDA0", vram_total_bytes=24 * GIB)
    build = BuildIdentity(
        build_number=6500,
        commit="abc1234",
        version="b6500",
        binary="/usr/bin/llama-server",
        binary_fingerprint="1:1",
    )
    settings = TuneSettings(
        n_ctx=n_ctx,
        type_k="q8_0",
        type_v="q8_0",
        target_bytes=22 * GIB,
        extra_args=["--rpc", "10.0.0.2:50052"],
        command=TUNE_COMMAND,
    )
    key = TuneKey(model=model, gpu=gpu, llama_cpp=build, settings=settings)
    return TunedProfile(
        name=profile_name(key),
        tuned_at="2025-01-01T00:00:00+00:00",
        model=model,
        gpu=gpu,
        llama_cpp=build,
        settings=settings,
        placement=TunedPlacement(n_cpu_moe=12),
        measured=Measured(
            vram_bytes=21 * GIB,
            ttft_s=0.4,
            decode_tps=41.5,
            decode_tps_min=40.2,
            decode_tps_max=42.0,
            repeats=3,
            prompt_tps=900.0,
        ),
        command=command,
    )


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


# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-MoE-Q8.gguf", "qwen3moe")


def save_for(model: Path, n_ctx: int = 32768) -> TunedProfile:
    identity = model_identity(model)
    profile = make_profile(
        ["/usr/bin/llama-server", "-m", str(model), "--n-cpu-moe", "3"],
        file_name=identity.file_name,
        identity_path=identity.path,
        n_ctx=n_ctx,
    )
    profile = profile.model_copy(update={"model": identity})
    profile = profile.model_copy(update={"name": profile_name(profile.key)})
    ProfileStore().save(profile)
    return profile


@pytest.mark.parametrize("shell", SHELLS)
def test_cli_prints_the_function(tiny: Path, shell: Shell) -> None:
    save_for(tiny)
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--shell", shell])
    assert result.exit_code == 0, result.output
    assert ("function tiny" if shell == "fish" else "tiny() {") in result.stdout
    assert "--n-cpu-moe 3" in result.stdout
    if have(shell):
        subprocess.run([shell, "-n"], input=result.stdout, text=True, check=True)


def test_cli_picks_the_context(tiny: Path) -> None:
    save_for(tiny, 32768)
    save_for(tiny, 8192)
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--ctx", "8192"])
    assert result.exit_code == 0, result.output
    assert "ctx 8192" in result.stdout


def test_cli_without_a_profile(tiny: Path) -> None:
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny)])
    assert result.exit_code == ExitCode.FILE_NOT_FOUND
    assert "no tuned profile for Tiny-MoE-Q8.gguf" in result.output
    assert "moetune run" in result.output


def test_cli_refuses_a_changed_model(tiny: Path) -> None:
    save_for(tiny)
    write_model(tiny, "qwen3moe", n_layers=6)  # same name, another file
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny)])
    assert result.exit_code == ExitCode.BAD_VALUE, result.output
    assert "out of date" in result.output and "model file changed" in result.output
    assert "--retune" in result.output


def test_cli_bad_name_and_shell(tiny: Path) -> None:
    save_for(tiny)
    bad_name = CliRunner().invoke(app, ["alias", "if", str(tiny)])
    assert bad_name.exit_code == ExitCode.BAD_VALUE
    bad_shell = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--shell", "tcsh"])
    assert bad_shell.exit_code == ExitCode.BAD_VALUE
    assert "bash, zsh or fish" in bad_shell.output


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


def test_cli_refuses_ctx_max(tiny: Path) -> None:
    save_for(tiny)
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--ctx", "max"])
    assert result.exit_code == ExitCode.BAD_VALUE
    assert "--ctx" in result.stderr


def test_cli_picks_the_profile_tuned_with_the_projector(tiny: Path, tmp_path: Path) -> None:
    """alias --mmproj FILE: the profile whose arguments carry that file (as run saves it,
    absolute); none tuned with it: one line that says how to tune one."""
    mmproj = tmp_path / "mmproj.gguf"
    plain = save_for(tiny, 32768)
    with_it = plain.model_copy(
        update={
            "settings": plain.settings.model_copy(
                update={"n_ctx": 8192, "extra_args": ["--mmproj", str(mmproj.absolute())]}
            ),
            "command": [*plain.command, "--mmproj", str(mmproj.absolute())],
        }
    )
    ProfileStore().save(with_it.model_copy(update={"name": profile_name(with_it.key)}))
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--mmproj", str(mmproj)])
    assert result.exit_code == 0, result.output
    assert "ctx 8192" in result.stdout and str(mmproj.absolute()) in result.stdout
    other = tmp_path / "other-mmproj.gguf"
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--mmproj", str(other)])
    assert result.exit_code == ExitCode.FILE_NOT_FOUND
    assert "with other-mmproj.gguf" in result.output and "--mmproj" in result.output


@pytest.mark.parametrize("shell", SHELLS)
def test_alias_from_a_plan_without_a_profile(tiny: Path, shell: Shell) -> None:
    """No tuned profile: the plan for --gpu, marked PREDICTED in the comment and on stderr;
    the function passes the shell's syntax check, and bash runs llama-server with it."""
    done = subprocess.run(
        [*MOETUNE, "alias", "tiny", str(tiny), "--gpu", "rtx4090", "--shell", shell],
        capture_output=True,
        text=True,
        timeout=120,
        env=moetune_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "PREDICTED" in done.stdout and "predicted, not measured" in done.stderr
    body = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("#"))
    assert f"-m {tiny}" in done.stdout and "--n-cpu-moe" not in body  # all on the GPU
    if have(shell):
        subprocess.run([shell, "-n"], input=done.stdout, text=True, check=True)
    if shell == "bash":
        ran = subprocess.run(
            ["bash", "-c", f"{done.stdout}\ntiny --version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0 and "version" in (ran.stdout + ran.stderr)
    refused = CliRunner().invoke(
        app, ["alias", "tiny", str(tiny), "--gpu", "rtx4090", "--require-tuned"]
    )
    assert refused.exit_code == ExitCode.FILE_NOT_FOUND
