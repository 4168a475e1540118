"""Mapping between table rows and the public models.

Table columns and model fields carry the same names (a test pins this), so a row maps to
a model field for field, with no validation: the database already typed every value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from sqlalchemy import Column, Table
from sqlalchemy.engine import Row

from ..models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)
from .tables import (
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)

M = TypeVar("M", bound=_Record)

SESSION_COLUMNS: tuple[str, ...] = tuple(c.name for c in sessions.columns)
TRANSCRIPT_COLUMNS: tuple[str, ...] = tuple(c.name for c in transcript_entries.columns)
ARCHIVE_COLUMNS: tuple[str, ...] = tuple(c.name for c in compacted_transcript_entries.columns)
SUMMARY_COLUMNS: tuple[str, ...] = tuple(c.name for c in session_summaries.columns)
STATE_COLUMNS: tuple[str, ...] = tuple(c.name for c in session_context_states.columns)

MODEL_FOR_TABLE: dict[str, type[_Record]] = {
    "sessions": SessionNode,
    "transcript_entries": TranscriptEntry,
    "compacted_transcript_entries": CompactedTranscriptEntry,
    "session_summaries": SessionSummary,
    "session_context_states": SessionContextState,
}


def values_of(model: _Record, table: Table, *, without_id: bool = True) -> dict[str, Any]:
    """The model's values for an INSERT into ``table`` (the row id is the database's)."""
    data = model.__dict__
    return {c.name: data[c.name] for c in table.columns if not (without_id and c.name == "id")}


def to_model(model: type[M], row: Row[Any] | Mapping[str, Any]) -> M:
    mapping = row._mapping if isinstance(row, Row) else row
    return model.from_row(dict(mapping))


def to_models(model: type[M], rows: Iterable[Row[Any]]) -> list[M]:
    build = model.from_row
    return [build(dict(row._mapping)) for row in rows]


def columns_except(table: Table, *names: str) -> list[Column[Any]]:
    return [c for c in table.columns if c.name not in names]
