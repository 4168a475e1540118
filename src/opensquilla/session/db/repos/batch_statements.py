"""The batch append's statements (issue 28, ``transcript_batches``): a multi-row INSERT of
``rows`` rows from bound values, each defaulted ``created_at`` floored to the generation's
newest live one (PostgreSQL: fed by the fenced touch as a CTE), and SQLite's batch as one
statement into revision 0008's append view; each built once per size and shape.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Insert,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    true,
    union_all,
)

from ...models import INT64_MAX, TranscriptEntry
from ..tables import sessions
from ..tables import transcript_entries as live
from .fenced_append import (
    _PG_TOUCH,
    _PG_TOUCH_WITH_TOKENS,
    APPENDS_VIEW,
    INSERT_COLUMNS,
    floored,
    touch_params,
)

_NAMES = [c.name for c in INSERT_COLUMNS]


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
def batch_insert(dialect: str, rows: int, *, tokens: bool, touch: bool, floor: bool) -> Insert:
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
    params.update(row_params(entries))
    stmt = batch_insert(
        "postgresql", len(entries), tokens=bool(token_delta), touch=True, floor=True
    )
    return stmt, params


def view_batch(
    entries: Sequence[TranscriptEntry], *, expected_epoch: int, now: int, token_delta: int
) -> tuple[Insert, dict[str, Any]]:
    """SQLite's batch of up to :data:`CHUNK_ROWS` entries as one statement
    (:func:`_view_batch`) and its parameters by bind name."""
    params = row_params(entries)
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


@functools.lru_cache(maxsize=1024)
def _row_keys(row: int) -> tuple[str, ...]:
    """The bind names of row ``row``'s values (:func:`_bind`), in column order."""
    return tuple(f"r{row}_{name}" for name in _NAMES)


_ROW_VALUES = itemgetter(*_NAMES)


def row_params(entries: Sequence[TranscriptEntry]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for n, entry in enumerate(entries):
        params.update(zip(_row_keys(n), _ROW_VALUES(entry.__dict__), strict=True))
    return params
