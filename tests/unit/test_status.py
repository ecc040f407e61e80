"""The live status of run and bench: the status model on recorded events and the sampler
thread (server/test_status.py: fill progress and `moetune run`'s plain lines)."""

from __future__ import annotations

import threading
import time

from moetune.jobs.status import (
    NO_STATUS,
    Figures,
    LiveStatus,
    StatusModel,
    elapsed_text,
    probe_reader,
    sampling,
)
from moetune.llamacpp.process import RunningServer
from moetune.units import MIB, format_bytes

from support.processes import wait_until

START = 1000.0  # the recorded clock's start (any monotonic origin)


def rpc0(mib: float | None) -> Figures:
    return (("RPC0", None if mib is None else int(mib * MIB)),)


def test_elapsed_text() -> None:
    assert [elapsed_text(s) for s in (0, 7.9, 65, 3723, -1)] == [
        "0:00",
        "0:07",
        "1:05",
        "1:02:03",
        "0:00",
    ]


def test_a_recorded_launch() -> None:
    """One trial as the job reports it: each phase change a plain line at once, readings and
    fill progress held back to one every 5 s, the completed fill at once, the peak kept."""
    model = StatusModel(START, every_s=5.0)
    mib = format_bytes
    script: list[tuple[float, str, tuple[object, ...]]] = [
        (0.0, "message", ("N=3: starting llama-server",)),
        (0.2, "phase", ("loading", "N=3")),
        (0.7, "reading", (rpc0(None),)),
        (1.2, "reading", (rpc0(4.0),)),  # held back: 1 s after the last line
        (5.3, "reading", (rpc0(10.5),)),  # 5.1 s after: due
        (5.8, "reading", (rpc0(10.5),)),  # nothing new
        (6.0, "phase", ("warming up", None)),
        (6.5, "phase", ("filling", None)),
        (7.0, "progress", (0, 991)),  # held back
        (7.5, "reading", (rpc0(12.0),)),  # held back
        (8.0, "progress", (991, 991)),  # the fill is complete: at once
        (8.5, "reading", (rpc0(11.0),)),  # lower than the peak, held back
        (9.0, "phase", ("measuring", None)),
        (9.1, "progress", (1, 3)),
        (9.6, "progress", (2, 3)),
        (14.5, "progress", (3, 3)),  # something changed and 5.5 s passed
    ]
    lines: list[tuple[float, str]] = []
    for t, kind, args in script:
        now = START + t
        if kind == "message":
            line = model.message(now, str(args[0]))
        elif kind == "phase":
            name, subject = args
            line = model.phase(now, name, subject=subject)  # type: ignore[arg-type]
        elif kind == "progress":
            line = model.progress(now, int(args[0]), int(args[1]))  # type: ignore[call-overload]
        else:
            line = model.reading(now, args[0])  # type: ignore[arg-type]
        if line is not None:
            lines.append((t, line))
    assert lines == [
        (0.2, "N=3: loading | 0:00"),
        (5.3, f"N=3: loading | RPC0 {mib(int(10.5 * MIB))} | 0:05"),
        (6.0, "N=3: warming up | RPC0 10.50 MiB | 0:06"),
        (6.5, "N=3: filling the context | RPC0 10.50 MiB | 0:06"),
        (8.0, "N=3: filling 991/991 tokens | RPC0 12.00 MiB | 0:08"),
        (9.0, "N=3: measuring | RPC0 11.00 MiB (peak 12.00 MiB) | 0:09"),
        (14.5, "N=3: measuring (request 3 of 3) | RPC0 11.00 MiB (peak 12.00 MiB) | 0:14"),
    ]
    assert model.peaks == {"RPC0": 12 * MIB}
    assert model.text(START + 20) == (
        "N=3: measuring (request 3 of 3) | RPC0 11.00 MiB (peak 12.00 MiB) | 0:20"
    )


def test_the_terminal_line_between_plain_lines() -> None:
    model = StatusModel(START)
    model.message(START, "N=2: starting llama-server")
    assert model.text(START + 1) == "N=2: starting llama-server | 0:01"
    assert model.reading(START + 1, rpc0(3.0)) is None  # no server yet: not shown
    assert model.text(START + 1) == "N=2: starting llama-server | 0:01"
    model.phase(START + 2, "loading", subject="N=2")
    model.reading(START + 2.5, rpc0(3.0))
    model.phase(START + 3, "filling")
    model.progress(START + 3.5, 512, 3000)
    assert model.text(START + 3.5) == "N=2: filling 512/3,000 tokens | RPC0 3.00 MiB | 0:03"
    model.phase(START + 4, "measuring", depth=4096)
    model.progress(START + 4, 2, 3)
    assert model.text(START + 61) == (
        "N=2: measuring at depth 4,096 (request 2 of 3) | RPC0 3.00 MiB | 1:01"
    )


