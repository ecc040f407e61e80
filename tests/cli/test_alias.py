"""`moetune alias` as a command: the function printed for a tuned profile, the context picked,
no or a changed profile refused, bad names and shells."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune import hardware
from moetune.cli import app
from moetune.errors import ExitCode
from moetune.jobs.alias import SHELLS, Shell
from moetune.store.tuned import ProfileStore, TunedProfile, model_identity, profile_name
from moetune.units import GIB, MIB

from support.factory import write_model
from support.fakes import FakeGpuProbe
from support.helpers import have
from support.profiles import make_profile

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


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU detected here, wherever the tests run."""
    monkeypatch.setattr(hardware, "detect_gpu_probe", FakeGpuProbe.none)


@pytest.mark.usefixtures("no_gpu")
def test_cli_without_a_profile(tiny: Path) -> None:
    """Nothing tuned and no GPU to plan for: what stops it is the GPU (NO_GPU), and the line
    says both; --require-tuned refuses for the profile alone (FILE_NOT_FOUND)."""
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny)])
    assert result.exit_code == ExitCode.NO_GPU
    assert "no tuned profile for Tiny-MoE-Q8.gguf" in result.output
    assert "no GPU here" in result.output and "moetune run" in result.output
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--require-tuned"])
    assert result.exit_code == ExitCode.FILE_NOT_FOUND


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


def test_cli_refuses_ctx_max(tiny: Path) -> None:
    save_for(tiny)
    result = CliRunner().invoke(app, ["alias", "tiny", str(tiny), "--ctx", "max"])
    assert result.exit_code == ExitCode.BAD_VALUE
    assert "--ctx" in result.stderr


@pytest.mark.usefixtures("no_gpu")
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
    assert result.exit_code == ExitCode.NO_GPU  # none tuned with it, and no GPU to plan for
    assert "with other-mmproj.gguf" in result.output and "--mmproj" in result.output


# --- choosing among tuned profiles, and the plan without one -----------------------------------


def save_on(model: Path, gpu: str, vram: int, target: int, n: int) -> TunedProfile:
    """A profile of ``model`` tuned on one GPU ``gpu`` of ``vram`` for ``target``, N=``n``."""
    profile = save_for(model)
    ProfileStore().remove(profile.name)
    device = profile.gpu.model_copy(update={"name": gpu, "vram_total_bytes": vram})
    settings = profile.settings.model_copy(update={"target_bytes": target})
    command = ["/usr/bin/llama-server", "-m", str(model), "--n-cpu-moe", str(n)]
    profile = profile.model_copy(update={"gpu": device, "settings": settings, "command": command})
    profile = profile.model_copy(update={"name": profile_name(profile.key)})
    ProfileStore().save(profile)
    return profile


def test_cli_picks_the_profile_by_the_gpu_it_was_tuned_on(tiny: Path) -> None:
    """Two profiles of one model, tuned on an RTX 4090 and on an RTX 3060: alias takes the
    newest and names the other with --vram, which tells them apart; the device set picks one:
    --gpu ID (a hardware profile) or --vram (each device's memory, within 10 %). The
    device-set selector knew RPC servers only."""
    big = save_on(tiny, "NVIDIA GeForce RTX 4090", 24564 * MIB, 22 * GIB, 3)
    small = save_on(tiny, "NVIDIA GeForce RTX 3060", 12288 * MIB, 10 * GIB, 7)
    runner = CliRunner()
    newest = runner.invoke(app, ["alias", "tiny", str(tiny)])
    assert newest.exit_code == 0, newest.output
    said = " ".join(newest.stderr.split())
    assert big.name in said and small.name in said and "using the newest, " in said
    assert "--vram 24564M" in said and "--vram 12G" in said
    used = big if f"using the newest, {big.name}" in said else small
    assert f"--n-cpu-moe {3 if used is big else 7} " in newest.stdout
    for args, n in ((["--gpu", "rtx4090"], 3), (["--vram", "24G"], 3), (["--vram", "12G"], 7)):
        picked = runner.invoke(app, ["alias", "tiny", str(tiny), *args])
        assert picked.exit_code == 0, (args, picked.output)
        assert f"--n-cpu-moe {n} " in picked.stdout, (args, picked.stdout)
    on_3060 = runner.invoke(app, ["alias", "tiny", str(tiny), "--gpu", "rtx3060-12g"])
    assert "NVIDIA GeForce RTX 3060 (12.00 GiB)" in on_3060.stdout, on_3060.output


@pytest.mark.usefixtures("no_gpu")
def test_cli_without_a_profile_plans_for_the_target_and_the_rpc_servers(tiny: Path) -> None:
    """Nothing tuned: the plan alias falls back to is made for --target-vram and --rpc, as
    `moetune plan` makes it (it planned for the whole card and no server), its comment gives
    each device's peak and the run that tunes what these options pick, and a target above
    the device is refused as plan refuses it."""
    runner = CliRunner()
    budget = runner.invoke(app, ["alias", "tiny", str(tiny), "--vram", "8G", "--target-vram", "3G"])
    assert budget.exit_code == 0, budget.output
    assert "of a 3.00 GiB budget" in budget.stdout, budget.stdout
    assert f"# measure it: moetune run {tiny} --target-vram 3G," in budget.stdout
    servers = ["--rpc", "10.0.0.2:50052", "--vram", "8G,8G"]
    rpc = runner.invoke(app, ["alias", "tiny", str(tiny), *servers])
    assert rpc.exit_code == 0, rpc.output
    assert "--rpc 10.0.0.2:50052 " in rpc.stdout, rpc.stdout
    assert "predicted peaks RPC0 " in rpc.stdout and "devices given (--vram)" in rpc.stdout
    assert f"moetune run {tiny} --rpc 10.0.0.2:50052, then" in rpc.stdout
    above = runner.invoke(app, ["alias", "tiny", str(tiny), "--vram", "8G", "--target-vram", "9G"])
    assert above.exit_code == ExitCode.BAD_VALUE, above.output
    assert "more than" in above.stderr
