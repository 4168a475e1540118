"""Many rows at once and one row out (issue 28): the batch append, the pop of the newest
live row, the delete by row id (docs/messages.md). Mixed into
:class:`.transcript.TranscriptRepository`, whose connection it uses.

The batch is a bounded number of statements whatever its size: one fenced touch of the
session row (the whole batch's token delta, under the ``INT64`` ceiling), then one
multi-row INSERT per :data:`CHUNK_ROWS` rows returning ``(id, created_at)``, each row's
defaulted ``created_at`` raised to the generation's newest live one inside the INSERT. On
PostgreSQL the touch is a CTE of the first INSERT, on SQLite (with revision 0008's append
view) inside the INSERT into the view: one statement for a batch of up to
:data:`CHUNK_ROWS`. The touch's lock (PostgreSQL's row lock, SQLite's write lock) holds off
every other append, batch and pop of the session until the commit, so two batches never
interleave.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, Required, Unpack

from sqlalchemy import (
    ColumnElement,
    bindparam,
    delete,
    exists,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import TranscriptEntry
from ..direct_statement import execute_compiled
from ..rows import read_columns, to_models
from ..tables import sessions
from ..tables import transcript_entries as live
from .batch_statements import batch_insert, row_params, view_batch, view_placed
from .fenced_append import (
    _TOUCH,
    _TOUCH_WITH_TOKENS,
    INSERT_COLUMNS,
    NEWEST_LIVE,
    Fence,
    _refuse_overflow,
    contended,
    newest_live_params,
    touch_params,
)

# Rows per INSERT: far below PostgreSQL's 32,767 bind parameters and SQLite's 32,766 (an
# SQLite before 3.32 allows 999 per statement).
CHUNK_ROWS = 500 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999 // len(INSERT_COLUMNS)
CONTENDED_TRIES = 1000


class BatchOptions(Fence, total=False):
    """What :func:`append_batch` takes beside the entries, declared once for the layers
    passing it on: the :class:`Fence` and how the batch runs (``returning``,
    ``ends_transaction``, ``through_view``: see :func:`append_batch`)."""

    returning: Required[bool]
    ends_transaction: bool
    through_view: bool


def append_batch(
    conn: Connection,
    entries: Sequence[TranscriptEntry],
    *,
    expected_epoch: int,
    now: int,
    token_delta: int,
    returning: bool,
    ends_transaction: bool = False,
    through_view: bool = False,
) -> list[tuple[int, int]] | None:
    """Synchronous, for ``AsyncConnection.run_sync`` inside the caller's write transaction:
    the fenced touch of the generation (``updated_at``, ``total_tokens + token_delta``)
    and ``entries`` inserted in order, their defaulted ``created_at`` floored to the
    generation's newest live one (docs/semantics.md#order). ``(id, created_at)`` per entry
    in order, or ``None`` when the fence refused (an overflow raised). ``returning``:
    SQLite's RETURNING (3.35+); without, the floor is read first and the ids follow from
    the last one (AUTOINCREMENT under the write lock: consecutive). ``ends_transaction``:
    the caller commits right after (SQLite: the last INSERT and the COMMIT then run in one
    thread hop, ``sqlite_driver``'s ``commit_with_next``). ``through_view``: SQLite with
    revision 0008's append view and RETURNING, where a batch of one chunk is one statement
    (``batch_statements.view_batch``: the touch inside it), so with ``ends_transaction`` the BEGIN,
    the statement and the COMMIT run in one thread hop."""
    first = entries[0]
    params = touch_params(first, expected_epoch, now, token_delta)
    chunks = [entries[at : at + CHUNK_ROWS] for at in range(0, len(entries), CHUNK_ROWS)]
    placed: list[tuple[int, int]] = []
    if conn.dialect.name == "postgresql":
        for index, chunk in enumerate(chunks):
            stmt = batch_insert(
                "postgresql", len(chunk), tokens=bool(token_delta), touch=index == 0, floor=True
            )
            bound = {**params, **row_params(chunk)}
            for _ in range(CONTENDED_TRIES):
                rows = execute_compiled(conn, stmt, bound).all()
                if rows:
                    break
                if token_delta:
                    _refuse_overflow(conn, params, token_delta)
                if not contended(conn, first, expected_epoch):
                    return None
                # The session row changed while the statement waited for it: the order
                # floor it read is old. Again, on a new snapshot (READ COMMITTED).
            else:
                return None
            placed += sorted((int(r[0]), int(r[1])) for r in rows)
        return placed
    if through_view and len(chunks) == 1:
        if ends_transaction:
            _commit_with_next(conn, len(entries))
        stmt, bound = view_batch(
            entries, expected_epoch=expected_epoch, now=now, token_delta=token_delta
        )
        placed_rows = view_placed(execute_compiled(conn, stmt, bound).all(), len(entries))
        if placed_rows is None and token_delta:  # not committed: the caller rolls back
            _refuse_overflow(conn, params, token_delta)
        return placed_rows
    touch = _TOUCH_WITH_TOKENS if token_delta else _TOUCH
    if not conn.execute(touch, params).rowcount:
        if token_delta:
            _refuse_overflow(conn, params, token_delta)
        return None
    for index, chunk in enumerate(chunks):
        if returning:
            bound = {
                "fence_key": first.session_key,
                "fence_session_id": first.session_id,
                **row_params(chunk),
            }
            stmt = batch_insert("sqlite", len(chunk), tokens=False, touch=False, floor=True)
            if ends_transaction and index == len(chunks) - 1:
                _commit_with_next(conn)
            rows = execute_compiled(conn, stmt, bound).all()
            placed += sorted((int(r[0]), int(r[1])) for r in rows)
            continue
        newest = conn.execute(NEWEST_LIVE, newest_live_params(first)).scalar()
        floor = int(newest) if newest is not None else None
        at = [max(e.created_at, floor) if floor is not None else e.created_at for e in chunk]
        values = row_params(chunk)
        for n, created_at in enumerate(at):
            values[f"r{n}_created_at"] = created_at
        stmt = batch_insert("sqlite", len(chunk), tokens=False, touch=False, floor=False)
        last = execute_compiled(conn, stmt, values).lastrowid
        assert last is not None
        placed += list(zip(range(last - len(chunk) + 1, last + 1), at, strict=True))
    return placed


def _commit_with_next(conn: Connection, rows: int | None = None) -> None:
    """Have the lean SQLite adapter commit right after the next statement (given ``rows``:
    if it returned that many), in its hop (nothing when the engine runs another adapter)."""
    commit = getattr(conn.connection.dbapi_connection, "commit_with_next", None)
    if commit is not None:
        commit(rows)


# -- one row out ---------------------------------------------------------------------------


def _current_generation(dialect: str) -> Any:
    """The session id of ``:row_key``'s row (its current generation), as a subquery; on
    PostgreSQL read ``FOR SHARE``: a reset or an append holding the row is waited for."""
    query = select(sessions.c.session_id).where(sessions.c.session_key == bindparam("row_key"))
    if dialect == "postgresql":
        query = query.with_for_update(read=True)
    return query.scalar_subquery()


def _of_current_generation(dialect: str) -> tuple[ColumnElement[bool], ...]:
    """Live rows of ``:row_key``'s current generation: by the key (the session's partition
    or shard) and the generation's id."""
    return (
        live.c.session_key == bindparam("row_key"),
        live.c.session_id == _current_generation(dialect),
    )


