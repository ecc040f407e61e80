"""A CUDA device for the test rig, which has none: a ``ggml-rpc-server`` shown as ``CUDA0``,
and NVML (the fake of fake_pynvml.py) that reports the server's use of it.

- The tools: a folder with ``llama-server`` and ``llama-fit-params`` scripts
  (``tool_folder``) that run the real tools with ``--rpc ENDPOINT`` and rewrite what they
  print: the device ``RPC0`` (``RPC0[ENDPOINT]`` as a buffer type) becomes ``CUDA0``, listed
  as the fake card (``NVIDIA GeForce RTX 4090``, 24564 MiB); an ``-ot ...=CUDA0`` or
  ``-dev CUDA0`` they are given goes to the RPC device.
- NVML: a folder with a ``pynvml`` module (``pynvml_folder``), put first on a moetune
  child's ``PYTHONPATH``; its one GPU is that card, and each of those tools running under
  the child uses on it what llama.cpp's own buffer lines for ``CUDA0`` say (its log, read
  the way ``moetune run`` reads it) plus ``RIG_OVERHEAD_MIB`` MiB of runtime overhead (the
  CUDA context and pools a real card would hold beyond the buffers).

So a ``moetune run`` on the rig measures the device as on a real card (NVML's process memory,
``ProcessProbe``) and can tell the overhead apart from the buffers.

    python -m support.cuda_rig TOOL [ARGS...]   (what the scripts run)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from support.fake_pynvml import MIB, FakeDevice, FakeNvml, Process

GPU_NAME = "NVIDIA GeForce RTX 4090"
GPU_MIB = 24564
ENV_ENDPOINT = "MOETUNE_RIG_RPC"  # the ggml-rpc-server the tools use
ENV_OVERHEAD = "MOETUNE_RIG_OVERHEAD_MIB"  # what NVML adds to the buffers
TOOLS = ("llama-server", "llama-fit-params")
TESTS = Path(__file__).resolve().parents[1]


def tool_folder(folder: Path) -> Path:
    """``folder`` with the rig's ``llama-server`` and ``llama-fit-params`` (its
    ``llama-server`` is what ``MOETUNE_LLAMA_SERVER`` names)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        script = folder / tool
        script.write_text(
            "#!/bin/sh\n"
            f'PYTHONPATH="{TESTS}${{PYTHONPATH:+:$PYTHONPATH}}" '
            f'exec "{sys.executable}" -m support.cuda_rig {tool} "$@"\n'
        )
        script.chmod(0o755)
    return folder


def pynvml_folder(folder: Path) -> Path:
    """``folder`` with a ``pynvml`` module: the rig's NVML (``RigNvml``)'s functions."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(
        '"""The rig\'s NVML (tests/support/cuda_rig.py)."""\n'
        "from support.cuda_rig import module_names\n\n"
        "globals().update(module_names())\n"
    )
    return folder


def _endpoint() -> str:
    return os.environ[ENV_ENDPOINT]


def _rewrite_line(line: str, endpoint: str) -> str:
    """A line the real tool printed, as the rig shows it: RPC0 is CUDA0, the fake card."""
    if line.lstrip().startswith(f"RPC0: {endpoint} ("):
        indent = line[: len(line) - len(line.lstrip())]
        return f"{indent}CUDA0: {GPU_NAME} ({GPU_MIB} MiB, {GPU_MIB} MiB free)\n"
    return line.replace(f"RPC0[{endpoint}]", "CUDA0").replace("RPC0", "CUDA0")


def _rewrite_arg(arg: str, endpoint: str) -> str:
    """An argument for the real tool: CUDA0 is the RPC device."""
    if arg == "CUDA0":
        return "RPC0"
    return arg.replace("=CUDA0", f"=RPC0[{endpoint}]")


def run_tool(tool: str, args: list[str]) -> int:
    """The real ``tool`` on the rig's RPC device, its output rewritten line by line; its exit
    code. SIGTERM and SIGINT are passed on to it."""
    from support.llama import bin_path

    endpoint = _endpoint()
    argv = [str(bin_path(tool))]
    if "--version" not in args:
        argv += ["--rpc", endpoint]
    argv += [_rewrite_arg(a, endpoint) for a in args]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    assert child.stdout is not None
    out = sys.stdout.buffer
    for raw in child.stdout:
        out.write(_rewrite_line(raw.decode("utf-8", "replace"), endpoint).encode())
        out.flush()
    return child.wait()


def _buffers_bytes(pid: int) -> int | None:
    """llama.cpp's CUDA0 buffers in the log of the rig's tool ``pid`` (its stdout), as
    ``moetune run`` reads them (llamacpp/memprobe.py's LogProbe); None before they are."""
    from moetune.llamacpp.log import parse_buffers, real_load_lines, total_mib
    from moetune.llamacpp.memprobe import LOG_KINDS

    try:
        text = Path(f"/proc/{pid}/fd/1").readlink().read_text(errors="replace")
    except OSError:
        return None
    lines = [b for b in parse_buffers("\n".join(real_load_lines(text))) if b.device == "CUDA0"]
    if not lines:
        return None
    return round(sum(total_mib(lines, kind) for kind in LOG_KINDS) * MIB)


class RigNvml(FakeNvml):
    """NVML with the one fake card, on which each of the rig's tools running under this
    process uses its CUDA0 buffers plus ``RIG_OVERHEAD_MIB``."""

    def __init__(self) -> None:
        super().__init__([FakeDevice(name=GPU_NAME, total=GPU_MIB * MIB, used=0)])

    def _processes(self) -> list[Process]:
        overhead = int(os.environ.get(ENV_OVERHEAD, "0")) * MIB
        found = []
        for proc in psutil.Process().children(recursive=True):
            try:
                is_rig = "support.cuda_rig" in " ".join(proc.cmdline())
            except psutil.Error:
                continue
            buffers = _buffers_bytes(proc.pid) if is_rig else None
            if buffers is not None:
                found.append(Process(proc.pid, buffers + overhead))
        return found

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses_v3", self._processes())

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses", self._processes())

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeDevice) -> object:
        return handle.answer("nvmlDeviceGetComputeRunningProcesses_v2", self._processes())


def module_names() -> dict[str, Any]:
    """What the ``pynvml`` module of ``pynvml_folder`` holds: the functions and constants of
    one ``RigNvml``."""
    nvml = RigNvml()
    return {name: getattr(nvml, name) for name in dir(nvml) if not name.startswith("_")}


if __name__ == "__main__":
    sys.exit(run_tool(sys.argv[1], sys.argv[2:]))
