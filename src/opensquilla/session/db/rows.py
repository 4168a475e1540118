"""Mapping between table rows and the public models.

Table columns and model fields carry the same names (a test pins this), so a row maps to
a model field for field, with no validation: the database already typed every value.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    Boolean,
    ColumnElement,
    Float,
    Select,
    Table,
    Text,
    cast,
    select,
    type_coerce,
)
from sqlalchemy.engine import CursorResult, Row
from sqlalchemy.ext.asyncio import AsyncConnection

from ..models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)
from ..support.gcpause import gc_paused
from .tables import (
    TABLES,
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)
from .types import (
    JSONText,
    LosslessText,
    Real,
    loads_json_text,
    signless_zero,
    sqlite_json_value,
    unescape_text,
)

M = TypeVar("M", bound=_Record)

TRANSCRIPT_COLUMNS: tuple[str, ...] = tuple(c.name for c in transcript_entries.columns)

# Which table a model's rows come from, and which model a table's rows become (keyed by
# the table's name, as ``tables.OUR_TABLES``).
TABLE_FOR_MODEL: dict[type[_Record], Table] = {
    SessionNode: sessions,
    TranscriptEntry: transcript_entries,
    CompactedTranscriptEntry: compacted_transcript_entries,
    SessionSummary: session_summaries,
    SessionContextState: session_context_states,
}
MODEL_FOR_TABLE: dict[str, type[_Record]] = {
    table.name: model for model, table in TABLE_FOR_MODEL.items()
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

# Rows are read in partitions of this many: each driver row is dropped once its record is
# built, so a large read never holds every row twice.
PARTITION_ROWS = 2000


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
        if isinstance(c.type, Float | Real)
        else c
        for c in table.columns
    )


def select_rows(table: Table, conn: AsyncConnection, *, given: tuple[str, ...] = ()) -> Select[Any]:
    """``SELECT`` of :func:`read_columns` (statements are immutable: built once and shared,
    each ``.where()`` makes a new one), less the ``given`` columns: those the statement's
    ``WHERE`` pins to one value, which :func:`to_models` then puts in every model instead
    of reading it from every row."""
    return _select_rows(table, conn.dialect.name, given)


@functools.cache
def _select_rows(table: Table, dialect_name: str, given: tuple[str, ...]) -> Select[Any]:
    return select(*(c for c in read_columns(table, dialect_name) if c.name not in given))


def pinned_session_id(session_id: object) -> dict[str, Any] | None:
    """``given`` for a read of one generation's rows (``WHERE session_id = :session_id``):
    every row's ``session_id`` equals the parameter (text equality is exact on both
    backends, no collation folds it), so it need not be read. Only for a ``str``: another
    type could compare equal after the database's conversion, and the models hold ``str``."""
    return {"session_id": session_id} if session_id.__class__ is str else None


def _json_converters(
    keys: tuple[str, ...], dialect_name: str
) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    if dialect_name != "sqlite":
        return ()
    return tuple((k, sqlite_json_value) for k in keys if k in JSON_COLUMNS)


@functools.cache
def driver_converters(
    model: type[_Record], keys: tuple[str, ...], dialect_name: str
) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """What turns the driver's values of the columns ``keys`` of ``model``'s table into
    the model's types: SQLAlchemy's result processing for these columns, plus the JSON
    decoding of :func:`read_columns`' text on SQLite.

    On both: :class:`JSONText` is decoded. On SQLite: JSON text is decoded and a
    ``BOOLEAN`` (stored 0/1) becomes a ``bool``. On Postgres: ``LosslessText`` is unescaped
    (asyncpg has decoded JSON and booleans) and a ``Real`` zero loses its sign (SQLite's
    ``REAL`` already has). Every other column arrives as its model's type.
    ``tests/storage/test_fast_reads.py`` checks this against SQLAlchemy's own processors,
    for every table on both backends.
    """
    table = TABLE_FOR_MODEL[model]
    out: list[tuple[str, Callable[[Any], Any]]] = []
    for key in keys:
        column = table.c.get(key)
        if column is None:
            continue
        if isinstance(column.type, JSONText):
            out.append((key, loads_json_text))
        elif dialect_name == "sqlite":
            if isinstance(column.type, JSON):
                out.append((key, sqlite_json_value))
            elif isinstance(column.type, Boolean):
                out.append((key, bool))
        elif isinstance(column.type, LosslessText):
            out.append((key, unescape_text))
        elif isinstance(column.type, Real):
            out.append((key, signless_zero))
    return tuple(out)


def to_model(model: type[M], row: Row[Any], dialect_name: str) -> M:
    """One SQLAlchemy row (already through its result processing) as a model."""
    keys = tuple(row._fields)
    return model.from_rows((row,), keys, _json_converters(keys, dialect_name))[0]


def models_of_rows(
    model: type[M], dialect_name: str, rows: list[tuple[Any, ...]], keys: tuple[str, ...]
) -> list[M]:
    """Rows the driver returned (columns ``keys``, a ``select_rows``-shaped read of
    ``model``'s table), as :func:`to_models` makes them: for a statement run on the pool's
    DBAPI connection (``db/direct_statement.py``)."""
    return model.from_rows(rows, keys, driver_converters(model, keys, dialect_name), None)


def to_models(
    model: type[M],
    dialect_name: str,
    result: CursorResult[Any],
    given: dict[str, Any] | None = None,
) -> list[M]:
    """Every row of ``result`` (a ``select_rows``-shaped read of ``model``'s table, less
    the columns ``given`` holds the values of) as a model, in one pass.

    This is the read hot path (a 100k-entry transcript is 100k models). The rows are
    taken from the DBAPI cursor as the driver returned them, in partitions, skipping
    SQLAlchemy's ``Row`` objects and per-column processors; :func:`driver_converters` does
    the processing these columns need, and :meth:`_Record.from_rows` builds the models
    (no validation: the database typed every value).
    """
    keys = tuple(result.keys())
    converters = driver_converters(model, keys, dialect_name)
    partitions = iter(functools.partial(result.cursor.fetchmany, PARTITION_ROWS), [])
    try:
        with gc_paused():
            rows = itertools.chain.from_iterable(partitions)
            return model.from_rows(rows, keys, converters, given)
    finally:
        result.close()