def _newest_id(dialect: str) -> Any:
    return (
        select(live.c.id)
        .where(*_of_current_generation(dialect))
        .order_by(live.c.created_at.desc(), live.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


@functools.cache
def pop_statement(dialect: str) -> Any:
    """The pop: the newest live row of ``:row_key``'s current generation deleted and
    returned (:func:`read_columns`), in one statement."""
    return (
        delete(live)
        .where(live.c.session_key == bindparam("row_key"), live.c.id == _newest_id(dialect))
        .returning(*read_columns(live, dialect))
    )


@functools.cache
def _newest_row(dialect: str) -> Any:
    return select(*read_columns(live, dialect)).where(
        live.c.session_key == bindparam("row_key"), live.c.id == _newest_id(dialect)
    )


@functools.cache
def _delete_by_id(dialect: str) -> Any:
    return delete(live).where(live.c.id == bindparam("row_id"), *_of_current_generation(dialect))


@functools.cache
def any_live_statement(dialect: str) -> Any:
    """Whether ``:row_key``'s current generation has a live row, one value."""
    return select(exists().where(*_of_current_generation(dialect)))


def _all_rows(conn: Connection, statement: Any, params: dict[str, Any]) -> list[Any]:
    return list(execute_compiled(conn, statement, params).all())


class TranscriptBatches:
    """The batch append, the pop and the delete by row id."""

    conn: AsyncConnection

    async def append_batch(
        self, entries: Sequence[TranscriptEntry], **options: Unpack[BatchOptions]
    ) -> list[tuple[int, int]] | None:
        """:func:`append_batch` on this connection (one crossing into the greenlet)."""
        return await self.conn.run_sync(append_batch, entries, **options)

    async def rows_of(self, statement: Any, params: dict[str, Any]) -> list[Any]:
        """Every row ``statement`` returns with ``params`` (a batch's one statement)."""
        return await self.conn.run_sync(_all_rows, statement, params)

    async def live_message_ids(
        self, session_id: str, message_ids: Sequence[str], *, session_key: str
    ) -> set[str]:
        """Which of ``message_ids`` a live row of ``session_id`` (stored under
        ``session_key``) carries."""
        found: set[str] = set()
        for at in range(0, len(message_ids), CHUNK_ROWS):
            query = select(live.c.message_id).where(
                live.c.session_key == session_key,
                live.c.session_id == session_id,
                live.c.message_id.in_(message_ids[at : at + CHUNK_ROWS]),
            )
            found.update((await self.conn.execute(query)).scalars())
        return found

    async def pop_newest(self, key: str) -> TranscriptEntry | None:
        """Delete the newest live row (``created_at``, then id) of ``key``'s current
        generation and return it, in one statement; ``None`` when none was deleted (no
        row, no session, or a concurrent pop took the row this one chose: see
        :meth:`has_live`)."""
        dialect = self.conn.dialect.name
        result = await self.conn.execute(pop_statement(dialect), {"row_key": key})
        rows = to_models(TranscriptEntry, dialect, result)
        return rows[0] if rows else None

    async def newest_live_row(self, key: str) -> TranscriptEntry | None:
        """The row :meth:`pop_newest` would delete (for SQLite without RETURNING)."""
        dialect = self.conn.dialect.name
        result = await self.conn.execute(_newest_row(dialect), {"row_key": key})
        rows = to_models(TranscriptEntry, dialect, result)
        return rows[0] if rows else None

    async def delete_live_row(self, key: str, row_id: int) -> bool:
        """Delete the live row ``row_id`` if it belongs to ``key``'s current generation."""
        dialect = self.conn.dialect.name
        result = await self.conn.execute(_delete_by_id(dialect), {"row_key": key, "row_id": row_id})
        return bool(result.rowcount)

    async def has_live(self, key: str) -> bool:
        """Whether ``key``'s current generation has a live row (read now)."""
        dialect = self.conn.dialect.name
        return bool(
            (await self.conn.execute(any_live_statement(dialect), {"row_key": key})).scalar()
        )


__all__ = [
    "CHUNK_ROWS",
    "BatchOptions",
    "TranscriptBatches",
    "any_live_statement",
    "append_batch",
    "pop_statement",
]
