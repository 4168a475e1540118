"""Statements on ``session_summaries``."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, bindparam, func, select, update

from ...models import SessionSummary
from ..routing import cross_session
from ..rows import read_columns, select_rows, to_model, to_models, values_of
from ..sql import copy_rows, lock_key
from ..tables import session_summaries as summaries
from .repository import Generation, Repository

ORDER = (summaries.c.compaction_index.asc(), summaries.c.id.asc())
DEGRADED_STATUSES = ("degraded_forensic", "failed_retryable")


def _next_index(session_key: str, session_id: str) -> Any:
    return (
        select(func.coalesce(func.max(summaries.c.compaction_index), -1) + 1)
        .where(summaries.c.session_key == session_key, summaries.c.session_id == session_id)
        .scalar_subquery()
    )


class SummaryRepository(Repository):
    """Statements on ``session_summaries``, on one unit of work's connection; never commits."""

    __slots__ = ()

    async def insert(self, summary: SessionSummary) -> tuple[int, int]:
        """Insert with ``compaction_index`` = max + 1 for the session, inside this transaction.

        Returns ``(id, compaction_index)``. Postgres writers of one session queue on an advisory
        lock; SQLite's write transaction already excludes them. A unique index backs both.
        """
        await lock_key(self.conn, summary.session_id)
        values = values_of(summary, summaries)
        values["compaction_index"] = _next_index(summary.session_key, summary.session_id)
        stmt = (
            summaries.insert()
            .values(values)
            .returning(summaries.c.id, summaries.c.compaction_index)
        )
        row = (await self.conn.execute(stmt)).one()
        return int(row.id), int(row.compaction_index)

    async def list_for_session(self, session_id: str, *, session_key: str) -> list[SessionSummary]:
        query = (
            select_rows(summaries, self.conn)
            .where(summaries.c.session_key == session_key, summaries.c.session_id == session_id)
            .order_by(*ORDER)
        )
        return to_models(SessionSummary, self.conn.dialect.name, await self.conn.execute(query))

    async def latest(self, session_id: str, *, session_key: str) -> SessionSummary | None:
        dialect = self.conn.dialect.name
        values = {"session_key": session_key, "session_id": session_id}
        row = (await self.conn.execute(_latest(dialect), values)).first()
        return to_model(SessionSummary, row, dialect) if row is not None else None

    async def of_key(self, summary_id: int, *, session_key: str) -> SessionSummary | None:
        """The summary with id ``summary_id`` if it is one of ``session_key``'s."""
        query = select_rows(summaries, self.conn).where(
            summaries.c.session_key == session_key, summaries.c.id == summary_id
        )
        found = to_models(SessionSummary, self.conn.dialect.name, await self.conn.execute(query))
        return found[0] if found else None

    async def text_lengths(self, session_id: str, *, session_key: str) -> list[int]:
        query = select(func.length(summaries.c.summary_text)).where(
            summaries.c.session_key == session_key, summaries.c.session_id == session_id
        )
        return [int(n or 0) for n in (await self.conn.execute(query)).scalars()]

    async def copy_to_session(self, source: Generation, target: Generation) -> int:
        """Copy every summary of ``source`` to ``target``, metadata intact, re-indexed from 0
        in the original order."""
        await lock_key(self.conn, target.session_id)
        base = (
            select(func.coalesce(func.max(summaries.c.compaction_index), -1).label("base"))
            .where(
                summaries.c.session_key == target.session_key,
                summaries.c.session_id == target.session_id,
            )
            .scalar_subquery()
        )
        position = func.row_number().over(order_by=list(ORDER))
        stmt = copy_rows(
            summaries,
            summaries.c,
            given={"session_id": target.session_id, "session_key": target.session_key},
            computed={"compaction_index": base + position},
            where=(
                summaries.c.session_key == source.session_key,
                summaries.c.session_id == source.session_id,
            ),
        )
        return int((await self.conn.execute(stmt)).rowcount)

    async def list_degraded(self, *, key_prefix: str | None, limit: int) -> list[SessionSummary]:
        """The degraded queue across sessions (a listing: it fans out under distribution)."""
        query = select_rows(summaries, self.conn).where(
            summaries.c.flush_receipt_status.in_(DEGRADED_STATUSES)
        )
        if key_prefix is not None:
            # An exact, case-sensitive prefix test with no wildcard characters to escape.
            query = query.where(
                func.substr(summaries.c.session_key, 1, len(key_prefix)) == key_prefix
            )
        query = query.order_by(summaries.c.created_at.asc(), summaries.c.id.asc()).limit(limit)
        with cross_session("listing"):
            rows = await self.conn.execute(query)
        return to_models(SessionSummary, self.conn.dialect.name, rows)

    async def key_of(self, summary_id: int) -> str | None:
        """The key summary ``summary_id`` is stored under, ``None`` for no such row. By id
        alone: it fans out under distribution (``listing``, the by-id resolution)."""
        query = select(summaries.c.session_key).where(summaries.c.id == summary_id).limit(1)
        with cross_session("listing"):
            found = (await self.conn.execute(query)).scalar()
        return None if found is None else str(found)

    async def set_flush_status(self, summary_id: int, status: str, *, session_key: str) -> int:
        stmt = update(summaries).where(
            summaries.c.session_key == session_key, summaries.c.id == summary_id
        )
        return int((await self.conn.execute(stmt.values(flush_receipt_status=status))).rowcount)

    async def set_flush_status_by_compaction(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        stmt = update(summaries).where(
            summaries.c.session_key == session_key, summaries.c.compaction_id == compaction_id
        )
        return int((await self.conn.execute(stmt.values(flush_receipt_status=status))).rowcount)

    async def delete_for_session(self, session_id: str, *, session_key: str) -> None:
        await self.conn.execute(
            summaries.delete().where(
                summaries.c.session_key == session_key, summaries.c.session_id == session_id
            )
        )


# Newest first: a generation's latest summary is the first row in this order (also read by
# ``transcript_lines``, so that ``get_transcript_lines`` and ``get_latest_summary`` agree).
LATEST_ORDER = (summaries.c.compaction_index.desc(), summaries.c.id.desc())


@functools.cache
def _latest(dialect_name: str) -> Select[Any]:
    """The newest summary of ``:session_id`` (read on every context view: built once)."""
    return (
        select(*read_columns(summaries, dialect_name))
        .where(
            summaries.c.session_key == bindparam("session_key"),
            summaries.c.session_id == bindparam("session_id"),
        )
        .order_by(*LATEST_ORDER)
        .limit(1)
    )
