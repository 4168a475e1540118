"""The ``demo`` command's output: each scripted step under a rule, then where to look."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import View
from .text import field, out, visible

if TYPE_CHECKING:  # the demo module imports this one
    from ..demo import DemoReport


@dataclass(frozen=True)
class DemoRun:
    """A played demo and the database it ran on (rendered by the storage: password hidden)."""

    report: DemoReport
    database: str


def _print_demo(run: DemoRun) -> None:
    out.print(
        f"[bold]opensquilla-session demo[/bold] on {visible(run.database, None, one_line=True)}"
    )
    for step in run.report.steps:
        out.rule(step.title)
        for line in step.lines:
            out.print(visible(line, None))
    out.print(
        "\ninspect the branch (it kept the conversation): "
        f"opensquilla-session sessions show {field(run.report.branch_key)} --canonical"
    )


DEMO: View[DemoRun] = View(
    lambda run: {
        "database": run.database,
        "session_key": run.report.session_key,
        "branch_key": run.report.branch_key,
        "steps": [{"step": step.title, **step.data} for step in run.report.steps],
    },
    _print_demo,
)
