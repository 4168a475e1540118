"""A compaction's statements on one generation's transcript rows: the live positions it
planned on, the prefix it moves into ``compacted_transcript_entries`` and deletes, the rows
it drops, and the archive of one compaction (docs/semantics.md#compaction).

Every statement carries ``session_key`` beside ``session_id``
(docs/scaling.md#keys-and-statements), so a compaction of one session runs on one shard
under distribution (one partition of the partitioned layout).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, delete, select, tuple_

from ...models import CompactedTranscriptEntry
from ..rows import select_rows, to_models
from ..sql import copy_rows
from ..tables import compacted_transcript_entries as archive
from ..tables import transcript_entries as live
from .repository import Repository
from .transcript_reads import LIVE_ORDER


def _live_of(session_key: str, session_id: str) -> tuple[ColumnElement[bool], ...]:
    return live.c.session_key == session_key, live.c.session_id == session_id


def _through(
    session_key: str, session_id: str, boundary: tuple[int, int]
) -> tuple[ColumnElement[bool], ...]:
    """Live rows of generation ``session_id`` up to and including ``boundary`` =
    (created_at, id)."""
    return (
        *_live_of(session_key, session_id),
        tuple_(live.c.created_at, live.c.id) <= tuple_(*boundary),
    )


class CompactionRepository(Repository):
    """A compaction's statements on the live transcript and the compacted archive of one
    generation; bound to one unit of work's connection, never commits."""

    __slots__ = ()

    async def live_positions(self, session_id: str, *, session_key: str) -> list[tuple[int, int]]:
        """``(id, created_at)`` of every live row in transcript order: which rows a compaction
        planned on. A row's values can change in place (an upsert by message id, a new turn
        context), so the commit also compares the rows it folds (``list_live``)."""
        query = select(live.c.id, live.c.created_at).where(*_live_of(session_key, session_id))
        rows = await self.conn.execute(query.order_by(*LIVE_ORDER))
        return [(int(row.id), int(row.created_at)) for row in rows]

    async def archive_prefix(
        self,
        *,
        session_id: str,
        session_key: str,
        boundary: tuple[int, int],
        compaction_id: str | None,
        compaction_index: int | None,
        archived_at: int,
    ) -> int:
        """Copy the live rows up to ``boundary`` into the compacted archive (one statement);
        each keeps every payload column and records its live id as ``original_entry_id``."""
        stmt = copy_rows(
            archive,
            live.c,
            given={
                "session_id": session_id,
                "session_key": session_key,
                "compaction_id": compaction_id,
                "compaction_index": compaction_index,
                "archived_at": archived_at,
            },
            computed={"original_entry_id": live.c.id},
            where=_through(session_key, session_id, boundary),
            order_by=LIVE_ORDER,
        )
        return int((await self.conn.execute(stmt)).rowcount)

    async def delete_prefix(
        self, session_id: str, boundary: tuple[int, int], *, session_key: str
    ) -> int:
        """Delete the live rows up to ``boundary`` (those :meth:`archive_prefix` copied)."""
        stmt = delete(live).where(*_through(session_key, session_id, boundary))
        return int((await self.conn.execute(stmt)).rowcount)

    async def delete_ids(self, session_id: str, ids: Sequence[int], *, session_key: str) -> int:
        if not ids:
            return 0
        stmt = delete(live).where(*_live_of(session_key, session_id), live.c.id.in_(list(ids)))
        return int((await self.conn.execute(stmt)).rowcount)

    async def list_archive(
        self, session_id: str, *, session_key: str, compaction_id: str | None = None
    ) -> list[CompactedTranscriptEntry]:
        """The compacted archive of generation ``session_id`` (of one compaction, when
        given), in transcript order."""
        query = select_rows(archive, self.conn).where(
            archive.c.session_key == session_key, archive.c.session_id == session_id
        )
        if compaction_id is not None:
            query = query.where(archive.c.compaction_id == compaction_id)
        query = query.order_by(
            archive.c.created_at.asc(), archive.c.original_entry_id.asc(), archive.c.id.asc()
        )
        return to_models(
            CompactedTranscriptEntry, self.conn.dialect.name, await self.conn.execute(query)
        )