def test_several_devices_and_a_new_server() -> None:
    """Each device's figure and peak; the next server starts from nothing."""
    model = StatusModel(START)
    model.phase(START, "loading", subject="plan")
    model.reading(START + 1, (("RPC0", 300 * MIB), ("RPC1", None)))
    assert model.text(START + 1) == "plan: loading | RPC0 300.00 MiB, RPC1 ? | 0:01"
    model.reading(START + 2, (("RPC0", 2 * 1024 * MIB), ("RPC1", 5 * MIB)))
    assert model.peaks == {"RPC0": 2 * 1024 * MIB, "RPC1": 5 * MIB}
    assert model.memory_text() == "RPC0 2.00 GiB, RPC1 5.00 MiB"
    line = model.phase(START + 3, "loading", subject="fit")
    assert line == "fit: loading | 0:03" and model.peaks == {}


def test_a_phase_is_printed_even_when_it_repeats() -> None:
    """Two launches at the same N (a saved profile confirmed, then tuned again): two lines."""
    model = StatusModel(START)
    assert model.phase(START, "loading", subject="N=1") == "N=1: loading | 0:00"
    model.message(START + 1, "N=1: starting llama-server")
    assert model.phase(START + 1.5, "loading", subject="N=1") == "N=1: loading | 0:01"


def test_no_flood_over_a_long_load() -> None:
    """A ten-minute load read every 0.5 s, growing each time: about one line per 5 s."""
    model = StatusModel(START, every_s=5.0)
    lines = [model.phase(START, "loading", subject="N=0")]
    for i in range(1, 1200):
        lines.append(model.reading(START + i / 2, rpc0(float(i))))
    printed = [line for line in lines if line is not None]
    assert 115 <= len(printed) <= 121
    assert printed[-1].endswith("| 9:55")


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def test_live_status_shows_and_emits() -> None:
    clock = _Clock()
    shown: list[str] = []
    emitted: list[str] = []
    live = LiveStatus(show=shown.append, emit=emitted.append, clock=clock)
    live.message("N=4: starting llama-server")
    clock.now += 2
    live.phase("loading", subject="N=4")
    clock.now += 1
    live.reading(rpc0(8.0))
    assert shown == [
        "N=4: starting llama-server | 0:00",
        "N=4: loading | 0:02",
        "N=4: loading | RPC0 8.00 MiB | 0:03",
    ]
    assert emitted == ["N=4: loading | 0:02"]
    assert live.peaks == {"RPC0": 8 * MIB}


def test_sampling_reads_until_the_block_ends() -> None:
    calls: list[float] = []
    shown: list[str] = []
    live = LiveStatus(show=shown.append)
    live.phase("loading", subject="N=1")

    def read() -> Figures:
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise OSError("nvidia-smi went away")  # a probe error costs one reading
        return rpc0(float(len(calls)))

    before = set(threading.enumerate())
    with sampling(read, live, every_s=0.02):
        wait_until(lambda: len(calls) >= 4, "four readings")
    n = len(calls)
    time.sleep(0.1)
    assert len(calls) == n >= 4  # stopped with the block
    assert set(threading.enumerate()) == before  # and joined
    assert any("RPC0 3.00 MiB" in line for line in shown)
    with sampling(read, NO_STATUS, every_s=0.01):  # no status: no thread, no reading
        time.sleep(0.05)
    assert len(calls) == n


def test_a_failing_probe_gives_no_figure() -> None:
    class Broken:
        name = "broken"
        includes_overhead = False
        missing = "it is broken"

        def device_bytes(self, server: RunningServer) -> int | None:
            raise RuntimeError("NVML lost the GPU")

    class Fixed(Broken):
        def device_bytes(self, server: RunningServer) -> int | None:
            return 7

    read = probe_reader([Broken(), Fixed()], ["CUDA0", "CUDA1"], None)  # type: ignore[arg-type]
    assert read() == (("CUDA0", None), ("CUDA1", 7))
