"""The README's "Try it without a GPU" lines, run as written (all but the first, which sets
up the environment these tests already run in), with its RPC ports moved to free ones: the
machine may run something else on 50052 (another checkout's tests, a real RPC server)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from support.helpers import ROOT, default_signals, moetune_env, section_block
from support.llama import bin_path, free_port, rpc_server


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


# --- the daily loop ----------------------------------------------------------------------------

DAILY_LOOP = "The daily loop: plan → run → alias / export"
MODEL_PATH = re.compile(r"~/models/\S+\.gguf")


def _served(proc: subprocess.Popen[str], url: str, model: str | None) -> None:
    """Wait until the server ``proc`` started answers, then ask it for a completion (through
    the router: of ``model``)."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        assert time.monotonic() < deadline, "the server never answered /health"
        time.sleep(0.2)
    body = {"prompt": "hello", "max_tokens": 4, **({"model": model} if model else {})}
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4


def _stop(proc: subprocess.Popen[str]) -> int:
    """SIGTERM to the llama-server the line started (the shell's child, or the shell itself
    where bash ran the line's one command in its place), as Ctrl-C in a terminal; its code."""
    shell = psutil.Process(proc.pid)
    servers = [shell]
    if shell.name() != "llama-server":  # (a router's own children are llama-servers too)
        servers = [c for c in shell.children() if c.name() == "llama-server"]
    for server in servers:
        server.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_daily_loop(tmp_path: Path) -> None:
    """README's daily loop, each line as written in a new shell (its ~/.bashrc read), on the
    rig: HOME a fresh folder with a tiny MoE at the README's model path, a ggml-rpc-server
    named by LLAMA_ARG_RPC (moetune's --rpc default, as llama-server's), moetune and
    llama.cpp's binaries on PATH. The two server lines run until they answer a completion,
    then stop as Ctrl-C stops them; the only change to a line is a free port for 8081, and
    LLAMA_ARG_PORT (llama-server's) for the router's."""
    lines = [line.split("  #")[0].strip() for line in section_block(DAILY_LOOP)]
    paths = {m for line in lines for m in MODEL_PATH.findall(line)}
    assert len(paths) == 1, paths
    home = tmp_path / "home"
    model = home / paths.pop().removeprefix("~/")
    model.parent.mkdir(parents=True)
    made = subprocess.run(
        [sys.executable, str(ROOT / "examples/models/make_tiny.py"), str(model)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    work = tmp_path / "work"
    work.mkdir()
    tools = [Path(sys.executable).parent, bin_path("llama-server").parent]
    with rpc_server() as endpoint:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOETUNE_")}
        env |= {"HOME": str(home), "LLAMA_ARG_RPC": endpoint, "COLUMNS": "120"}
        env["PATH"] = os.pathsep.join([*map(str, tools), env.get("PATH", "")])
        served = 0
        for line in lines:
            script = f"if [ -f ~/.bashrc ]; then . ~/.bashrc; fi\n{line}"
            if " --port " in line or line.startswith("llama-server "):
                port = free_port()
                script = re.sub(r"--port \d+", f"--port {port}", script)
                proc = subprocess.Popen(
                    ["bash", "-c", script],
                    cwd=work,
                    env=env | {"LLAMA_ARG_PORT": str(port)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
                try:
                    router = "--models-preset" in line
                    _served(proc, f"http://127.0.0.1:{port}", model.stem if router else None)
                finally:
                    code = _stop(proc)
                assert code == 0, (line, code)
                served += 1
                continue
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                preexec_fn=default_signals,
                check=False,
            )
            assert done.returncode == 0, (line, done.stdout[-3000:], done.stderr[-3000:])
    assert served == 2  # the alias's server and the router
    assert "qwen()" in (home / ".bashrc").read_text()
    assert f"[{model.stem}]" in (work / "models.ini").read_text()
