"""Statements on ``sessions``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import and_, case, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ...errors import StaleGenerationError
from ...models import SessionNode
from ..rows import read_columns, select_rows, to_model, to_models, values_of
from ..sql import insert_for
from ..tables import (
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)

Lock = Literal["share", "update"] | None

ACTIVITY_ORDER = (sessions.c.updated_at.desc(), sessions.c.session_key.desc())
RETENTION_ORDER = (sessions.c.updated_at, sessions.c.created_at, sessions.c.session_key)


async def get(conn: AsyncConnection, key: str, *, lock: Lock = None) -> SessionNode | None:
    query = select_rows(sessions, conn).where(sessions.c.session_key == key)
    if lock is not None:
        query = query.with_for_update(read=lock == "share")
    row = (await conn.execute(query)).first()
    return to_model(SessionNode, row, conn.dialect.name) if row is not None else None


@functools.cache
def _insert_if_absent(dialect_name: str) -> Any:
    return insert_for(dialect_name, sessions).on_conflict_do_nothing(
        index_elements=[sessions.c.session_key]
    )


@functools.cache
def _generation_checked_upsert(dialect_name: str) -> Any:
    """Whole-row insert-or-update, applied only to the same or an older generation."""
    stmt = insert_for(dialect_name, sessions)
    excluded = stmt.excluded
    return stmt.on_conflict_do_update(
        index_elements=[sessions.c.session_key],
        set_={c.name: excluded[c.name] for c in sessions.columns if c.name != "session_key"},
        where=or_(
            sessions.c.epoch < excluded.epoch,
            and_(
                sessions.c.epoch == excluded.epoch,
                sessions.c.session_id == excluded.session_id,
            ),
        ),
    )


async def insert_new(conn: AsyncConnection, node: SessionNode) -> bool:
    """Insert ``node``; ``False`` (and no change) when the key is already taken."""
    result = await conn.execute(_insert_if_absent(conn.dialect.name), values_of(node, sessions))
    return bool(result.rowcount)


async def upsert(conn: AsyncConnection, node: SessionNode) -> None:
    """Whole-row insert-or-update, refused when ``node`` is an older generation.

    The update applies when the stored row is the same generation (same ``session_id`` and
    epoch) or an older epoch. A node read before a reset (lower epoch) or one of another
    generation at the same epoch is refused, so it can neither lower the epoch nor restore
    an old ``session_id``.
    """
    result = await conn.execute(
        _generation_checked_upsert(conn.dialect.name), values_of(node, sessions)
    )
    if result.rowcount:
        return
    stored = await get(conn, node.session_key)
    raise StaleGenerationError(
        f"Stale write for {node.session_key}: the node is generation {node.session_id} at "
        f"epoch {node.epoch}, the stored session is generation "
        f"{stored.session_id if stored else None} at epoch {stored.epoch if stored else None}"
    )


async def update_fields(
    conn: AsyncConnection, key: str, values: dict[str, Any]
) -> SessionNode | None:
    """Set only ``values`` on the row (no read-modify-write); the new row, or ``None``."""
    stmt = update(sessions).where(sessions.c.session_key == key).values(values)
    row = (await conn.execute(stmt.returning(*read_columns(sessions, conn.dialect.name)))).first()
    return to_model(SessionNode, row, conn.dialect.name) if row is not None else None


async def finish(conn: AsyncConnection, key: str, status: str, now: int) -> SessionNode | None:
    started = sessions.c.started_at
    runtime = case(
        (and_(started.is_not(None), started != 0), now - started),
        else_=sessions.c.runtime_ms,
    )
    stmt = (
        update(sessions)
        .where(sessions.c.session_key == key)
        .values(status=status, ended_at=now, updated_at=now, runtime_ms=runtime)
        .returning(*read_columns(sessions, conn.dialect.name))
    )
    row = (await conn.execute(stmt)).first()
    return to_model(SessionNode, row, conn.dialect.name) if row is not None else None


async def list_sessions(
    conn: AsyncConnection,
    *,
    agent_id: str | None,
    status: str | None,
    spawned_by: str | None,
    parent_session_key: str | None,
    limit: int | None,
    offset: int,
) -> list[SessionNode]:
    query = select_rows(sessions, conn)
    if agent_id is not None:
        query = query.where(sessions.c.agent_id == agent_id)
    if status is not None:
        query = query.where(sessions.c.status == status)
    if spawned_by is not None:
        query = query.where(sessions.c.spawned_by == spawned_by)
    if parent_session_key is not None:
        query = query.where(sessions.c.parent_session_key == parent_session_key)
    query = query.order_by(*ACTIVITY_ORDER).offset(offset)
    if limit is not None:
        query = query.limit(limit)
    return to_models(SessionNode, conn.dialect.name, await conn.execute(query))


async def count(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(sessions))).scalar_one())


async def get_epoch(conn: AsyncConnection, key: str) -> int | None:
    query = select(sessions.c.epoch).where(sessions.c.session_key == key)
    value = (await conn.execute(query)).scalar_one_or_none()
    return int(value) if value is not None else None


async def increment_epoch(conn: AsyncConnection, key: str) -> int | None:
    stmt = (
        update(sessions)
        .where(sessions.c.session_key == key)
        .values(epoch=sessions.c.epoch + 1)
        .returning(sessions.c.epoch)
    )
    value = (await conn.execute(stmt)).scalar_one_or_none()
    return int(value) if value is not None else None


async def oldest_keys(
    conn: AsyncConnection, limit: int, *, updated_before: int | None = None
) -> list[str]:
    """Keys in retention order (least recently updated first)."""
    query = select(sessions.c.session_key)
    if updated_before is not None:
        query = query.where(sessions.c.updated_at < updated_before)
    query = query.order_by(*RETENTION_ORDER).limit(limit)
    return list((await conn.execute(query)).scalars())


async def delete_cascade(
    conn: AsyncConnection, keys: Sequence[str], *, updated_before: int | None = None
) -> list[str]:
    """Delete sessions and everything they own; returns the keys actually deleted.

    The session rows go first: on Postgres that locks them, so an append or branch racing
    this delete either committed before (and its rows are deleted here too) or finds the
    session gone. ``updated_before`` re-checks staleness inside the transaction.
    """
    if not keys:
        return []
    stmt = delete(sessions).where(sessions.c.session_key.in_(list(keys)))
    if updated_before is not None:
        stmt = stmt.where(sessions.c.updated_at < updated_before)
    rows = (await conn.execute(stmt.returning(sessions.c.session_key, sessions.c.session_id))).all()
    if not rows:
        return []
    deleted_keys = [row.session_key for row in rows]
    session_ids = [row.session_id for row in rows]
    for table in (transcript_entries, compacted_transcript_entries, session_summaries):
        await conn.execute(delete(table).where(table.c.session_id.in_(session_ids)))
    await conn.execute(
        delete(session_context_states).where(session_context_states.c.session_key.in_(deleted_keys))
    )
    return deleted_keys
