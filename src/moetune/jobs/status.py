"""The live status of a job that launches llama-server (`run`, `bench`): what it does, each
device's memory as it changes, and the time since it began.

- ``StatusModel`` is pure: fed with events that carry their time (a phase, fill progress, a
  probe reading), it renders the one-line text, says when a plain line is due, and keeps
  each device's peak since the server started;
- ``LiveStatus`` puts the model on the clock behind a lock (the job's thread and its sampler
  both feed it) and hands each new text to ``show`` (a terminal's status line) and each plain
  line due to ``emit`` (a log, a pipe, CI);
- ``sampling`` reads the memory probes on a thread while a server runs, and stops with it.

Plain lines: one when the phase changes and when the fill completes; between those, one when
something changed (memory, fill or request progress), at most every ``every_s`` seconds.
A launch's first line is its ``loading`` phase, once llama-server has bound its port: a server
that exits at once (a bad flag) prints nothing before its error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, Protocol

from moetune.record import record
from moetune.units import format_bytes

if TYPE_CHECKING:
    from moetune.llamacpp.memprobe import MemoryProbe
    from moetune.llamacpp.process import RunningServer

PhaseName = Literal["waiting", "loading", "warming up", "filling", "measuring"]
Figures = tuple[tuple[str, int | None], ...]  # (device name, bytes used; None: no figure yet)
PLAIN_EVERY_S = 5.0
SAMPLE_EVERY_S = 0.5
SEPARATOR = " | "


class StatusSink(Protocol):
    """Where a job reports what it does (the CLI's ``LiveStatus``; ``NO_STATUS``: nowhere)."""

    def message(self, text: str) -> None:
        """A free-text step (``N=3: starting llama-server``): shown, never a plain line."""
        ...

    def phase(
        self, name: PhaseName, *, subject: str | None = None, depth: int | None = None
    ) -> None:
        """A new phase of the current server (``subject``: a new server, e.g. ``N=3``)."""
        ...

    def progress(self, done: int, total: int) -> None:
        """Tokens filled, or the timed request under way (1-based), of ``total``."""
        ...

    def reading(self, figures: Figures) -> None:
        """The devices' memory now (also a tick of the clock)."""
        ...


class NoStatus:
    """A status that goes nowhere (the jobs' default)."""

    def message(self, text: str) -> None:
        pass

    def phase(
        self, name: PhaseName, *, subject: str | None = None, depth: int | None = None
    ) -> None:
        pass

    def progress(self, done: int, total: int) -> None:
        pass

    def reading(self, figures: Figures) -> None:
        pass


NO_STATUS = NoStatus()


@record(frozen=True)
class _State:
    """What the line says, without the time."""

    subject: str | None = None
    phase: PhaseName | None = None
    depth: int | None = None
    progress: tuple[int, int] | None = None
    figures: Figures = ()
    text: str | None = None  # a free-text message (no phase)


def elapsed_text(seconds: float) -> str:
    """``0:07``, ``12:05``, ``1:02:03``."""
    whole = max(int(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _doing(state: _State) -> str:
    """The phase in words: ``filling 512/3,000 tokens``, ``measuring at depth 4,096
    (request 2 of 3)``."""
    done, total = state.progress or (0, 0)
    if state.phase == "filling":
        return f"filling {done:,}/{total:,} tokens" if state.progress else "filling the context"
    if state.phase == "measuring":
        where = f" at depth {state.depth:,}" if state.depth is not None else ""
        return f"measuring{where}" + (f" (request {done} of {total})" if state.progress else "")
    if state.phase == "waiting":
        return "waiting for the server"
    return str(state.phase)


class StatusModel:
    """The status line of one job, fed with timed events (seconds on any monotonic clock).

    Each event returns the plain line due at that moment, or None; ``text`` is the line now.
    """

    def __init__(self, start_s: float, every_s: float = PLAIN_EVERY_S) -> None:
        self.start_s, self.every_s = start_s, every_s
        self.peaks: dict[str, int] = {}  # each device's, since the current server started
        self._state = _State()
        self._printed: _State | None = None
        self._printed_at: float | None = None

    def message(self, now: float, text: str) -> str | None:
        self._state = _State(text=text)
        return None

    def phase(
        self, now: float, name: PhaseName, *, subject: str | None = None, depth: int | None = None
    ) -> str | None:
        if subject is not None or self._state.subject is None:  # a new server
            self.peaks = {}
            self._state = _State(subject=subject, phase=name, depth=depth)
        else:
            self._state = replace(self._state, phase=name, depth=depth, progress=None, text=None)
        return self._due(now, forced=True)

    def progress(self, now: float, done: int, total: int) -> str | None:
        if self._state.phase is None:
            return None
        self._state = replace(self._state, progress=(done, total))
        return self._due(now, forced=self._state.phase == "filling" and done >= total)

    def reading(self, now: float, figures: Figures) -> str | None:
        if self._state.phase is None:  # no server (between launches): nothing to show
            return None
        for name, used in figures:
            if used is not None:
                self.peaks[name] = max(self.peaks.get(name, 0), used)
        self._state = replace(self._state, figures=tuple(figures))
        return self._due(now, forced=False)

    def memory_text(self) -> str:
        """``RPC0 15.21 MiB, RPC1 3.21 MiB (peak 4.00 MiB)``; empty without figures."""
        parts = []
        for name, used in self._state.figures:
            peak = self.peaks.get(name, 0)
            more = f" (peak {format_bytes(peak)})" if peak > (used or 0) else ""
            parts.append(f"{name} {format_bytes(used)}{more}")
        return ", ".join(parts)

    def text(self, now: float) -> str:
        """The line now: ``N=3: filling 512/991 tokens | RPC0 15.21 MiB | 0:12``."""
        state = self._state
        if state.phase is None:
            head = state.text or ""
        else:
            head = f"{state.subject}: {_doing(state)}" if state.subject else _doing(state)
        memory = self.memory_text()
        parts = [head, memory] if memory else [head]
        return SEPARATOR.join([*filter(None, parts), elapsed_text(now - self.start_s)])

    def _due(self, now: float, *, forced: bool) -> str | None:
        """The plain line, when one is due: forced ones at once, others when something
        changed since the last one and ``every_s`` has passed."""
        if not forced and (
            self._state == self._printed
            or (self._printed_at is not None and now - self._printed_at < self.every_s)
        ):
            return None
        self._printed, self._printed_at = self._state, now
        return self.text(now)


class LiveStatus:
    """A ``StatusModel`` on the clock, safe to feed from several threads: each event shows the
    new line (``show``) and emits the plain line due (``emit``)."""

    def __init__(
        self,
        *,
        show: Callable[[str], None] | None = None,
        emit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self._show, self._emit, self._clock = show, emit, clock
        self._model = StatusModel(clock(), every_s)
        self._lock = threading.Lock()

    @property
    def peaks(self) -> dict[str, int]:
        """Each device's peak since the current server started."""
        with self._lock:
            return dict(self._model.peaks)

    def _apply(self, event: Callable[[float], str | None]) -> None:
        with self._lock:
            now = self._clock()
            line = event(now)
            if self._show is not None:
                self._show(self._model.text(now))
            if line is not None and self._emit is not None:
                self._emit(line)

    def message(self, text: str) -> None:
        self._apply(lambda now: self._model.message(now, text))

    def phase(
        self, name: PhaseName, *, subject: str | None = None, depth: int | None = None
    ) -> None:
        self._apply(lambda now: self._model.phase(now, name, subject=subject, depth=depth))

    def progress(self, done: int, total: int) -> None:
        self._apply(lambda now: self._model.progress(now, done, total))

    def reading(self, figures: Figures) -> None:
        self._apply(lambda now: self._model.reading(now, figures))


# --- the sampler ------------------------------------------------------------------------------


def probe_reader(
    probes: Sequence[MemoryProbe], names: Sequence[str], server: RunningServer
) -> Callable[[], Figures]:
    """Each device's memory now, by name (a probe that fails gives no figure)."""

    def one(probe: MemoryProbe) -> int | None:
        try:
            return probe.device_bytes(server)
        except Exception:  # a probe error costs a reading, never the job
            return None

    return lambda: tuple((name, one(p)) for name, p in zip(names, probes, strict=True))


@contextmanager
def sampling(
    read: Callable[[], Figures], status: StatusSink, every_s: float = SAMPLE_EVERY_S
) -> Iterator[None]:
    """Feed ``status`` a reading every ``every_s`` seconds while the block runs (a reading of
    no devices still ticks the clock); the thread is stopped and joined when it ends."""
    if isinstance(status, NoStatus):
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                figures = read()
                if not stop.is_set():
                    status.reading(figures)
            except Exception:  # a probe (or a closed stderr) costs a reading, never the job
                pass
            stop.wait(every_s)

    thread = threading.Thread(target=loop, name="moetune-memory-sampler", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
