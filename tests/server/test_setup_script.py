"""A rerun of scripts/setup-test-env.sh after the set-up (as .ci/run runs the suite right after
it): everything is in place, so it runs no pip, warns of nothing, says each step and takes
seconds."""

from __future__ import annotations

import hashlib
import re
import subprocess
import time

import pytest

from support.helpers import ROOT

SCRIPT = ROOT / "scripts" / "setup-test-env.sh"
LINE = re.compile(r"^setup \[\d+:\d\d\] ")


def test_a_rerun_is_quick_and_quiet() -> None:
    """Run after the set-up (as .ci/run runs the suite): nothing to do, no pip, no warning."""
    stamp = ROOT / ".venv" / ".moetune-setup"
    made_here = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + f"{ROOT}\n".encode())
    if not stamp.exists() or stamp.read_text().strip() != made_here.hexdigest():
        # it would install moetune from here into a .venv set up for another checkout
        pytest.skip("scripts/setup-test-env.sh has not set up .venv for this checkout")
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    took = time.monotonic() - started
    if "installing moetune" in done.stderr:
        pytest.fail(f"the rerun installed moetune again: {done.stderr}")
    assert done.returncode == 0, done.stderr
    assert took < 30, f"a rerun took {took:.1f} s"
    lines = done.stderr.splitlines()
    assert all(LINE.match(line) for line in lines), done.stderr
    assert "warn" not in done.stderr.lower() and "deprecat" not in done.stderr.lower()
    assert "llama.cpp 11434.0.0: installed (nothing to build)" in lines[3]  # said first
    assert "llama.cpp 11434.0.0 is built:" in done.stderr and lines[-1].endswith("done")
