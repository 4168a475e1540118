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
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Insert,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
    true,
    union_all,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import INT64_MAX, TranscriptEntry
from ..direct_statement import execute_compiled
from ..rows import read_columns, to_models
from ..tables import sessions
from ..tables import transcript_entries as live
from .fenced_append import (
    _PG_TOUCH,
    _PG_TOUCH_WITH_TOKENS,
    _TOUCH,
    _TOUCH_WITH_TOKENS,
    APPENDS_VIEW,
    INSERT_COLUMNS,
    NEWEST_LIVE,
    _refuse_overflow,
    contended,
    floored,
    newest_live_params,
    touch_params,
)

# Rows per INSERT: far below PostgreSQL's 32,767 bind parameters and SQLite's 32,766 (an
# SQLite before 3.32 allows 999 per statement).
CHUNK_ROWS = 500 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999 // len(INSERT_COLUMNS)
_NAMES = [c.name for c in INSERT_COLUMNS]
CONTENDED_TRIES = 1000


def _bind(row: int, name: str) -> Any:
    return bindparam(f"r{row}_{name}", type_=live.c[name].type)


def _given_rows(rows: int) -> Any:
    """The batch's values as a derived table ``v`` (``ord``, then the row's columns): a
    UNION ALL of one-row SELECTs of bound parameters, one statement shape per size."""
    selects = [
        select(literal_column(str(n)).label("ord"), *(_bind(n, c).label(c) for c in _NAMES))
        for n in range(rows)
    ]
    return (union_all(*selects) if rows > 1 else selects[0]).subquery("v")


@functools.lru_cache(maxsize=64)
def _batch(dialect: str, rows: int, *, tokens: bool, touch: bool, floor: bool) -> Insert:
    """``rows`` rows inserted in order (``ord``), each ``created_at`` floored (``floor``)
    to the generation's newest live one. PostgreSQL: fed by the fenced touch as a CTE
    (``touch``; a later chunk of a batch, whose first chunk holds the session row, by the
    session row itself). SQLite: the caller touched the session row first."""
    given = _given_rows(rows)
    columns = [given.c[name] for name in _NAMES]
    if floor:
        at = _NAMES.index("created_at")
        columns[at] = floored(
            dialect, given.c.created_at, bindparam("fence_key"), bindparam("fence_session_id")
        ).label("created_at")
    source: Any = select(*columns)
    if dialect == "postgresql":
        if touch:
            fence: Any = (
                (_PG_TOUCH_WITH_TOKENS if tokens else _PG_TOUCH)
                .returning(sessions.c.session_key)
                .cte("fence")
            )
        else:
            fence = (
                select(sessions.c.session_key)
                .where(sessions.c.session_key == bindparam("fence_key"))
                .cte("fence")
            )
        source = source.select_from(given.join(fence, true()))
    else:
        source = source.select_from(given)
    stmt = insert(live).from_select(_NAMES, source.order_by(given.c.ord))
    return stmt.returning(live.c.id, live.c.created_at) if floor else stmt


# SQLite's batch in one statement (revision 0008's view, as one append): a multi-row INSERT
# into ``transcript_appends``, whose INSTEAD OF trigger runs once per row in order, each
# row fenced on its own (a refused row raises IGNORE, which skips that row only). The first
# row carries the whole batch's token delta and its ceiling, the others none, so
# ``total_tokens`` grows by the batch's delta once, as the transaction's touch does. A
# stale fence refuses every row; a delta past the ceiling only the first: the caller, in
# the transaction still, sees fewer rows than it sent and rolls back (the COMMIT folded
# into the statement's hop requires every row: ``commit_with_next(rows=...)``). Each row
# comes back as stored, by subqueries correlated with it (an uncorrelated one SQLite
# evaluates once for every row): the key's largest id, which is the row's (the statement
# holds the write lock; ids are AUTOINCREMENT), and its ``created_at`` (the trigger raised
# it to the order floor).
# (Written out: SQLAlchemy renders a RETURNING clause's columns without their table.)
_ROW_KEY: ColumnElement[Any] = literal_column(f"{APPENDS_VIEW.name}.session_key")
_STORED = live.alias("stored")
_ROW_ID = select(func.max(_STORED.c.id)).where(_STORED.c.session_key == _ROW_KEY).scalar_subquery()
_ROW_CREATED_AT = (
    select(_STORED.c.created_at)
    .where(_STORED.c.session_key == _ROW_KEY, _STORED.c.id == _ROW_ID)
    .scalar_subquery()
)


@functools.lru_cache(maxsize=64)
def _view_batch(rows: int) -> Insert:
    """``rows`` rows into the append view, in order, returning ``(id, created_at)`` each."""
    later: dict[str, Any] = {
        "token_delta": literal_column("0"),
        "tokens_ceiling": literal_column(str(INT64_MAX)),
    }
    values = []
    for n in range(rows):
        row: dict[str, Any] = {name: _bind(n, name) for name in _NAMES}
        row["fence_epoch"] = bindparam("fence_epoch")
        row["touched_at"] = bindparam("touched_at")
        row["order_floor"] = literal_column("1")
        if n == 0:
            row["token_delta"] = bindparam("token_delta")
            row["tokens_ceiling"] = bindparam("tokens_ceiling")
        else:
            row.update(later)
        values.append(row)
    return insert(APPENDS_VIEW).values(values).returning(_ROW_ID, _ROW_CREATED_AT)


