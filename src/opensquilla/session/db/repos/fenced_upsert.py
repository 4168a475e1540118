"""The append by message id (docs/semantics.md#message-id), inside a write transaction:
the fenced touch of ``db/repos/fenced_append.py`` first, then the generation's live row with
that id replaced in place, or a new row inserted and counted."""

from __future__ import annotations

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from ...models import TranscriptEntry
from ..rows import values_of
from ..tables import transcript_entries as live
from .fenced_append import (
    _TOUCH,
    _TOUCH_WITH_TOKENS,
    _refuse_overflow,
    insert_floored,
    touch_params,
)

_REPLACED_COLUMNS = [c for c in live.columns if c.name not in ("id", "created_at")]
_FIND_LIVE_MESSAGE = (
    select(live.c.id, live.c.created_at)
    .where(
        live.c.session_key == bindparam("find_session_key"),
        live.c.session_id == bindparam("find_session_id"),
        live.c.message_id == bindparam("find_message_id"),
    )
    .order_by(live.c.id.asc())
    .limit(1)
)
_REPLACE_ENTRY = (
    update(live)
    .where(live.c.session_key == bindparam("row_key"), live.c.id == bindparam("row_id"))
    .values({c.name: bindparam("v_" + c.name, type_=c.type) for c in _REPLACED_COLUMNS})
)


def upsert_and_touch(
    conn: Connection,
    entry: TranscriptEntry,
    *,
    expected_epoch: int,
    now: int,
    token_delta: int,
) -> tuple[int, int, bool] | None:
    """Write ``entry`` as the live row of its generation with its ``message_id``, inside
    the caller's write transaction: ``(id, created_at, inserted)`` of that row, or ``None``
    when the fence refused (nothing written).

    The fenced touch of ``updated_at`` comes first: on Postgres that UPDATE locks the
    session row until the commit, so concurrent upserts of one generation queue there and
    each looks the id up only after the previous one committed (on SQLite the write
    transaction began with ``BEGIN IMMEDIATE``, which serialises them already). The lowest
    live row with the id is then replaced in place (every column but ``id`` and
    ``created_at``; the token counters are left alone, a replay never counts twice), or a
    new row is inserted and ``total_tokens + delta`` counted, ``total_tokens_fresh`` false.
    """
    params = touch_params(entry, expected_epoch, now, token_delta)
    if not conn.execute(_TOUCH, params).rowcount:
        return None
    found = conn.execute(
        _FIND_LIVE_MESSAGE,
        {
            "find_session_key": entry.session_key,
            "find_session_id": entry.session_id,
            "find_message_id": entry.message_id,
        },
    ).first()
    values = values_of(entry, live)
    if found is not None:
        replaced = {"v_" + c.name: values[c.name] for c in _REPLACED_COLUMNS}
        conn.execute(_REPLACE_ENTRY, {"row_key": entry.session_key, "row_id": found.id, **replaced})
        return int(found.id), int(found.created_at), False
    if token_delta and not conn.execute(_TOUCH_WITH_TOKENS, params).rowcount:
        _refuse_overflow(conn, params, token_delta)  # the fence held a moment ago: raises
        return None  # (unreachable while the session row is locked) never insert uncounted
    new_id, created_at = insert_floored(conn, entry)
    return new_id, created_at, True
