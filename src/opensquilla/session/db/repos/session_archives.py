"""Statements on ``session_archives`` (revision 0006): reset archives kept in the database,
one row each, written inside the reset's own transaction."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, MetaData, Table, Text, func, insert, select

from ...models.archives import StoredArchive
from ..routing import cross_session
from ..types import IntId, LosslessText
from .repository import Repository

# The archive, not one of the five tables: its own metadata, so export, import, retention
# and the drift check (which compare the five) never see it.
session_archives = Table(
    "session_archives",
    MetaData(),
    Column("id", IntId, primary_key=True, autoincrement=True),
    Column("session_key", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    # JSON text as written (strict, every control character escaped), never ``jsonb``: the
    # document reads back byte for byte; LosslessText keeps it so on Postgres whatever it holds.
    Column("document", LosslessText, nullable=False),
    Index("idx_session_archives_session_key", "session_key", "id"),
    sqlite_autoincrement=True,
)

_SUMMARY = [c for c in session_archives.c if c.name != "document"]


class ArchiveRepository(Repository):
    """Statements on ``session_archives``, on one unit of work's connection; never commits."""

    __slots__ = ()

    async def add(
        self,
        *,
        session_key: str,
        session_id: str,
        epoch: int,
        reason: str,
        created_at: int,
        document: str,
    ) -> int:
        """Insert one archive; its id."""
        stmt = (
            insert(session_archives)
            .values(
                session_key=session_key,
                session_id=session_id,
                epoch=epoch,
                reason=reason,
                created_at=created_at,
                size_bytes=len(document.encode("utf-8")),
                document=document,
            )
            .returning(session_archives.c.id)
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def list_archives(
        self, session_key: str | None, limit: int | None
    ) -> list[StoredArchive]:
        """Archives oldest first (by id), of one key or of all (a ``listing``)."""
        query = select(*_SUMMARY).order_by(session_archives.c.id).limit(limit)
        if session_key is not None:
            query = query.where(session_archives.c.session_key == session_key)
            rows = (await self.conn.execute(query)).mappings().all()
        else:
            with cross_session("listing"):
                rows = (await self.conn.execute(query)).mappings().all()
        return [StoredArchive(**row) for row in rows]

    async def document(self, archive_id: int) -> str | None:
        """The document of archive ``archive_id``: an operator's read by row id, which by
        id alone fans out under distribution (``listing``)."""
        query = select(session_archives.c.document).where(session_archives.c.id == archive_id)
        with cross_session("listing"):
            return (await self.conn.execute(query)).scalar_one_or_none()

    async def totals(self) -> tuple[int, int]:
        """``(archives, bytes)`` of the whole table (``stats``)."""
        query = select(func.count(), func.coalesce(func.sum(session_archives.c.size_bytes), 0))
        with cross_session("stats"):
            count, size = (await self.conn.execute(query.select_from(session_archives))).one()
        return int(count), int(size)
