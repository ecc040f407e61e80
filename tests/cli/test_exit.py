"""How a moetune process ends: what a normal exit does that a caller can see: the atexit
functions, the streams flushed, the exit code, and a thread still running waited for."""

from __future__ import annotations

import subprocess
import sys

from moetune.errors import ExitCode

from support.helpers import EXAMPLE_QWEN, moetune_env


def _run(prelude: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``moetune ARGS`` as ``python -m moetune`` runs it, after ``prelude``."""
    code = f"import sys, runpy\n{prelude}\nsys.argv = ['moetune', *{list(args)!r}]\n"
    code += "runpy.run_module('moetune', run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=moetune_env(),
    )


def test_the_atexit_functions_run_after_the_output() -> None:
    done = _run(
        "import atexit\natexit.register(lambda: print('atexit ran', flush=True))", "--version"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["moetune 0.1.0", "atexit ran"]


def test_the_exit_code_is_the_commands() -> None:
    plan = (str(EXAMPLE_QWEN), "--json")
    fits = _run("", "plan", *plan, "--vram", "24G")
    assert fits.returncode == 0, fits.stderr
    assert fits.stdout.startswith("{") and fits.stdout.rstrip().endswith("}")
    no_fit = _run("", "plan", *plan, "--vram", "4G")
    assert no_fit.returncode == ExitCode.DOES_NOT_FIT, no_fit.stderr
    assert no_fit.stdout.rstrip().endswith("}")  # the whole document, flushed
    assert no_fit.stderr.startswith("moetune: error: does not fit")
    usage = _run("", "plan", "--no-such-option")
    assert usage.returncode == 2
    assert "No such option" in usage.stderr


def test_a_thread_still_running_is_waited_for() -> None:
    thread = (
        "import threading, time\n"
        "def late():\n    time.sleep(0.5)\n    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()"
    )
    done = _run(thread, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["moetune 0.1.0", "thread done"]
