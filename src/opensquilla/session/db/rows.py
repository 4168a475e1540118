"""Mapping between table rows and the public models.

Table columns and model fields carry the same names (a test pins this), so a row maps to
a model field for field, with no validation: the database already typed every value.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from sqlalchemy import JSON, ColumnElement, Float, Select, Table, Text, cast, select, type_coerce
from sqlalchemy.engine import Result, Row
from sqlalchemy.ext.asyncio import AsyncConnection

from ..models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)
from .tables import (
    TABLES,
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)
from .types import json_deserializer

M = TypeVar("M", bound=_Record)

TRANSCRIPT_COLUMNS: tuple[str, ...] = tuple(c.name for c in transcript_entries.columns)

# Which model a table's rows become (keyed by the table's name, as ``tables.OUR_TABLES``).
MODEL_FOR_TABLE: dict[str, type[_Record]] = {
    table.name: model
    for table, model in (
        (sessions, SessionNode),
        (transcript_entries, TranscriptEntry),
        (compacted_transcript_entries, CompactedTranscriptEntry),
        (session_summaries, SessionSummary),
        (session_context_states, SessionContextState),
    )
}


def values_of(model: _Record, table: Table, *, without_id: bool = True) -> dict[str, Any]:
    """The model's values for an INSERT into ``table`` (the row id is the database's)."""
    data = model.__dict__
    return {c.name: data[c.name] for c in table.columns if not (without_id and c.name == "id")}


# JSON columns of every table. On SQLite they are read as text and decoded here (one call
# per non-NULL value instead of three per value in SQLAlchemy's JSON result processing);
# on Postgres asyncpg's codec has already decoded them.
JSON_COLUMNS = frozenset(
    c.name for table in TABLES for c in table.columns if isinstance(c.type, JSON)
)
_sqlite_loads = json_deserializer("sqlite")


@functools.cache
def read_columns(table: Table, dialect_name: str) -> tuple[ColumnElement[Any], ...]:
    """The columns to SELECT when the rows become models.

    On SQLite a REAL column is read through ``CAST(... AS REAL)``: SQLite stores an integral
    REAL as an integer, and ``UPDATE ... RETURNING`` hands it back as one (``0``, not
    ``0.0``), so a returned row would hold an ``int`` where its model has a ``float``.
    """
    if dialect_name != "sqlite":
        return tuple(table.columns)
    return tuple(
        type_coerce(c, Text).label(c.name)
        if c.name in JSON_COLUMNS
        else cast(c, Float).label(c.name)
        if isinstance(c.type, Float)
        else c
        for c in table.columns
    )


def select_rows(table: Table, conn: AsyncConnection) -> Select[Any]:
    return select(*read_columns(table, conn.dialect.name))


def _decoder(keys: tuple[str, ...], dialect_name: str) -> tuple[str, ...]:
    if dialect_name != "sqlite":
        return ()
    return tuple(k for k in keys if k in JSON_COLUMNS)


def _decode(values: dict[str, Any], json_keys: tuple[str, ...]) -> dict[str, Any]:
    for key in json_keys:
        value = values[key]
        if isinstance(value, str | bytes):
            values[key] = _sqlite_loads(value)
    return values


def to_model(model: type[M], row: Row[Any], dialect_name: str) -> M:
    keys = tuple(row._fields)
    return model.from_row(_decode(dict(zip(keys, row, strict=True)), _decoder(keys, dialect_name)))


def to_models(model: type[M], dialect_name: str, result: Result[Any]) -> list[M]:
    """Every row of ``result`` as a model, in one pass.

    This is the read hot path (a 100k-entry transcript is 100k models): all rows fetched
    at once, names looked up once, JSON decoded in place, then every model assembled by
    :meth:`_Record.from_rows` (no validation: the database typed every value).
    """
    keys = tuple(result.keys())
    json_keys = _decoder(keys, dialect_name)
    values = [dict(zip(keys, row, strict=True)) for row in result.all()]
    if json_keys:
        loads = _sqlite_loads
        for row_values in values:
            for key in json_keys:
                value = row_values[key]
                if value.__class__ is str:
                    row_values[key] = loads(value)
    return model.from_rows(values, keys)
