"""Compaction leases (revision 0005): the database's record of which worker is compacting
a session, so that workers in other processes wait for it instead of summarising the same
rows again (docs/semantics.md#single-flight). Each call is one short unit of work; the
session key is taken as given (the compaction use case has canonicalised it)."""

from __future__ import annotations

from ..models.leases import CompactionLease
from .lifecycle import StorageLifecycle


class CompactionLeaseOperations(StorageLifecycle):
    """Read, take, renew, finish and give up a session's compaction lease."""

    async def read_compaction_lease(self, session_key: str) -> CompactionLease | None:
        async with self.uow.read() as tx:
            return await tx.leases.read(session_key)

    async def acquire_compaction_lease(
        self, session_key: str, session_id: str, flight_key: str, holder: str, ttl_ms: int
    ) -> bool:
        """``True`` when ``holder`` now holds the lease: there was none, or it was
        finished, or its holder let it lapse."""
        async with self.uow.write() as tx:
            return await tx.leases.acquire(session_key, session_id, flight_key, holder, ttl_ms)

    async def renew_compaction_lease(self, session_key: str, holder: str, ttl_ms: int) -> bool:
        async with self.uow.write() as tx:
            return await tx.leases.renew(session_key, holder, ttl_ms)

    async def finish_compaction_lease(self, session_key: str, holder: str, result: str) -> bool:
        async with self.uow.write() as tx:
            return await tx.leases.finish(session_key, holder, result)

    async def release_compaction_lease(self, session_key: str, holder: str) -> None:
        async with self.uow.write() as tx:
            await tx.leases.release(session_key, holder)
