"""Statements on ``transcript_entries`` and ``compacted_transcript_entries``.

Transcript order is ``(created_at, id)`` everywhere. The canonical transcript is the
compacted archive (each row presented with ``id := original_entry_id``) merged with the live
rows in that order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Select,
    bindparam,
    delete,
    func,
    select,
    tuple_,
)

from ...models import (
    CompactedTranscriptEntry,
    TranscriptEntry,
)
from ..routing import cross_session
from ..rows import (
    TRANSCRIPT_COLUMNS,
    pinned_session_id,
    read_columns,
    select_rows,
    to_models,
    values_of,
)
from ..sql import copy_rows, new_uuid, window_binds
from ..tables import compacted_transcript_entries as archive
from ..tables import session_summaries as summaries
from ..tables import transcript_entries as live
from .repository import Generation, Repository
from .transcript_batches import TranscriptBatches
from .transcript_lines import TranscriptLineReads
from .transcript_reads import LIVE_ORDER, TranscriptReads, canonical_query
from .transcript_writes import TranscriptWrites


def _page(query: Select[Any], limit: int | None, offset: int) -> Select[Any]:
    if offset:
        query = query.offset(offset)
    if limit is not None:
        query = query.limit(limit)
    return query


@functools.cache
def _live_tail(dialect_name: str, bounded: bool) -> Select[Any]:
    """The statement of :meth:`TranscriptRepository.live_tail` (built once per shape: the
    per-turn reads bind their values); binds those of :func:`window_binds`."""
    query = select(*read_columns(live, dialect_name)).where(
        live.c.session_key == bindparam("session_key"),
        live.c.session_id == bindparam("session_id"),
    )
    if bounded:
        bound = tuple_(
            bindparam("position_created_at", type_=BigInteger),
            bindparam("position_id", type_=BigInteger),
        )
        query = query.where(tuple_(live.c.created_at, live.c.id) < bound)
    return query.order_by(live.c.created_at.desc(), live.c.id.desc()).limit(
        bindparam("window_limit", type_=BigInteger)
    )


class TranscriptRepository(
    TranscriptBatches, TranscriptWrites, TranscriptReads, TranscriptLineReads, Repository
):
    """The live transcript and the compacted archive; bound to one connection, never commits."""

    __slots__ = ()

    async def list_live(
        self, session_id: str, *, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        given = pinned_session_id(session_id)
        query = (
            select_rows(live, self.conn, given=tuple(given or ()))
            .where(live.c.session_key == session_key, live.c.session_id == session_id)
            .order_by(*LIVE_ORDER)
        )
        return to_models(
            TranscriptEntry,
            self.conn.dialect.name,
            await self.conn.execute(_page(query, limit, offset)),
            given,
        )

    async def live_tail(
        self,
        session_id: str,
        limit: int,
        *,
        session_key: str,
        before: tuple[int, int] | None = None,
    ) -> list[TranscriptEntry]:
        """The newest ``limit`` live rows (before ``before`` = (created_at, id) if given),
        oldest first: a backward range scan of ``(session_id, created_at, id)``."""
        dialect = self.conn.dialect.name
        values = window_binds(session_key, session_id, limit, before)
        query = _live_tail(dialect, before is not None)
        rows = to_models(TranscriptEntry, dialect, await self.conn.execute(query, values))
        rows.reverse()
        return rows

    async def count_live(self, session_id: str, *, session_key: str) -> int:
        query = (
            select(func.count())
            .select_from(live)
            .where(live.c.session_key == session_key, live.c.session_id == session_id)
        )
        return int((await self.conn.execute(query)).scalar_one())

    async def owner_key(self, session_id: str) -> str | None:
        """The key of ``session_id``'s rows when no session row names it (orphan rows a
        legacy database may hold): the live rows', else the archive's, else the summaries',
        else ``None``. The reads are by id alone, so they fan out under distribution
        (``listing``)."""
        with cross_session("listing"):
            for table in (live, archive, summaries):
                query = select(table.c.session_key).where(table.c.session_id == session_id)
                found = (await self.conn.execute(query.limit(1))).scalar()
                if found is not None:
                    return str(found)
        return None

    async def list_canonical(
        self, session_id: str, *, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        merged = canonical_query(session_key, session_id, self.conn.dialect.name)
        query = select(merged).order_by(merged.c.created_at.asc(), merged.c.id.asc())
        return to_models(
            TranscriptEntry,
            self.conn.dialect.name,
            await self.conn.execute(_page(query, limit, offset)),
        )

    async def find_canonical_position(
        self, session_id: str, message_id: str, *, session_key: str
    ) -> tuple[int, int] | None:
        """``(created_at, id)`` of the first canonical row carrying ``message_id``."""
        merged = canonical_query(session_key, session_id, self.conn.dialect.name)
        query = (
            select(merged.c.created_at, merged.c.id)
            .where(merged.c.message_id == message_id)
            .order_by(merged.c.created_at.asc(), merged.c.id.asc())
            .limit(1)
        )
        row = (await self.conn.execute(query)).first()
        return (int(row.created_at), int(row.id)) if row is not None else None

    async def token_sum_before(
        self, session_id: str, position: tuple[int, int] | None, *, session_key: str
    ) -> int:
        """Sum of ``token_count`` over canonical rows before ``position`` (live rows if None).

        SQLite's ``sum()`` raises "integer overflow" past 64 bits (Postgres sums ``bigint`` as
        ``numeric``); ``total()`` is its float sum, exact below 2**53 and never failing, which
        is all a budget comparison needs.
        """
        add = func.total if self.conn.dialect.name == "sqlite" else func.sum
        if position is None:
            query = select(func.coalesce(add(live.c.token_count), 0)).where(
                live.c.session_key == session_key, live.c.session_id == session_id
            )
        else:
            merged = canonical_query(session_key, session_id, self.conn.dialect.name)
            query = select(func.coalesce(add(merged.c.token_count), 0)).where(
                tuple_(merged.c.created_at, merged.c.id) < tuple_(*position)
            )
        return int((await self.conn.execute(query)).scalar_one())

    async def copy_to_session(
        self, source: Generation, target: Generation, *, before: tuple[int, int] | None
    ) -> int:
        """Copy transcript rows of ``source`` into ``target``'s live transcript with one
        statement.

        ``before=None`` copies the source's live rows; otherwise the canonical rows (archive
        included) strictly before that position. Copies get new ids (in order) and fresh
        message ids; every other column is kept. The source is read by its key: under
        distribution one shard read, another written (docs/scaling.md).
        """
        if before is None:
            rows = (
                select(*(live.c[name] for name in TRANSCRIPT_COLUMNS))
                .where(
                    live.c.session_key == source.session_key,
                    live.c.session_id == source.session_id,
                )
                .subquery("source")
            )
        else:
            merged = canonical_query(source.session_key, source.session_id, self.conn.dialect.name)
            rows = (
                select(merged)
                .where(tuple_(merged.c.created_at, merged.c.id) < tuple_(*before))
                .subquery("source")
            )
        stmt = copy_rows(
            live,
            rows.c,
            given={"session_id": target.session_id, "session_key": target.session_key},
            computed={"message_id": new_uuid(self.conn.dialect)},
            order_by=(rows.c.created_at.asc(), rows.c.id.asc()),
        )
        return int((await self.conn.execute(stmt)).rowcount)

    async def copy_archive_to_session(self, source: Generation, target: Generation) -> int:
        """Copy ``source``'s whole compacted archive to ``target``; every column but the
        owner and row id is kept (the source read by its key)."""
        stmt = copy_rows(
            archive,
            archive.c,
            given={"session_id": target.session_id, "session_key": target.session_key},
            where=(
                archive.c.session_key == source.session_key,
                archive.c.session_id == source.session_id,
            ),
            order_by=(archive.c.id.asc(),),
        )
        return int((await self.conn.execute(stmt)).rowcount)

    async def insert_archive_rows(self, rows: Sequence[CompactedTranscriptEntry]) -> None:
        if rows:
            await self.conn.execute(archive.insert(), [values_of(row, archive) for row in rows])

    async def delete_live(self, session_id: str, *, session_key: str) -> None:
        await self.conn.execute(
            delete(live).where(live.c.session_key == session_key, live.c.session_id == session_id)
        )

    async def delete_all_archive(self, session_id: str, *, session_key: str) -> None:
        await self.conn.execute(
            delete(archive).where(
                archive.c.session_key == session_key, archive.c.session_id == session_id
            )
        )

    async def delete_all(self, session_id: str, *, session_key: str) -> None:
        """Live rows and the compacted archive of one generation (stored under
        ``session_key``)."""
        await self.delete_live(session_id, session_key=session_key)
        await self.delete_all_archive(session_id, session_key=session_key)

    async def delete_live_except_last(self, session_id: str, keep: int, *, session_key: str) -> int:
        """Delete the live rows of ``session_id`` but the newest ``keep`` (ids stay stable)."""
        mine = (live.c.session_key == session_key, live.c.session_id == session_id)
        newest = (
            select(live.c.id)
            .where(*mine)
            .order_by(live.c.created_at.desc(), live.c.id.desc())
            .limit(keep)
        ).scalar_subquery()
        stmt = delete(live).where(*mine)
        if keep > 0:
            stmt = stmt.where(live.c.id.not_in(newest))
        return int((await self.conn.execute(stmt)).rowcount)


__all__ = ["TranscriptRepository", "canonical_query"]
