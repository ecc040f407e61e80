"""`moetune alias` from a plan when no profile is tuned: marked PREDICTED, and bash runs the
real llama-server with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moetune.cli import app
from moetune.errors import ExitCode
from moetune.jobs.alias import SHELLS, Shell

from support.factory import write_model
from support.helpers import MOETUNE, have, moetune_env

# --- the command -------------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_model(tmp_path / "Tiny-MoE-Q8.gguf", "qwen3moe")


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
