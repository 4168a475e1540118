"""Read-only statements for the operator tools: store counts and deletion previews.

A preview selects exactly what the deleting statement would (same filters, same order) and
counts the rows that would go with it, without changing anything.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import SessionNode, SessionSummary
from ...operations import DeletionPreview, StoreCounts
from ..rows import select_rows, to_model, to_models
from ..tables import (
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)
from .sessions import CHILD_TABLES, RETENTION_ORDER, owned_rows
from .summaries import DEGRADED_STATUSES


async def _count(conn: AsyncConnection, query: Select[Any]) -> int:
    return int((await conn.execute(query)).scalar_one() or 0)


def _count_of(table: Any, *where: Any) -> Select[Any]:
    return select(func.count()).select_from(table).where(*where)


async def store_counts(conn: AsyncConnection) -> StoreCounts:
    archive = compacted_transcript_entries
    by_status = select(session_summaries.c.flush_receipt_status, func.count()).group_by(
        session_summaries.c.flush_receipt_status
    )
    statuses = {
        str(status): int(n)
        for status, n in sorted((await conn.execute(by_status)).all(), key=lambda r: str(r[0]))
    }
    content_chars = select(func.coalesce(func.sum(func.length(archive.c.content)), 0))
    states = session_context_states
    return StoreCounts(
        sessions=await _count(conn, _count_of(sessions)),
        live_entries=await _count(conn, _count_of(transcript_entries)),
        archived_entries=await _count(conn, _count_of(archive)),
        archived_content_chars=await _count(conn, content_chars),
        summaries_by_flush_status=statuses,
        degraded_queue=sum(n for status, n in statuses.items() if status in DEGRADED_STATUSES),
        context_states=await _count(conn, _count_of(states)),
        valid_context_states=await _count(conn, _count_of(states, states.c.valid == true())),
    )


async def _sessions_preview(conn: AsyncConnection, selection: Select[Any]) -> DeletionPreview:
    """The sessions ``selection`` picks and the rows a cascade delete of them removes:
    exactly the rows :func:`.sessions.owned_rows` selects for the delete (every row under
    their keys, of every generation, and every row carrying their current ids)."""
    nodes = to_models(SessionNode, conn.dialect.name, await conn.execute(selection))
    if not nodes:
        return DeletionPreview()
    picked = selection.subquery("picked")
    ids = select(picked.c.session_id)
    keys = select(picked.c.session_key)
    rows = {
        table.name: sum(
            [await _count(conn, _count_of(table, owned)) for owned in owned_rows(table, keys, ids)]
        )
        for table in CHILD_TABLES
    }
    return DeletionPreview(sessions=tuple(nodes), rows=rows)


async def preview_prune(conn: AsyncConnection, updated_before: int) -> DeletionPreview:
    """What ``prune_stale(updated_before)`` would delete now."""
    selection = (
        select_rows(sessions, conn)
        .where(sessions.c.updated_at < updated_before)
        .order_by(*RETENTION_ORDER)
    )
    return await _sessions_preview(conn, selection)


async def preview_cap(conn: AsyncConnection, max_entries: int) -> DeletionPreview:
    """What ``cap_sessions(max_entries)`` would delete now: the least recently updated
    sessions beyond ``max_entries``."""
    excess = await _count(conn, _count_of(sessions)) - max_entries
    if excess <= 0:
        return DeletionPreview()
    selection = select_rows(sessions, conn).order_by(*RETENTION_ORDER).limit(excess)
    return await _sessions_preview(conn, selection)


async def preview_truncate(
    conn: AsyncConnection, session_id: str, max_messages: int
) -> DeletionPreview:
    """What truncating one generation to its newest ``max_messages`` live rows removes:
    the older live rows and, when anything is truncated, the whole compacted archive."""
    live = await _count(
        conn, _count_of(transcript_entries, transcript_entries.c.session_id == session_id)
    )
    if live <= max_messages:
        return DeletionPreview(rows={"transcript_entries": 0, "compacted_transcript_entries": 0})
    archived = await _count(
        conn,
        _count_of(
            compacted_transcript_entries,
            compacted_transcript_entries.c.session_id == session_id,
        ),
    )
    return DeletionPreview(
        rows={
            "transcript_entries": live - max_messages,
            "compacted_transcript_entries": archived,
        }
    )


async def preview_reset(
    conn: AsyncConnection, session_key: str, session_id: str
) -> DeletionPreview:
    """What a reset of the generation ``session_id`` removes (transcript, archive,
    summaries) and how many of the key's context states it invalidates."""
    rows = {
        "transcript_entries": await _count(
            conn, _count_of(transcript_entries, transcript_entries.c.session_id == session_id)
        ),
        "compacted_transcript_entries": await _count(
            conn,
            _count_of(
                compacted_transcript_entries,
                compacted_transcript_entries.c.session_id == session_id,
            ),
        ),
        "session_summaries": await _count(
            conn, _count_of(session_summaries, session_summaries.c.session_id == session_id)
        ),
    }
    states = session_context_states
    valid = await _count(
        conn, _count_of(states, states.c.session_key == session_key, states.c.valid == true())
    )
    return DeletionPreview(rows=rows, invalidated_context_states=valid)


async def summary_by_id(conn: AsyncConnection, summary_id: int) -> SessionSummary | None:
    query = select_rows(session_summaries, conn).where(session_summaries.c.id == summary_id)
    row = (await conn.execute(query)).first()
    return to_model(SessionSummary, row, conn.dialect.name) if row is not None else None
