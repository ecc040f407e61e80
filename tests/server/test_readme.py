"""The README's "Try it without a GPU" lines, run as written (all but the first, which sets
up the environment these tests already run in)."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from support.helpers import ROOT, default_signals, moetune_env, section_block


def test_try_it_without_a_gpu(tmp_path: Path) -> None:
    lines = section_block("Try it without a GPU")[1:]
    for port in map(int, re.findall(r"-p (\d+)", "\n".join(lines))):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                pytest.fail(f"port {port} of the README example is in use on this machine")
    # stop the RPC server however the lines end; fail on the first line that fails
    script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
    done = subprocess.run(
        ["bash", "-c", script + "\n".join(lines)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=moetune_env(tmp_path / "home"),
        preexec_fn=default_signals,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "best: --n-cpu-moe" in done.stdout and "tuned profile" in done.stdout
    assert "verdict" in done.stdout and "nothing was measured" not in done.stdout
    assert "llama.cpp projects RPC1" in done.stdout and "-ts " in done.stdout
    profiles = tmp_path / "home" / "profiles"
    assert list(profiles.glob("tiny-moe-1k-q8_0-30M-*.json"))
    assert list(profiles.glob("tiny-moe-1k-q8_0-16M_14M-*.json"))
