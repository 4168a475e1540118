"""Statements on ``compaction_leases`` (revision 0005): one row per session key, taken by
compare-and-set, with every time from the database's clock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Column, MetaData, Table, Text, delete, literal_column, select
from sqlalchemy import update as sql_update
from sqlalchemy.sql.expression import ColumnElement

from ...models.leases import LEASE_DONE, LEASE_RUNNING, CompactionLease
from ..sql import insert_for
from .repository import Repository

# Coordination state, not one of the five tables: its own metadata, so export, import,
# retention and the drift check (which compare the five) never see it.
leases = Table(
    "compaction_leases",
    MetaData(),
    Column("session_key", Text, primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("flight_key", Text, nullable=False),
    Column("holder", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("acquired_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger),
    Column("result", Text),
)


def clock_ms(dialect_name: str) -> ColumnElement[int]:
    """The database's current time in milliseconds since the epoch."""
    if dialect_name == "postgresql":
        return literal_column(
            "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)", BigInteger
        )
    return literal_column("CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)", BigInteger)


class LeaseRepository(Repository):
    """Statements on ``compaction_leases``, on one unit of work's connection; never commits."""

    __slots__ = ()

    @property
    def _now(self) -> ColumnElement[int]:
        return clock_ms(self.conn.dialect.name)

    async def read(self, session_key: str) -> CompactionLease | None:
        query = select(*leases.c, self._now.label("now")).where(leases.c.session_key == session_key)
        row = (await self.conn.execute(query)).mappings().first()
        return None if row is None else CompactionLease(**row)

    async def acquire(
        self, session_key: str, session_id: str, flight_key: str, holder: str, ttl_ms: int
    ) -> bool:
        """Take the lease unless another holder's is running and unexpired."""
        now = self._now
        values: dict[str, Any] = {
            "session_key": session_key,
            "session_id": session_id,
            "flight_key": flight_key,
            "holder": holder,
            "state": LEASE_RUNNING,
            "acquired_at": now,
            "expires_at": now + ttl_ms,
            "finished_at": None,
            "result": None,
        }
        insert = insert_for(self.conn.dialect, leases).values(values)
        taken = (leases.c.state != LEASE_RUNNING) | (leases.c.expires_at <= now)
        stmt = insert.on_conflict_do_update(
            index_elements=[leases.c.session_key],
            set_={name: value for name, value in values.items() if name != "session_key"},
            where=taken,
        ).returning(leases.c.holder)
        return (await self.conn.execute(stmt)).first() is not None

    def _held(self, session_key: str, holder: str) -> Any:
        return sql_update(leases).where(
            leases.c.session_key == session_key,
            leases.c.holder == holder,
            leases.c.state == LEASE_RUNNING,
        )

    async def renew(self, session_key: str, holder: str, ttl_ms: int) -> bool:
        """Push the expiry of a lease still held by ``holder``; ``False`` if it is not."""
        stmt = self._held(session_key, holder).values(expires_at=self._now + ttl_ms)
        return bool((await self.conn.execute(stmt)).rowcount)

    async def finish(self, session_key: str, holder: str, result: str) -> bool:
        """Record the outcome of ``holder``'s run; ``False`` if the lease was lost."""
        now = self._now
        stmt = self._held(session_key, holder).values(
            state=LEASE_DONE, finished_at=now, expires_at=now, result=result
        )
        return bool((await self.conn.execute(stmt)).rowcount)

    async def release(self, session_key: str, holder: str) -> None:
        """Give up a lease ``holder`` still holds (a run that failed or was cancelled)."""
        await self.conn.execute(
            delete(leases).where(
                leases.c.session_key == session_key,
                leases.c.holder == holder,
                leases.c.state == LEASE_RUNNING,
            )
        )
