"""The output of the commands that move data: export's tally (on stderr: stdout may be
the export itself), import's result, copy's progress bar and verification table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from rich import box
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...transfer import CopyReport, ExportSummary, ImportSummary
from . import View
from .text import err, field, out, visible


def print_exported(summary: ExportSummary, destination: Path | None) -> None:
    """The export's tally on stderr, naming the file when it was not stdout."""
    err.print(
        f"exported {summary.sessions} session(s), "
        f"{sum(summary.rows.values()) - summary.sessions} row(s)"
        + (f" to {visible(destination, None, one_line=True)}" if destination is not None else "")
    )


def _print_imported(summary: ImportSummary) -> None:
    out.print(
        f"imported {len(summary.imported)} session(s)"
        + (
            f"; {len(summary.unchanged)} already imported (identical), left as they are"
            if summary.unchanged
            else ""
        )
    )
    for key in summary.skipped:
        out.print(f"  skipped (already there with other contents): {field(key)}")


IMPORTED: View[ImportSummary] = View(
    lambda summary: {
        "imported": summary.imported,
        "unchanged": summary.unchanged,
        "skipped": summary.skipped,
        "rows": summary.rows,
    },
    _print_imported,
)


def print_copying(source: str, target: str) -> None:
    """Which databases a copy reads and writes (on stderr, before the progress bar)."""
    err.print(f"copying {visible(source)} -> {visible(target)}")


@contextmanager
def copy_progress(hidden: bool) -> Iterator[Callable[[int | None, int], None]]:
    """A progress bar of sessions on stderr (none with ``hidden``, for ``--json``); yields
    the function that moves it to ``(total, done)``."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=hidden,
    ) as progress:
        task = progress.add_task("sessions", total=None)

        def advance(total: int | None, done: int) -> None:
            progress.update(task, total=total, completed=done)

        yield advance


def _print_copied(report: CopyReport) -> None:
    out.print(
        f"{report.total} session(s): {report.copied} copied, {report.skipped} already there"
        + (f", {len(report.conflicts)} conflicting" if report.conflicts else "")
        + (f", {len(report.refused)} not copied" if report.refused else "")
    )
    for key in report.conflicts:
        out.print(f"  conflict (exists in the target with other contents): {field(key)}")
    for key, reason in report.refused.items():
        out.print(f"  not copied: {field(key)}: {visible(reason, 500, one_line=True)}")
    if report.checks:
        table = Table("table", "source rows", "target rows", "checksum", box=box.SIMPLE_HEAD)
        for check in report.checks:
            table.add_row(
                check.table,
                str(check.source_rows),
                str(check.target_rows),
                "match" if check.ok else "DIFFERENT",
            )
        out.print(table)
        out.print("verified: identical" if report.verified else "verification FAILED")


COPIED: View[CopyReport] = View(
    lambda report: {
        "ok": report.ok,
        "total": report.total,
        "copied": report.copied,
        "skipped": report.skipped,
        "conflicts": report.conflicts,
        "refused": report.refused,
        "rows": report.rows,
        "verification": [{**asdict(check), "ok": check.ok} for check in report.checks],
    },
    _print_copied,
)
