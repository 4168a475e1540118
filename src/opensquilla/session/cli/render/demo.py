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
    chosen_by: str = "--dsn"
    directory: str | None = None  # the directory the demo wrote into (--dir, temporary)


def _print_demo(run: DemoRun) -> None:
    database = visible(run.database, None, one_line=True)
    out.print(f"[bold]opensquilla-session demo[/bold] on {database} ({run.chosen_by})")
    if run.directory is not None:
        out.print(f"it writes only in {visible(run.directory, None, one_line=True)}")
    for step in run.report.steps:
        out.rule(step.title)
        for line in step.lines:
            out.print(visible(line, None))
        for term, url in step.terms.items():
            out.print(f"[dim]  {term}: {url}[/dim]")
    out.print(
        "\ninspect the branch (it kept the conversation): "
        f"opensquilla-session --dsn {database} sessions show "
        f"{field(run.report.branch_key)} --canonical"
    )


DEMO: View[DemoRun] = View(
    lambda run: {
        "database": run.database,
        "chosen_by": run.chosen_by,
        "directory": run.directory,
        "session_key": run.report.session_key,
        "branch_key": run.report.branch_key,
        "steps": [
            {"step": step.title, **step.data, "glossary": step.terms} for step in run.report.steps
        ],
    },
    _print_demo,
)
