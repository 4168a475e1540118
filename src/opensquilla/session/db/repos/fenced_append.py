"""The fenced append, the hot path of every turn (docs/semantics.md#fencing).

An append carries the generation it was meant for: the session row must still hold that
key, epoch and session id, and the insert and the session touch (``updated_at``,
``total_tokens + delta``) happen together or not at all. The statements are built once,
compiled once and bound per call.

Both backends append in one statement, run in autocommit (``uow.append_in_one_statement``,
one round trip or one thread hop): Postgres feeds the INSERT from the fenced UPDATE as a CTE;
SQLite, which has no DML in a CTE, inserts into the ``transcript_appends`` view, whose
``INSTEAD OF`` trigger (revision 0008) runs the fenced UPDATE and then the INSERT, or
nothing. On an SQLite without ``RETURNING`` the append is three statements inside a write
transaction instead, and so on a database without the view (a store opened without
migrating, at a revision before 0008): the caller decides (``uow.appends_in_one_statement``)
and passes ``one_statement``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, TypedDict

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Update,
    bindparam,
    column,
    false,
    func,
    insert,
    literal,
    literal_column,
    select,
    table,
    text,
    update,
)
from sqlalchemy.engine import Connection

from ...errors import InvalidInputError
from ...models import INT64_MAX, TranscriptEntry
from ...models.messages import defaulted_created_at
from ..rows import values_of
from ..tables import sessions
from ..tables import transcript_entries as live


class Fence(TypedDict):
    """The fenced touch of one append or batch, declared once for every layer that passes
    it on (``**fence: Unpack[Fence]``): the epoch the session row must still hold, its new
    ``updated_at`` (``now``), and what ``total_tokens`` grows by."""

    expected_epoch: int
    now: int
    token_delta: int


INSERT_COLUMNS = [c for c in live.columns if c.name != "id"]
_INSERT_NAMES = tuple(c.name for c in INSERT_COLUMNS)


def bound_row(entry: TranscriptEntry) -> list[ColumnElement[Any]]:
    """The entry's values as typed bind parameters, in table column order (without id)."""
    data = entry.__dict__
    return [literal(data[c.name], type_=c.type).label(c.name) for c in INSERT_COLUMNS]


def fence(prefix: str = "fence_") -> ColumnElement[bool]:
    """The session row of the generation an entry is fenced to: key, epoch and session id
    (a session deleted and re-created under the same key starts again at epoch 0)."""
    return (
        (sessions.c.session_key == bindparam(prefix + "key"))
        & (sessions.c.epoch == bindparam(prefix + "epoch"))
        & (sessions.c.session_id == bindparam(prefix + "session_id"))
    )


INSERT_ENTRY = live.insert()
_TOUCH = update(sessions).where(fence()).values(updated_at=bindparam("touched_at"))
# ``total_tokens`` must stay a 64-bit integer: SQLite would silently turn an overflowing sum
# into a REAL, Postgres raise "bigint out of range". The fence therefore also requires room
# for the delta (``tokens_ceiling`` = INT64_MAX - delta, computed in Python); a refused
# fence is told apart from a stale one only on that (rare) path, see _refuse_overflow.
_TOUCH_WITH_TOKENS = (
    update(sessions)
    .where(fence() & (sessions.c.total_tokens <= bindparam("tokens_ceiling")))
    .values(
        updated_at=bindparam("touched_at"),
        total_tokens=sessions.c.total_tokens + bindparam("token_delta"),
        total_tokens_fresh=false(),
    )
)


# PostgreSQL's one-statement appends read the order floor from the statement's snapshot.
# Should another transaction change the session row (an append's touch) while this one
# waits for its lock, that snapshot misses its entry: the touch then also requires the row
# version the snapshot saw (``xmin``, rechecked on the latest version after the wait), so
# it refuses instead, and the caller runs the statement again on a new snapshot
# (docs/semantics.md#order; ``contended`` below).
_SNAPSHOT_ROW = sessions.alias("snapshot_row")
_UNCHANGED = literal_column("sessions.xmin") == (
    select(literal_column("snapshot_row.xmin"))
    .select_from(_SNAPSHOT_ROW)
    .where(_SNAPSHOT_ROW.c.session_key == bindparam("fence_key"))
    .scalar_subquery()
)
_PG_TOUCH = update(sessions).where(fence() & _UNCHANGED).values(updated_at=bindparam("touched_at"))
_PG_TOUCH_WITH_TOKENS = (
    update(sessions)
    .where(fence() & _UNCHANGED & (sessions.c.total_tokens <= bindparam("tokens_ceiling")))
    .values(
        updated_at=bindparam("touched_at"),
        total_tokens=sessions.c.total_tokens + bindparam("token_delta"),
        total_tokens_fresh=false(),
    )
)


