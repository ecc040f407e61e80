"""What many test modules share: running moetune (as a process or in-process) and the examples.

``moetune(...)`` starts ``python -m moetune`` as a child with SIGINT at its default
disposition, whatever the shell that started pytest did with it (``bash .ci/run &`` from a
script ignores SIGINT in background jobs, and a child inherits an ignored signal), so tests
that interrupt it behave the same everywhere.  ``cli(...)`` runs the typer app in-process.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from moetune.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "models"
EXAMPLE_QWEN = EXAMPLES / "Qwen3-30B-A3B-Q4_K_M.header.gguf"
EXAMPLE_GPT_OSS = EXAMPLES / "gpt-oss-120b-MXFP4.header.gguf"
MOETUNE = (sys.executable, "-m", "moetune")
# Root reads any file; without these two capabilities it is refused like anyone else.
NO_DAC = "-dac_override,-dac_read_search"
AS_ORDINARY_ROOT = ("setpriv", "--bounding-set", NO_DAC, "--inh-caps", NO_DAC, "--")


def as_ordinary_user() -> tuple[str, ...]:
    """The prefix that runs a child as a user whom a file's mode binds: none for one already,
    for root ``setpriv`` without the capabilities that read past it (skipped without it)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        import pytest

        pytest.skip("running as root without setpriv: a file's mode cannot refuse root")
    return AS_ORDINARY_ROOT


def default_signals() -> None:
    """preexec_fn: SIGINT and SIGTERM back at their default disposition in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def moetune_env(home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a moetune child: wide columns, optionally its own MOETUNE_HOME."""
    env = {**os.environ, "COLUMNS": "200", **extra}
    if home is not None:
        env["MOETUNE_HOME"] = str(home)
    return env


def moetune(
    *args: str, home: Path | None = None, timeout: float = 300, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``moetune ARGS`` to completion; stdout and stderr as text."""
    return subprocess.run(
        [*prefix, *MOETUNE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=moetune_env(home),
        preexec_fn=default_signals,
    )


def start_moetune(*args: str, home: Path | None = None) -> subprocess.Popen[str]:
    """Start ``moetune ARGS`` in the background: stdout discarded, stderr piped."""
    return subprocess.Popen(
        [*MOETUNE, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=moetune_env(home),
        preexec_fn=default_signals,  # noqa: PLW1509
    )


def cli(*args: str) -> tuple[int, str, str]:
    """Run the app in-process: (exit code, stdout, stderr)."""
    from moetune.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: ExitCode) -> str:
    """``result`` failed with ``code`` and one ``moetune: error:`` line on stderr; that line."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("moetune: error: ")
    return lines[0]


def have(program: str) -> bool:
    """``program`` (a shell, a tool) is on PATH."""
    return shutil.which(program) is not None


def section_block(title: str) -> list[str]:
    """The lines of the first ```sh block under the README heading ``title``."""
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", body, re.DOTALL)
    assert match, f"no sh block under {title!r}"
    return match[1].strip().splitlines()