def pg_batch(
    entries: Sequence[TranscriptEntry], *, expected_epoch: int, now: int, token_delta: int
) -> tuple[Insert, dict[str, Any]]:
    """PostgreSQL's batch of up to :data:`CHUNK_ROWS` entries as one statement (the fenced
    touch feeding the INSERT as a CTE) and its parameters by bind name: ``(id,
    created_at)`` per row, or no row when the fence refused (or the session row changed
    while the statement waited for it: ``contended``)."""
    params = touch_params(entries[0], expected_epoch, now, token_delta)
    params.update(_row_params(entries))
    stmt = _batch("postgresql", len(entries), tokens=bool(token_delta), touch=True, floor=True)
    return stmt, params


def view_batch(
    entries: Sequence[TranscriptEntry], *, expected_epoch: int, now: int, token_delta: int
) -> tuple[Insert, dict[str, Any]]:
    """SQLite's batch of up to :data:`CHUNK_ROWS` entries as one statement
    (:func:`_view_batch`) and its parameters by bind name."""
    params = _row_params(entries)
    params["fence_epoch"] = expected_epoch
    params["touched_at"] = now
    params["token_delta"] = token_delta
    params["tokens_ceiling"] = INT64_MAX - token_delta
    return _view_batch(len(entries)), params


def view_placed(rows: Sequence[Any], count: int) -> list[tuple[int, int]] | None:
    """The ``(id, created_at)`` of each of ``count`` rows :func:`view_batch` returned, in
    order, or ``None`` when the fence refused any (then nothing may commit)."""
    placed = [(int(row[0]), int(row[1])) for row in rows if row[0] is not None]
    if len(placed) != count:
        return None
    placed.sort()
    return placed


@functools.lru_cache(maxsize=CHUNK_ROWS + 1)
def _row_keys(row: int) -> tuple[str, ...]:
    """The bind names of row ``row``'s values (:func:`_bind`), in column order."""
    return tuple(f"r{row}_{name}" for name in _NAMES)


_ROW_VALUES = itemgetter(*_NAMES)


def _row_params(entries: Sequence[TranscriptEntry]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for n, entry in enumerate(entries):
        params.update(zip(_row_keys(n), _ROW_VALUES(entry.__dict__), strict=True))
    return params


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
    (:func:`_view_batch`: the touch inside it), so with ``ends_transaction`` the BEGIN,
    the statement and the COMMIT run in one thread hop."""
    first = entries[0]
    params = touch_params(first, expected_epoch, now, token_delta)
    chunks = [entries[at : at + CHUNK_ROWS] for at in range(0, len(entries), CHUNK_ROWS)]
    placed: list[tuple[int, int]] = []
    if conn.dialect.name == "postgresql":
        for index, chunk in enumerate(chunks):
            stmt = _batch(
                "postgresql", len(chunk), tokens=bool(token_delta), touch=index == 0, floor=True
            )
            bound = {**params, **_row_params(chunk)}
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
                **_row_params(chunk),
            }
            stmt = _batch("sqlite", len(chunk), tokens=False, touch=False, floor=True)
            if ends_transaction and index == len(chunks) - 1:
                _commit_with_next(conn)
            rows = execute_compiled(conn, stmt, bound).all()
            placed += sorted((int(r[0]), int(r[1])) for r in rows)
            continue
        newest = conn.execute(NEWEST_LIVE, newest_live_params(first)).scalar()
        floor = int(newest) if newest is not None else None
        at = [max(e.created_at, floor) if floor is not None else e.created_at for e in chunk]
        values = _row_params(chunk)
        for n, created_at in enumerate(at):
            values[f"r{n}_created_at"] = created_at
        stmt = _batch("sqlite", len(chunk), tokens=False, touch=False, floor=False)
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
        self,
        entries: Sequence[TranscriptEntry],
        *,
        expected_epoch: int,
        now: int,
        token_delta: int,
        returning: bool,
        ends_transaction: bool = False,
        through_view: bool = False,
    ) -> list[tuple[int, int]] | None:
        """:func:`append_batch` on this connection (one crossing into the greenlet)."""
        return await self.conn.run_sync(
            append_batch,
            entries,
            expected_epoch=expected_epoch,
            now=now,
            token_delta=token_delta,
            returning=returning,
            ends_transaction=ends_transaction,
            through_view=through_view,
        )

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
    "TranscriptBatches",
    "any_live_statement",
    "append_batch",
    "pg_batch",
    "pop_statement",
    "view_batch",
    "view_placed",
]