def newest_live(session_key: ColumnElement[Any], session_id: ColumnElement[Any]) -> Any:
    """The newest live ``created_at`` of a generation (``NULL`` for none), as a scalar
    subquery: the order floor (docs/semantics.md#order), answered by the cursor index, and
    by the key (docs/scaling.md#keys-and-statements) on one session's partition or shard.

    The last row in ``created_at`` order, not ``max(created_at)``: SQLite answers a
    ``max()`` from the end of an index only when the index covers every predicate, and the
    cursor index ``(session_id, created_at, id)`` does not hold ``session_key``, so the
    ``max()`` read each of the generation's rows (O(n); 0.9 ms at 100,000 entries). The
    index walked backwards stops at the first row, whose key the predicate then checks
    (PostgreSQL plans both forms as that backward scan)."""
    return (
        select(live.c.created_at)
        .where(live.c.session_key == session_key, live.c.session_id == session_id)
        .order_by(live.c.created_at.desc())
        # Written into the SQL (SQLite's compiler adds an OFFSET): a bound limit would take
        # the batch's plan off its by-name values (db/direct_statement.py).
        .limit(literal_column("1"))
        .offset(literal_column("0"))
        .scalar_subquery()
    )


NEWEST_LIVE = select(newest_live(bindparam("floor_session_key"), bindparam("floor_session_id")))


def newest_live_params(entry: TranscriptEntry) -> dict[str, Any]:
    """The bind parameters of :data:`NEWEST_LIVE` for ``entry``'s generation."""
    return {"floor_session_key": entry.session_key, "floor_session_id": entry.session_id}


def floored(
    dialect: str,
    created_at: ColumnElement[Any],
    session_key: ColumnElement[Any],
    session_id: ColumnElement[Any],
) -> Any:
    """``created_at`` raised to the generation's newest live one, on ``dialect``."""
    if dialect == "postgresql":
        return pg_floored(created_at, session_key, session_id)
    # SQLite's two-argument max() is NULL when either is: an empty generation keeps its own.
    return func.max(created_at, func.coalesce(newest_live(session_key, session_id), created_at))


def pg_floored(
    created_at: ColumnElement[Any], session_key: ColumnElement[Any], session_id: ColumnElement[Any]
) -> Any:
    """PostgreSQL: ``created_at`` raised to the generation's newest live one (``GREATEST``
    ignores the ``NULL`` of an empty generation)."""
    return func.greatest(created_at, newest_live(session_key, session_id))


def _insert_from_fence(touch: Update, floor: bool) -> Any:
    """INSERT fed by the fenced UPDATE as a CTE: Postgres appends in one statement; with
    ``floor`` a defaulted ``created_at`` is raised to the order floor in that statement."""
    fence = touch.returning(sessions.c.session_key).cte("fence")
    # Bind names must not be column names of `sessions`: the UPDATE would take them as SETs.
    binds = {c.name: bindparam("v_" + c.name, type_=c.type) for c in INSERT_COLUMNS}
    if floor:
        binds["created_at"] = pg_floored(
            binds["created_at"], binds["session_key"], binds["session_id"]
        )
    source = select(*binds.values()).select_from(fence)
    return (
        live.insert()
        .from_select([c.name for c in INSERT_COLUMNS], source)
        .returning(live.c.id, live.c.created_at)
    )


# (with tokens, floored) -> the statement
_PG_APPENDS = {
    (tokens, floor): _insert_from_fence(_PG_TOUCH_WITH_TOKENS if tokens else _PG_TOUCH, floor)
    for tokens in (False, True)
    for floor in (False, True)
}

