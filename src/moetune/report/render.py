"""The one way a command's output reaches stdout: ``render`` prints any view as text (rich) or
as its ``--json`` document (report.payloads), dispatching on the view's type.

A view is a job's result with what its text needs beside it (where the devices came from, a
table asked for); a NamedTuple, made at import many times faster than a frozen dataclass (a
dozen of those were a few ms of every command's start). The result types are named for type
checking only, and the rich renderers are imported when text is printed: ``--json`` loads
neither rich nor the modules of results it does not print.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from moetune.record import jsonable
from moetune.report import to_json

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.segment import Segment

    from moetune.core.facts import ModelFacts
    from moetune.core.frontier import Frontier
    from moetune.core.plan import PlanResult
    from moetune.core.ram import RamFigure
    from moetune.core.together import TogetherPlan
    from moetune.errors import ExitCode, ProfileError
    from moetune.jobs.doctor import DoctorReport
    from moetune.jobs.export import ExportResult
    from moetune.jobs.quants import QuantsResult
    from moetune.jobs.together import TogetherRun
    from moetune.records.results import BenchResult, RunResult
    from moetune.records.speed import CalibrateResult
    from moetune.store.hardware import HardwareProfile
    from moetune.store.tuned import TunedProfile


class InspectView(NamedTuple):
    """``inspect``: the model's facts; ``layers``: the per-block table, ``tensors``: every
    tensor in the JSON."""

    facts: ModelFacts
    layers: bool = False
    tensors: bool = False


class PlanView(NamedTuple):
    """``plan MODEL``: the plan, the model, and where the devices came from."""

    result: PlanResult
    facts: ModelFacts
    source: str
    frontier: Frontier | None = None  # --frontier, --objective, --workload
    ram: RamFigure | None = None  # the RAM read bandwidth the forecast used, and its source


class QuantsView(NamedTuple):
    """``plan user/model``: every quant planned, and where the devices came from."""

    result: QuantsResult
    source: str


class RunView(NamedTuple):
    """``run``: the attempts and the best, and what became of the tuned profile of ``model``."""

    result: RunResult
    model: str


class BenchView(NamedTuple):
    """``bench`` (``chart`` off) and ``report`` (with the charts of report/chart.py)."""

    result: BenchResult
    chart: bool = False


class CalibrateView(NamedTuple):
    """``calibrate``: the files imported, their points and where they are kept."""

    result: CalibrateResult


class ProfilesView(NamedTuple):
    """``profiles list``: the hardware profiles (and the files of them that do not load),
    and the tuned ones (those that do not load as errors) in the folder ``root``."""

    hardware: list[HardwareProfile]
    tuned: list[TunedProfile | ProfileError]
    root: str
    hardware_broken: list[ProfileError]


class TunedView(NamedTuple):
    """``profiles show`` of a tuned profile, and the file it is kept in."""

    profile: TunedProfile
    path: str


class HardwareView(NamedTuple):
    """``profiles show`` of a hardware profile."""

    profile: HardwareProfile


class DoctorView(NamedTuple):
    """``doctor``: every finding."""

    report: DoctorReport


class ExportView(NamedTuple):
    """``export --json``: what was exported and the command line that serves it (its text
    is the config itself, a TextView)."""

    result: ExportResult


class TogetherView(NamedTuple):
    """``plan A B --together``: the models planned to stay loaded at once."""

    result: TogetherPlan


class TogetherRunView(NamedTuple):
    """``run A B --together``: the models launched together, measured with all loaded."""

    result: TogetherRun


class TextView(NamedTuple):
    """Text printed as it is (``alias``'s shell function, ``export``'s config)."""

    text: str


class ErrorView(NamedTuple):
    """A command that failed before its document: the code, the message and the hint of the
    one line on stderr (as text: that line)."""

    code: ExitCode
    message: str
    hint: str | None = None


View = (
    InspectView
    | PlanView
    | QuantsView
    | RunView
    | BenchView
    | CalibrateView
    | ProfilesView
    | TunedView
    | HardwareView
    | DoctorView
    | ExportView
    | TogetherView
    | TogetherRunView
    | TextView
    | ErrorView
)


class _Printed:
    """``held``: the ``--json`` documents held back while a command runs (None: print at
    once)."""

    held: list[dict[str, Any]] | None = None


def hold_json() -> None:
    """From now on ``render`` keeps ``--json`` documents until :func:`release_json`, so that a
    failure after a command's document goes into that document (cli/base.py)."""
    _Printed.held = []


def release_json(error: dict[str, Any] | None = None) -> None:
    """Print the held documents; ``error`` (a failure's ``{"error": ...}``) goes into the last
    one, or is the document itself where the command had printed none. Holding ends."""
    held, _Printed.held = _Printed.held or [], None
    if error is not None:
        held = [*held[:-1], {**held[-1], **error}] if held else [error]
    for document in held:
        sys.stdout.write(to_json(document) + "\n")
    sys.stdout.flush()


@functools.lru_cache(maxsize=1)
def stdout() -> Console:
    """The console for results (stdout); 80 columns where the environment's width is none
    (``COLUMNS=0``: rich would print nothing at all)."""
    from rich.console import Console

    console = Console(soft_wrap=False)
    return console if console.width >= 1 else Console(soft_wrap=False, width=80)


