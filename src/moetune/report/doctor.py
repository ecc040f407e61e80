"""`moetune doctor`: one line per finding, ok / warn / fail, with its fix."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from moetune.jobs.doctor import DoctorReport, Finding
from moetune.report.common import plural, short_path
from moetune.report.wrap import Phrases

STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def _finding_cell(finding: Finding) -> Text:
    """The finding and its fix, broken between phrases (a size stays with its unit)."""
    text = Phrases(finding.message)
    if finding.fix and finding.status != "ok":
        text.append(f"\nfix: {finding.fix}", style="dim")
    return text


def render_doctor(report: DoctorReport) -> RenderableType:
    table = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    table.add_column("status", no_wrap=True)
    table.add_column("check", no_wrap=True, style="bold")
    table.add_column("finding", overflow="fold")  # a long path breaks, not cut with ...
    for finding in report.findings:
        style = STATUS_STYLE[finding.status]
        table.add_row(Text(finding.status, style=style), finding.check, _finding_cell(finding))
    counts = {s: sum(f.status == s for f in report.findings) for s in ("ok", "warn", "fail")}
    words = f"{counts['ok']} ok, {plural(counts['warn'], 'warning')}, "
    summary = Text(words + plural(counts["fail"], "failure"), style=STATUS_STYLE[report.worst])
    model = f": {short_path(report.model)}" if report.model else ""
    head = Text(f"moetune doctor{model}", style="bold")
    return Group(head, table, summary)