# SQLite (revision 0008): the view's INSTEAD OF trigger fences, touches and inserts, or
# raises IGNORE, which abandons the statement and its RETURNING row. So a returned row
# means inserted, and its value is the new id: the statement holds the write lock and ids
# are AUTOINCREMENT, so the new row has the table's largest id (``last_insert_rowid()``
# and the cursor's rowcount do not see through the trigger).
# ``order_floor`` (revision 0009): 1 raises a defaulted ``created_at`` to the generation's
# newest live one, inside the trigger.
FENCE_COLUMNS = ("fence_epoch", "touched_at", "token_delta", "tokens_ceiling", "order_floor")
APPENDS_VIEW = table(
    "transcript_appends",
    *(column(c.name, c.type) for c in INSERT_COLUMNS),
    *(column(name, BigInteger()) for name in FENCE_COLUMNS),
)
# The new row's ``created_at`` too, as stored (the trigger may have raised it). Both read
# by the session's key (``:newest_key``, its value bound once more: a bind cannot share a
# column's name), so the statement carries it like every statement on a session's rows;
# the key's largest id is the table's then, and ``idx_transcript_session_key`` (whose
# entries end in the row id) answers ``max(id)`` with one probe.
_NEWEST_KEY = bindparam("newest_key", type_=live.c.session_key.type)
_NEWEST_ID = select(func.max(live.c.id)).where(live.c.session_key == _NEWEST_KEY).scalar_subquery()
_SQLITE_APPEND = insert(APPENDS_VIEW).returning(
    _NEWEST_ID,
    select(live.c.created_at)
    .where(live.c.session_key == _NEWEST_KEY, live.c.id == _NEWEST_ID)
    .scalar_subquery(),
)

# RETURNING came with SQLite 3.35.0; its fixes (one on a view's RETURNING among them) with
# 3.35.1-3.35.5. An older library (Debian 11, Ubuntu 20.04, RHEL 8 system Pythons) appends
# in three statements in a write transaction. Tests set this to force that path.
SQLITE_ONE_STATEMENT = sqlite3.sqlite_version_info >= (3, 35, 5)


# A catalog read, not a statement on the view: its name is a parameter.
APPEND_VIEW_EXISTS = text(
    "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = :view_name"
).bindparams(view_name=APPENDS_VIEW.name)


def fence_params(entry: TranscriptEntry, expected_epoch: int) -> dict[str, Any]:
    return {
        "fence_key": entry.session_key,
        "fence_epoch": expected_epoch,
        "fence_session_id": entry.session_id,
    }


def touch_params(
    entry: TranscriptEntry, expected_epoch: int, now: int, token_delta: int
) -> dict[str, Any]:
    """The bind parameters of the fenced touch, the token delta's included (checked at the
    front door: an int from 0 to INT64_MAX)."""
    params = fence_params(entry, expected_epoch)
    params["touched_at"] = now
    if token_delta:
        params["token_delta"] = token_delta
        params["tokens_ceiling"] = INT64_MAX - token_delta
    return params


def append_and_touch(
    conn: Connection,
    entry: TranscriptEntry,
    *,
    expected_epoch: int,
    now: int,
    token_delta: int,
) -> tuple[int, int] | None:
    """The manager's append in three statements, inside the caller's write transaction,
    where it cannot be one (``uow.appends_in_one_statement``): the fenced UPDATE, then the
    INSERT, the order floor read in between (under the write lock) when ``created_at`` was
    defaulted. Synchronous, for ``AsyncConnection.run_sync`` (one crossing into
    SQLAlchemy's asyncio bridge, not one per statement). ``(id, created_at)`` of the new
    row as stored, or ``None`` when the fence refused."""
    params = touch_params(entry, expected_epoch, now, token_delta)
    touch = _TOUCH_WITH_TOKENS if token_delta else _TOUCH
    if not conn.execute(touch, params).rowcount:
        if token_delta:
            _refuse_overflow(conn, params, token_delta)
        return None
    return insert_floored(conn, entry)