def render(view: View, as_json: bool = False, console: Console | None = None) -> None:
    """Print ``view`` on stdout (``console``: another console, for tests): its JSON document
    with ``as_json``, else its text."""
    if isinstance(view, TextView):
        sys.stdout.write(view.text)
    elif as_json and _Printed.held is not None:
        _Printed.held.append(payload(view))
    elif as_json:
        sys.stdout.write(to_json(payload(view)) + "\n")
    else:
        print_report(text(view), console)


def payload(view: View) -> dict[str, Any]:
    """The ``--json`` document of ``view`` (``to_json`` adds the schema version)."""
    from moetune.report import payloads as p

    match view:
        case InspectView():
            return p.inspect_payload(view.facts, with_tensors=view.tensors)
        case PlanView():
            return p.plan_payload(view.result, view.frontier, view.ram)
        case QuantsView():
            return p.quants_payload(view.result)
        case RunView():
            return {**p.run_payload(view.result), "profile": p.run_profile_payload(view.result)}
        case BenchView():
            return p.bench_payload(view.result)
        case CalibrateView():
            return p.calibrate_payload(view.result)
        case ProfilesView():
            return p.profiles_payload(view.hardware, view.tuned, view.root, view.hardware_broken)
        case TunedView() | HardwareView():
            return jsonable(view.profile)
        case DoctorView():
            return p.doctor_payload(view.report)
        case ExportView():
            return jsonable(view.result)
        case TogetherView():
            return jsonable(view.result)
        case TogetherRunView():
            return jsonable(view.result)
        case ErrorView():
            return p.error_payload(view.code, view.message, view.hint)
        case TextView():
            raise TypeError("text has no JSON document")


def text(view: View) -> RenderableType:
    """What ``view`` shows a person: its report, fitted to the terminal."""
    match view:
        case InspectView():
            from moetune.report.inspect import render_inspect

            return render_inspect(view.facts, show_layers=view.layers)
        case PlanView():
            from moetune.report.plan import render_plan

            return render_plan(view.result, view.facts, view.source, view.frontier, view.ram)
        case QuantsView():
            from moetune.report.quants import render_quants

            return render_quants(view.result, view.source)
        case RunView():
            from rich.console import Group

            from moetune.report.run import render_run, render_run_profile

            found = render_run(view.result)
            profile = render_run_profile(view.result, view.model)
            return found if profile is None else Group(found, profile)
        case BenchView():
            from moetune.report.bench import render_bench, render_report

            return render_report(view.result) if view.chart else render_bench(view.result)
        case CalibrateView():
            from moetune.report.calibrate import render_calibrate

            return render_calibrate(view.result)
        case ProfilesView():
            from moetune.report.profiles import render_profiles_list

            return render_profiles_list(view.hardware, view.tuned, view.root, view.hardware_broken)
        case TunedView():
            from moetune.report.profiles import render_tuned

            return render_tuned(view.profile, view.path)
        case HardwareView():
            from moetune.report.profiles import render_hardware

            return render_hardware(view.profile)
        case DoctorView():
            from moetune.report.doctor import render_doctor

            return render_doctor(view.report)
        case ExportView():
            from rich.text import Text

            return Text("\n".join(view.result.notes))
        case TogetherView():
            from moetune.report.together import together_text

            return together_text(view.result)
        case TogetherRunView():
            from moetune.report.together import together_run_text

            return together_run_text(view.result)
        case TextView():
            from rich.text import Text

            return Text(view.text)
        case ErrorView():
            from moetune.report.common import render_error

            return render_error(view.message, view.hint, view.code)


def print_report(report: RenderableType, console: Console | None = None) -> None:
    """Print a report (on stdout): prose and tables fitted to the terminal, prose broken
    between phrases only (report.wrap), each ShellLine whole on its line (a command to copy,
    never broken by rich)."""
    from rich.console import Group
    from rich.segment import Segment, Segments
    from rich.text import Text

    from moetune.report.common import ShellLine
    from moetune.report.wrap import phrased

    def items(part: RenderableType) -> list[RenderableType]:
        if isinstance(part, Group):
            return [leaf for inner in part.renderables for leaf in items(inner)]
        return [part]

    console = console or stdout()
    for item in items(report):
        if isinstance(item, ShellLine):
            console.print(item, soft_wrap=True)
            continue
        shown = phrased(item) if isinstance(item, Text) else item
        lines = console.render_lines(shown, console.options, pad=False)
        console.print(
            Segments([s for line in lines for s in (*_rstripped(line), Segment.line())]), end=""
        )


def _rstripped(line: list[Segment]) -> list[Segment]:
    """A rendered line without the spaces rich leaves at its end (a wrapped phrase's, a
    table cell's padding): the segments' text stripped from the right, styles kept."""
    from rich.segment import Segment

    kept = list(line)
    while kept and not kept[-1].control and not kept[-1].text.rstrip():
        kept.pop()
    if kept and not kept[-1].control:
        last = kept[-1]
        kept[-1] = Segment(last.text.rstrip(), last.style, last.control)
    return kept
