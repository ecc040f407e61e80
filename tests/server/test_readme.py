"""The README's "Try it without a GPU" lines, run as written (all but the first, which sets
up the environment these tests already run in), with its RPC ports moved to free ones: the
machine may run something else on 50052 (another checkout's tests, a real RPC server)."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

from support.helpers import ROOT, default_signals, moetune_env, section_block


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports nobody listens on now (held open together so they differ)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def test_try_it_without_a_gpu(tmp_path: Path) -> None:
    text = "\n".join(section_block("Try it without a GPU")[1:])
    ports = sorted(set(re.findall(r"-p (\d+)", text)))
    assert len(ports) == 2, ports
    for port, free in zip(ports, _free_ports(len(ports)), strict=True):
        text = re.sub(rf"\b{port}\b", str(free), text)
    lines = text.splitlines()
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
    # the daily loop after it: alias and export serve the newest of the two tuned profiles
    # (the two-server one), naming the other
    said = " ".join(done.stderr.split())
    assert (
        "2 tuned profiles of tiny-moe.gguf match: using the newest, tiny-moe-1k-q8_0-16M_14M"
        in said
    )
    # the two-server run kept the -ot form: it keeps more on the servers than its N, measured
    # within both targets
    assert "best: the -ot form" in done.stdout
    alias = Path("/tmp/tiny.sh").read_text()
    assert "tiny()" in alias and "--rpc" in alias and "-ot " in alias
    preset = Path("/tmp/models.ini").read_text()
    assert "[tiny-moe" in preset and "override-tensor" in preset
