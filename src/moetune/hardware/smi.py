"""GPUs through the ``nvidia-smi`` command, for when NVML cannot be loaded from Python.

This is the one module besides llamacpp/process.py that runs a subprocess: nvidia-smi has
no other interface. It runs in its own session so a timeout kills it and anything it started; a
process stuck inside the driver may ignore even that, and is then left behind, not waited on.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import signal
import subprocess
from collections.abc import Callable

from moetune.hardware.base import VRAM_HINT, GpuInfo
from moetune.hardware.host import process_tree
from moetune.record import record
from moetune.units import MIB

GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "memory.used",
    "memory.free",
    "driver_version",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "pci.bus_id",
)
APP_FIELDS = ("pid", "used_memory", "gpu_uuid")
FORMAT = "--format=csv,noheader,nounits"
DEFAULT_TIMEOUT_S = 10.0


@record(frozen=True)
class SmiResult:
    """What one nvidia-smi run printed, or why it printed nothing usable."""

    lines: list[str]
    error: str | None = None


def _value(text: str) -> str | None:
    """A CSV cell, or ``None`` for ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``..."""
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    return text


def _int(text: str | None) -> int | None:
    """An integer cell, or ``None`` when absent or not a number."""
    try:
        return None if text is None else int(float(text))
    except ValueError:
        return None


def _mib(text: str | None) -> int | None:
    """A MiB cell (``nounits``) in bytes."""
    value = _int(text)
    return None if value is None else value * MIB


def _cells(line: str) -> list[str | None]:
    """One CSV line split into cells (nvidia-smi does not quote; GPU names have no commas)."""
    return [_value(cell) for cell in next(csv.reader([line], skipinitialspace=True), [])]


def parse_gpu(row: list[str | None]) -> GpuInfo | None:
    """One ``--query-gpu`` row as a ``GpuInfo``; ``None`` when it is not such a row."""
    if len(row) != len(GPU_FIELDS) or _int(row[0]) is None:
        return None
    index, name, uuid, total, used, free, driver, gen, gen_max, width, width_max, bus = row
    return GpuInfo(
        index=_int(index) or 0,
        name=name or "unknown NVIDIA GPU",
        uuid=uuid,
        vram_total_bytes=_mib(total),
        vram_used_bytes=_mib(used),
        vram_free_bytes=_mib(free),
        driver_version=driver,
        pcie_gen_current=_int(gen),
        pcie_gen_max=_int(gen_max),
        pcie_width_current=_int(width),
        pcie_width_max=_int(width_max),
        pci_bus_id=bus,
    )


def _failure(executable: str, result: subprocess.CompletedProcess[str]) -> str:
    """The first line nvidia-smi printed about its failure, with what to do."""
    said = (result.stdout + "\n" + result.stderr).strip().splitlines()
    first = said[0].strip().rstrip(".") if said else f"exit status {result.returncode}"
    return f"{executable} failed: {first}: check the NVIDIA driver, or {VRAM_HINT}"


def run_smi(executable: str, args: list[str], timeout_s: float) -> SmiResult:
    """Run nvidia-smi; its stdout lines, or an error saying why there are none."""
    try:
        proc = subprocess.Popen(
            [executable, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
    except OSError as err:
        return SmiResult([], f"cannot run {executable} ({err}): {VRAM_HINT}")
    try:
        out, err_text = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _abandon(proc)
        hung = f"{executable} did not answer within {timeout_s:g} s (is the driver hung?)"
        return SmiResult([], f"{hung}: check `dmesg`, or {VRAM_HINT}")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err_text)
    if proc.returncode != 0:
        return SmiResult([], _failure(executable, done))
    return SmiResult([line for line in out.splitlines() if line.strip()])


def _abandon(proc: subprocess.Popen[str]) -> None:
    """Kill nvidia-smi's process group; wait a moment, but never for one stuck in the driver."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class SmiProbe:
    """GPUs and per-process GPU memory from ``nvidia-smi`` CSV queries.

    ``executable`` is looked up on ``PATH`` at each call when not given.
    """

    name = "nvidia-smi"

    def __init__(
        self,
        executable: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        pids_of: Callable[[int], set[int]] = process_tree,
    ) -> None:
        self._executable = executable
        self._timeout_s = timeout_s
        self._pids_of = pids_of
        self._why: str | None = None

    @property
    def why(self) -> str | None:
        """Why the last ``gpus()`` was empty or incomplete; ``None`` when all is well."""
        return self._why

    def available(self) -> bool:
        """True when nvidia-smi is on PATH and lists at least one GPU."""
        return bool(self.gpus())

    def gpus(self) -> list[GpuInfo]:
        """Every GPU nvidia-smi lists; ``[]`` with ``why`` when it is missing or fails."""
        result = self._query([f"--query-gpu={','.join(GPU_FIELDS)}", FORMAT])
        parsed = [(line, parse_gpu(_cells(line))) for line in result.lines]
        found = [gpu for _, gpu in parsed if gpu is not None]
        skipped = [line for line, gpu in parsed if gpu is None]
        self._why = result.error or self._explain(found, skipped)
        return found

    def process_used_bytes(self, pid: int) -> dict[int, int]:
        """GPU index -> bytes used by ``pid`` and its children, where nvidia-smi reports it."""
        index_of = {gpu.uuid: gpu.index for gpu in self.gpus() if gpu.uuid}
        if not index_of:
            return {}
        result = self._query([f"--query-compute-apps={','.join(APP_FIELDS)}", FORMAT])
        pids = self._pids_of(pid)
        used: dict[int, int] = {}
        for row in map(_cells, result.lines):
            if len(row) != len(APP_FIELDS) or _int(row[0]) not in pids:
                continue
            size, index = _mib(row[1]), index_of.get(row[2] or "")
            if size is not None and index is not None:
                used[index] = used.get(index, 0) + size
        return used

    def executable(self) -> str | None:
        """The nvidia-smi this probe runs, or ``None`` when there is none on PATH."""
        return self._executable or shutil.which("nvidia-smi")

    def _query(self, args: list[str]) -> SmiResult:
        """Run one query, or say that nvidia-smi is not on PATH."""
        executable = self.executable()
        if executable is None:
            return SmiResult(
                [], f"nvidia-smi is not on PATH: install the NVIDIA driver, or {VRAM_HINT}"
            )
        return run_smi(executable, args, self._timeout_s)

    @staticmethod
    def _explain(found: list[GpuInfo], skipped: list[str]) -> str | None:
        """``why`` after a run that worked: no GPU, unreadable lines, unreported memory."""
        notes = [f"could not read nvidia-smi line {line.strip()!r}" for line in skipped]
        notes += [
            f"GPU {gpu.index} does not report its memory (unified memory?): {VRAM_HINT}"
            for gpu in found
            if gpu.vram_total_bytes is None
        ]
        if not found and not skipped:
            notes.append(f"nvidia-smi lists no GPU: check the NVIDIA driver, or {VRAM_HINT}")
        return "; ".join(notes) or None
