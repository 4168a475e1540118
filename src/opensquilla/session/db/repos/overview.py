"""Read-only statements for the operator tools: store counts and deletion previews.

A preview selects exactly what the deleting statement would (same filters, same order) and
counts the rows that would go with it, without changing anything.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select, true

from ...models import SessionNode, SessionSummary
from ...models.reports import DeletionPreview, StoreCounts
from ..routing import cross_session
from ..rows import select_rows, to_model, to_models
from ..tables import (
    OWNED_TABLES,
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)
from .repository import Repository
from .sessions import RETENTION_ORDER, owned_rows
from .summaries import DEGRADED_STATUSES


def _count_of(table: Any, *where: Any) -> Select[Any]:
    return select(func.count()).select_from(table).where(*where)


class OverviewRepository(Repository):
    """Whole-store reads for operators (counts, deletion previews); bound to one connection."""

    __slots__ = ()

    async def _count(self, query: Select[Any]) -> int:
        return int((await self.conn.execute(query)).scalar_one() or 0)

    async def store_counts(self) -> StoreCounts:
        """The store's counts (``stats``: over every session, it fans out under
        distribution)."""
        with cross_session("stats"):
            return await self._store_counts()

    async def _store_counts(self) -> StoreCounts:
        archive = compacted_transcript_entries
        by_status = select(session_summaries.c.flush_receipt_status, func.count()).group_by(
            session_summaries.c.flush_receipt_status
        )
        statuses = {
            str(status): int(n)
            for status, n in sorted(
                (await self.conn.execute(by_status)).all(), key=lambda r: str(r[0])
            )
        }
        content_chars = select(func.coalesce(func.sum(func.length(archive.c.content)), 0))
        states = session_context_states
        return StoreCounts(
            sessions=await self._count(_count_of(sessions)),
            live_entries=await self._count(_count_of(transcript_entries)),
            archived_entries=await self._count(_count_of(archive)),
            archived_content_chars=await self._count(content_chars),
            summaries_by_flush_status=statuses,
            degraded_queue=sum(n for status, n in statuses.items() if status in DEGRADED_STATUSES),
            context_states=await self._count(_count_of(states)),
            valid_context_states=await self._count(_count_of(states, states.c.valid == true())),
        )

    async def _sessions_preview(self, selection: Select[Any]) -> DeletionPreview:
        """The sessions ``selection`` picks and the rows a cascade delete of them removes:
        exactly the rows :func:`.sessions.owned_rows` selects for the delete (every row under
        their keys, of every generation, and every row carrying their current ids)."""
        nodes = to_models(SessionNode, self.conn.dialect.name, await self.conn.execute(selection))
        if not nodes:
            return DeletionPreview()
        picked = selection.subquery("picked")
        ids = select(picked.c.session_id)
        keys = select(picked.c.session_key)
        rows = {
            table.name: sum(
                [
                    await self._count(_count_of(table, owned))
                    for owned in owned_rows(table, keys, ids)
                ]
            )
            for table in OWNED_TABLES
        }
        return DeletionPreview(sessions=tuple(nodes), rows=rows)

    async def preview_prune(self, updated_before: int) -> DeletionPreview:
        """What ``prune_stale(updated_before)`` would delete now (``retention``)."""
        selection = (
            select_rows(sessions, self.conn)
            .where(sessions.c.updated_at < updated_before)
            .order_by(*RETENTION_ORDER)
        )
        with cross_session("retention"):
            return await self._sessions_preview(selection)

    async def preview_cap(self, max_entries: int) -> DeletionPreview:
        """What ``cap_sessions(max_entries)`` would delete now: the least recently updated
        sessions beyond ``max_entries`` (``retention``)."""
        excess = await self._count(_count_of(sessions)) - max_entries
        if excess <= 0:
            return DeletionPreview()
        selection = select_rows(sessions, self.conn).order_by(*RETENTION_ORDER).limit(excess)
        with cross_session("retention"):
            return await self._sessions_preview(selection)

    async def preview_truncate(
        self, session_id: str, max_messages: int, *, session_key: str
    ) -> DeletionPreview:
        """What truncating one generation (stored under ``session_key``) to its newest
        ``max_messages`` live rows removes: the older live rows and, when anything is
        truncated, the whole compacted archive."""
        live = await self._count(
            _count_of(
                transcript_entries,
                transcript_entries.c.session_key == session_key,
                transcript_entries.c.session_id == session_id,
            )
        )
        if live <= max_messages:
            return DeletionPreview(
                rows={transcript_entries.name: 0, compacted_transcript_entries.name: 0}
            )
        archived = await self._count(
            _count_of(
                compacted_transcript_entries,
                compacted_transcript_entries.c.session_key == session_key,
                compacted_transcript_entries.c.session_id == session_id,
            ),
        )
        return DeletionPreview(
            rows={
                transcript_entries.name: live - max_messages,
                compacted_transcript_entries.name: archived,
            }
        )

    async def preview_reset(self, session_key: str, session_id: str) -> DeletionPreview:
        """What a reset of the generation ``session_id`` removes (its transcript, archive and
        summaries stored under ``session_key``) and how many of the key's context states it
        invalidates."""
        rows = {
            table.name: await self._count(
                _count_of(
                    table, table.c.session_key == session_key, table.c.session_id == session_id
                )
            )
            for table in (transcript_entries, compacted_transcript_entries, session_summaries)
        }
        states = session_context_states
        valid = await self._count(
            _count_of(states, states.c.session_key == session_key, states.c.valid == true())
        )
        return DeletionPreview(rows=rows, invalidated_context_states=valid)

    async def summary_by_id(self, summary_id: int) -> SessionSummary | None:
        """An operator's read by row id (``listing``: by id alone it fans out under
        distribution)."""
        query = select_rows(session_summaries, self.conn).where(
            session_summaries.c.id == summary_id
        )
        with cross_session("listing"):
            row = (await self.conn.execute(query)).first()
        return to_model(SessionSummary, row, self.conn.dialect.name) if row is not None else None
