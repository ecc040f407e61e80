"""The fuzz suites' harness (tests/fuzz/): run one generated case of moetune in-process,
bounded in time, and hold its outcome to what every command promises a user:

- the exit code is one of ``ExitCode`` and never ``INTERNAL`` (1);
- on failure stderr ends in exactly one ``moetune: error: ... [NAME, exit N]`` line (only
  ``warning:`` lines before it), and nothing anywhere is a traceback;
- with ``--json`` stdout is exactly one JSON document, on failure
  ``{"schema_version", "error": {"code", "name", "message", "hint"}}`` (``hint`` null where
  there is none);
- the case ends within ``limit_s``;
- a case marked ``refuse`` (an input llama.cpp refuses, or one it reads with a default) is
  refused, or moetune warns of it; one marked ``succeed`` (a broken file beside the
  intact one it needs) succeeds.

``Fuzz.run`` records what a case broke instead of stopping at the first; ``Fuzz.check``
fails with the problems grouped by cause (the exception and the moetune line it came from,
rerun with ``--debug``), each with its count and its smallest case.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from moetune.errors import ExitCode

from support.helpers import cli

ERROR_LINE = re.compile(r"^moetune: error: .* \[(?P<name>[A-Z_]+), exit (?P<code>\d+)\]$")
FRAME = re.compile(r'File "[^"]*/src/(?P<file>moetune/[^"]+)", line (?P<line>\d+)')
CODES = {int(code) for code in ExitCode}


class CaseTimeout(BaseException):
    """A case ran past its limit (raised from SIGALRM inside the command; not an Exception,
    so that moetune's handler lets it through)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``CaseTimeout`` in the running code after ``seconds`` (main thread only)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Case:
    """One generated input: the moetune arguments, and what was done to make the input."""

    args: tuple[str, ...]
    what: str  # the mutations, as a person would repeat them
    size: int = 0  # how much was changed (the smallest case of a group is reported)
    refuse: bool = False  # must end in an error or a warning
    succeed: bool = False  # must succeed: what it needs is intact beside what is broken

    @property
    def command(self) -> str:
        words = [a for a in self.args[:2] if not a.startswith(("-", "/"))]
        return " ".join(words[:2] if words[:1] in (["profiles"], ["export"]) else words[:1])


@dataclass
class Fuzz:
    """Runs cases and keeps every problem, grouped by its cause."""

    limit_s: float = 5.0
    max_hangs: int = 3  # after this many, the remaining cases are not run
    runs: int = 0
    skipped: int = 0
    hangs: int = 0
    slowest: tuple[float, str] = (0.0, "")
    problems: dict[tuple[str, str], list[Case]] = field(default_factory=dict)

    def run(
        self, case: Case, after: Callable[[], list[str]] | None = None
    ) -> tuple[int, str, str] | None:
        """Run ``case``; ``after`` returns further problems (a file changed) once it ends.
        What it printed (exit code, stdout, stderr); None when it did not finish or ran
        not."""
        if self.hangs >= self.max_hangs:
            self.skipped += 1
            return None
        self.runs += 1
        start = time.monotonic()
        try:
            with time_limit(self.limit_s):
                code, out, err = cli(*case.args)
        except CaseTimeout:
            self.hangs += 1
            self._add(f"no answer within {self.limit_s:g} s", case)
            return None
        elapsed = time.monotonic() - start
        self.slowest = max(self.slowest, (elapsed, " ".join(case.args)))
        if case.succeed and code != 0:
            self._add(f"failed (exit {code}) although what it needs is intact", case)
        if case.refuse and code == 0 and not warns(out, err):
            self._add("accepted without a word (no error, no warning)", case)
        for problem in outcome_problems(case.args, code, out, err):
            self._add(f"exit 1: {self._cause(case)}" if problem == "exit 1" else problem, case)
        for problem in after() if after else []:
            self._add(problem, case)
        return code, out, err

    def add(self, problem: str, case: Case) -> None:
        """Record a problem a suite found itself in what ``run`` returned."""
        self._add(problem, case)

    def _cause(self, case: Case) -> str:
        """The exception and the last moetune frame it passed, from a ``--debug`` rerun."""
        try:
            with time_limit(self.limit_s):
                _, _, err = cli("--debug", *case.args)
        except CaseTimeout:
            return "(the --debug rerun hung)"
        frames = FRAME.findall(err)
        lines = [line for line in err.splitlines() if line.strip()]
        exc = next(
            (line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)", line)), "?"
        )
        where = f"{frames[-1][0]}:{frames[-1][1]}" if frames else "?"
        return f"{exc.split(':')[0]} at {where}"

    def _add(self, problem: str, case: Case) -> None:
        self.problems.setdefault((problem, case.command), []).append(case)

    def summary(self) -> str:
        skipped = f" ({self.skipped} more not run after {self.hangs} hangs)" if self.skipped else ""
        count = sum(map(len, self.problems.values()))
        lines = [f"{self.runs} cases{skipped}, {count} problems:"]
        for (problem, command), cases in sorted(self.problems.items()):
            small = min(cases, key=lambda c: (c.size, len(c.what)))
            lines.append(f"- {command}: {problem} ({len(cases)}x); smallest: {small.what}")
            lines.append(f"    moetune {' '.join(small.args)}")
        return "\n".join(lines)

    def check(self, min_runs: int) -> None:
        """Fail with every problem found; fail as well when fewer than ``min_runs`` ran."""
        assert not self.problems, self.summary()
        assert self.runs >= min_runs, f"only {self.runs} cases ran (at least {min_runs} wanted)"


def outcome_problems(args: tuple[str, ...], code: int, out: str, err: str) -> list[str]:
    """What one finished run broke of the promises in this module's docstring."""
    problems = []
    if code not in CODES:
        problems.append(f"exit {code}, not a moetune exit code")
    elif code == ExitCode.INTERNAL:
        problems.append("exit 1")
    if "Traceback" in out + err:
        problems.append("a traceback in the output")
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        errors = [line for line in lines if not line.startswith("warning: ")]
        match = ERROR_LINE.match(errors[0]) if len(errors) == 1 else None
        if match is None or errors[0] != lines[-1]:
            problems.append(f"stderr is not one error line ({len(errors)} other lines)")
        elif int(match["code"]) != code:
            problems.append(f"the error line names exit {match['code']}, the exit is {code}")
    if "--json" in args:
        problems += json_problems(code, out)
    return problems


def warns(out: str, err: str) -> bool:
    """stderr says ``warning``, or the output: a JSON document's non-empty warnings, a
    text's line."""
    if "warning" in err.lower():
        return True
    try:
        doc = json.loads(out)
    except ValueError:
        return "warning" in out.lower()

    def any_warnings(node: object) -> bool:
        if isinstance(node, dict):
            return bool(node.get("warnings")) or any(map(any_warnings, node.values()))
        return isinstance(node, list) and any(map(any_warnings, node))

    return any_warnings(doc)


def json_problems(code: int, out: str) -> list[str]:
    """``out`` is one JSON document; on failure the error document with this exit code."""
    try:
        doc = json.loads(out)
    except ValueError:
        return ["--json: stdout is not one JSON document" + (" (empty)" if not out else "")]
    if code == 0:
        return [] if isinstance(doc, dict) else ["--json: the document is not an object"]
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict) or "schema_version" not in doc:
        return ["--json: the failure's document has no error object"]
    want = {"code": code, "name": ExitCode(code).name if code in CODES else None}
    if {k: error.get(k) for k in want} != want or not isinstance(error.get("message"), str):
        return [f"--json: the error object is {error!r}, not code/name/message of exit {code}"]
    if "hint" not in error or not isinstance(error["hint"], str | None):
        return [f"--json: the error object is {error!r}: no hint (a string, or null)"]
    return []
