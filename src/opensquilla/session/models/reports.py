"""Plain data the use cases and the operator tools exchange with the storage (no I/O).

``SessionRows`` is one session with every column of every row it owns, as plain Python
values: what export, import and copy move. The previews say what a deleting operation would
remove, without removing it; ``StoreCounts`` is the census behind ``stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .records import SessionNode

ColumnKind = Literal["text", "int", "float", "bool", "json"]
TableLayout = dict[str, tuple[tuple[str, ColumnKind], ...]]
"""For each table, its columns in table order with the kind of value each holds."""

IfExists = Literal["fail", "skip"]


@dataclass
class SessionRows:
    """One session and every row it owns: rows of the child tables whose ``session_key`` is
    the session's (every generation), each a ``{column: value}`` dict in ``id`` order."""

    session: dict[str, Any]
    children: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def session_key(self) -> str:
        return str(self.session["session_key"])

    def rows(self, table: str) -> list[dict[str, Any]]:
        return self.children.get(table, [])

    def row_counts(self, tables: Sequence[str]) -> dict[str, int]:
        """How many rows of each of ``tables`` (the child tables, in their order)."""
        return {table: len(self.rows(table)) for table in tables}


@dataclass(frozen=True)
class DeletionPreview:
    """What a deleting operation would remove right now (nothing is changed).

    ``sessions``: the session rows that would go, in the order the operation deletes them;
    ``rows``: how many rows of each child table would go; ``invalidated_context_states``:
    states that would be marked invalid rather than deleted (a reset does that).
    """

    sessions: tuple[SessionNode, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)
    invalidated_context_states: int = 0

    @property
    def session_keys(self) -> list[str]:
        return [node.session_key for node in self.sessions]

    @property
    def total_rows(self) -> int:
        return len(self.sessions) + sum(self.rows.values())


@dataclass(frozen=True)
class StoreCounts:
    """Row counts of the whole store, read in one transaction."""

    sessions: int
    live_entries: int
    archived_entries: int
    archived_content_chars: int
    summaries_by_flush_status: dict[str, int]
    degraded_queue: int
    context_states: int
    valid_context_states: int


@dataclass(frozen=True)
class ResetReport:
    """A reset and where the old generation went: ``archive_path``, its archive file, or
    with ``archive_store="database"``, ``archive_id``, its ``session_archives`` row; both
    ``None`` when it held nothing to archive, or when the archive could not be written (the
    reset goes on). ``archive_error`` is then why (``"OSError: [Errno 28] No space left on
    device"``): the old generation's history is lost, and a gateway should alert on it;
    ``None`` when nothing was lost."""

    session: SessionNode
    previous_session_id: str
    archive_path: Path | None
    archive_id: int | None = None
    archive_error: str | None = None


__all__ = [
    "ColumnKind",
    "DeletionPreview",
    "IfExists",
    "ResetReport",
    "SessionRows",
    "StoreCounts",
    "TableLayout",
]