def insert_floored(conn: Connection, entry: TranscriptEntry) -> tuple[int, int]:
    """Insert ``entry`` inside the caller's write transaction, which already holds the
    session row (the fenced touch came first: SQLite's write lock, PostgreSQL's row lock);
    a defaulted ``created_at`` is first raised to the generation's newest live one, read
    in its own statement (on PostgreSQL a new snapshot, so it sees every committed
    append). ``(id, created_at)`` as stored; ``entry.created_at`` updated."""
    if defaulted_created_at(entry):
        newest = conn.execute(NEWEST_LIVE, newest_live_params(entry)).scalar()
        if newest is not None and newest > entry.created_at:
            entry.__dict__["created_at"] = int(newest)
    key = conn.execute(INSERT_ENTRY, values_of(entry, live)).inserted_primary_key
    assert key is not None
    return int(key[0]), entry.created_at


def run_one_statement(
    conn: Connection,
    statement: Any,
    params: dict[str, Any],
    *,
    entry: TranscriptEntry,
    expected_epoch: int,
    token_delta: int,
) -> tuple[int, int] | None:
    """The one-statement append built by :func:`one_statement_append`, on ``conn``:
    ``(id, created_at)`` of the new row as stored, or ``None`` when the fence refused (an
    overflow raised)."""
    row = conn.execute(statement, params).first()
    if row is None or row[0] is None:
        if token_delta:
            check_overflow(conn, entry, expected_epoch, token_delta)
        return None
    return int(row[0]), int(row[1])


def placed_rows(rows: Sequence[Any]) -> list[tuple[int, int]] | None:
    """The ``(id, created_at)`` rows a one-statement batch returned, in order, or ``None``
    for none (the fence refused)."""
    if not rows:
        return None
    return sorted((int(row[0]), int(row[1])) for row in rows)


def one_statement_append(
    dialect: str, entry: TranscriptEntry, *, expected_epoch: int, now: int, token_delta: int
) -> tuple[Any, dict[str, Any]]:
    """The one-statement append and its parameters (by bind name) on ``dialect``: the new
    row's id and ``created_at`` (as stored) as its returned row, or no row when the fence
    refused. A defaulted ``created_at`` (the caller gave none) is raised to the
    generation's newest live one inside the statement (docs/semantics.md#order)."""
    floor = defaulted_created_at(entry)
    if dialect == "postgresql":
        params = touch_params(entry, expected_epoch, now, token_delta)
        params.update({"v_" + name: value for name, value in values_of(entry, live).items()})
        return _PG_APPENDS[bool(token_delta), floor], params
    data = entry.__dict__
    row = {name: data[name] for name in _INSERT_NAMES}
    row["fence_epoch"] = expected_epoch
    row["touched_at"] = now
    row["token_delta"] = token_delta
    row["tokens_ceiling"] = INT64_MAX - token_delta
    row["order_floor"] = 1 if floor else 0
    row["newest_key"] = entry.session_key
    return _SQLITE_APPEND, row


def check_overflow(
    conn: Connection, entry: TranscriptEntry, expected_epoch: int, token_delta: int
) -> None:
    """After a refused one-statement append with ``token_delta``: raise when the generation
    is there but has no room for the delta; return when the fence was stale."""
    _refuse_overflow(conn, fence_params(entry, expected_epoch), token_delta)


def _refuse_overflow(conn: Connection, params: dict[str, Any], token_delta: int) -> None:
    """After a refused fenced touch: raise when the generation is there but its
    ``total_tokens`` has no room for ``token_delta``; return when the fence was stale (or,
    on PostgreSQL, the row changed while the statement waited for it)."""
    total = conn.execute(
        select(sessions.c.total_tokens).where(fence()),
        {name: params[name] for name in ("fence_key", "fence_epoch", "fence_session_id")},
    ).scalar_one_or_none()
    if total is None or total <= INT64_MAX - token_delta:
        return
    raise InvalidInputError(
        f"appending {token_delta} tokens would take total_tokens of {params['fence_key']} "
        f"({total}) past {INT64_MAX}, the largest value it can hold; nothing was written"
    )


def contended(conn: Connection, entry: TranscriptEntry, expected_epoch: int) -> bool:
    """After a refused one-statement append: whether the generation is still there (key,
    epoch and session id), so that the fence refused only because the session row changed
    while the statement waited (PostgreSQL): the caller runs it again."""
    found = conn.execute(
        select(sessions.c.session_key).where(fence()), fence_params(entry, expected_epoch)
    ).first()
    return found is not None
