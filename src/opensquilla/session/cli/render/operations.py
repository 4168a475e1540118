"""The output of the commands that change one session or delete many: compact, reset,
branch, truncate, prune and cap (their dry runs go through :func:`.show_outcome`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...compaction import CompactionResult
from ...models import SessionNode
from ...models.reports import ResetReport
from ..summarizer import describe_line
from . import View
from .text import field, out, record, visible


@dataclass(frozen=True)
class Branched:
    """The new child session and how many messages it started with."""

    node: SessionNode
    messages: int


@dataclass(frozen=True)
class Compacted:
    """A compaction's result and the summariser it was given (never its API key)."""

    result: CompactionResult
    summarizer: dict[str, Any]


def _print_compaction(compacted: Compacted) -> None:
    result = compacted.result
    out.print(f"summarizer: {visible(describe_line(compacted.summarizer), None, one_line=True)}")
    if result.skip_reason or not result.removed_count:
        out.print(f"nothing compacted: {field(result.skip_reason or 'nothing to remove')}")
        return
    out.print(
        f"compacted: {field(result.removed_count)} message(s) archived, "
        f"{len(result.kept_entries)} kept; "
        f"tokens {field(result.tokens_before)} -> {field(result.tokens_after)}"
    )
    out.print(f"summary source: {field(result.summary_source)}")
    out.print(f"coverage: {field(result.coverage_status)}")
    for missing in result.missing_obligations or []:
        out.print(f"  missing: {field(missing)}")
    out.print(visible(result.summary))


def _archive_path(report: ResetReport) -> str | None:
    return str(report.archive_path) if report.archive_path else None


def _print_reset(report: ResetReport) -> None:
    path = _archive_path(report)
    out.print(
        f"reset {field(report.session.session_key)}: generation "
        f"{field(report.previous_session_id)} -> {field(report.session.session_id)} "
        f"(epoch {field(report.session.epoch)})"
    )
    if report.archive_error is not None:
        out.print(
            f"archive: NOT WRITTEN ({visible(report.archive_error, None, one_line=True)}); "
            "the old generation's history is lost"
        )
    elif report.archive_id is not None:
        out.print(f"archive: row {report.archive_id} of session_archives (in the database)")
    else:
        shown = visible(path, None, one_line=True) if path else "none (nothing to archive)"
        out.print(f"archive: {shown}")


def _print_truncation(result: dict[str, Any]) -> None:
    if result["truncated"]:
        out.print(
            f"truncated: {field(result['before_count'])} -> {field(result['after_count'])} "
            "live messages"
        )
    else:
        out.print(f"nothing to truncate ({field(result['before_count'])} live messages)")


def _compaction_data(compacted: Compacted) -> dict[str, Any]:
    result = compacted.result
    return {
        "summarizer": compacted.summarizer,
        "removed_count": result.removed_count,
        "kept_count": len(result.kept_entries),
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "coverage_status": result.coverage_status,
        "missing_obligations": result.missing_obligations or [],
        "skip_reason": result.skip_reason,
        "summary_source": result.summary_source,
        "summary": result.summary,
    }


COMPACTION: View[Compacted] = View(_compaction_data, _print_compaction)
RESET: View[ResetReport] = View(
    lambda report: {
        "session_key": report.session.session_key,
        "previous_session_id": report.previous_session_id,
        "session_id": report.session.session_id,
        "epoch": report.session.epoch,
        "archive_path": _archive_path(report),
        "archive_id": report.archive_id,
        "archive_error": report.archive_error,
    },
    _print_reset,
)
BRANCHED: View[Branched] = View(
    lambda made: {"session": record(made.node), "messages": made.messages},
    lambda made: out.print(
        f"created {field(made.node.session_key)} from {field(made.node.parent_session_key)} "
        f"with {made.messages} message(s)"
    ),
)
TRUNCATION: View[dict[str, Any]] = View(lambda result: result, _print_truncation)


def deleted(action: str) -> View[int]:
    """A retention command's result (``prune``, ``cap``): how many sessions ``action``
    deleted."""
    return View(
        lambda count: {"dry_run": False, "deleted_sessions": count},
        lambda count: out.print(f"{action}: deleted {count} session(s)"),
    )
