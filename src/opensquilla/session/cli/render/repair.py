"""The ``repair`` commands' output: the queue of degraded compactions, one queued
compaction, and the reset archives a crash left behind (``stats`` shows those too)."""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table

from ...models import SessionSummary, TranscriptEntry
from ...usecases.overview import ArchiveReport
from . import View
from .sessions import print_transcript
from .text import field, out, record, visible, when


@dataclass(frozen=True)
class RepairQueue:
    """``repair list``: the queued compactions and the reset archives needing a look."""

    summaries: list[SessionSummary]
    archives: ArchiveReport


@dataclass(frozen=True)
class QueuedCompaction:
    """``repair show``: one queued compaction and the messages it folded away."""

    summary: SessionSummary
    preimage: list[TranscriptEntry]


def print_archives(report: ArchiveReport) -> None:
    """Reset archives a crash left behind: settled at this start, or still unpublished."""
    for item in report.recovered:
        out.print(
            f"reset archive {item.outcome} at start: {visible(str(item.path), None)} "
            f"({visible(item.session_key)}: {visible(item.reason)})"
        )
    for staged in report.unpublished:
        out.print(
            f"unpublished reset archive: {visible(str(staged.path), None)} "
            f"({staged.size} bytes; would be {visible(staged.final.name, None)})"
        )


def _print_queue(queue: RepairQueue) -> None:
    print_archives(queue.archives)
    if not queue.summaries:
        out.print("the repair queue is empty")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("id", "session", "compaction", "status", "removed", "created"):
        table.add_column(name, overflow="fold")
    for summary in queue.summaries:
        table.add_row(
            field(summary.id),
            field(summary.session_key),
            field(summary.compaction_id or "-"),
            field(summary.flush_receipt_status),
            field(summary.removed_count),
            when(summary.created_at),
        )
    out.print(table)


def _print_queued(queued: QueuedCompaction) -> None:
    summary = queued.summary
    out.print(
        f"[bold]summary #{field(summary.id)}[/bold] of {field(summary.session_key)} "
        f"({field(summary.compaction_id)}), flush {field(summary.flush_receipt_status)}"
    )
    out.print(visible(summary.summary_text))
    out.print(f"\n[bold]preimage[/bold] ({len(queued.preimage)} messages)")
    print_transcript(queued.preimage)


QUEUE: View[RepairQueue] = View(
    lambda queue: {
        "summaries": [record(summary) for summary in queue.summaries],
        "reset_archives": queue.archives.as_json(),
    },
    _print_queue,
)
QUEUED: View[QueuedCompaction] = View(
    lambda queued: {
        "summary": record(queued.summary),
        "preimage": [record(entry) for entry in queued.preimage],
    },
    _print_queued,
)
MARKED: View[SessionSummary] = View(
    lambda summary: {"summary": record(summary)},
    lambda summary: out.print(
        f"summary #{field(summary.id)}: flush receipt status is now "
        f"{field(summary.flush_receipt_status)}"
    ),
)
