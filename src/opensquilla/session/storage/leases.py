"""Compaction leases (revision 0005): the database's record of which worker is compacting
a session, so that workers in other processes wait for it instead of summarising the same
rows again (docs/semantics.md#compaction-lease). Each call is one short unit of work; the
session key is taken as given (the compaction use case has canonicalised it); every
argument is checked (identifiers: text without NUL, the time to live in milliseconds)."""

from __future__ import annotations

from ..models.checks import check_integer, check_text
from ..models.leases import CompactionLease
from .lifecycle import StorageLifecycle

# A lease lives for at most a year (and the expiry, the clock plus this, fits 64 bits).
MAX_TTL_MS = 366 * 24 * 3600 * 1000


def _name(name: str, value: object) -> str:
    return check_text(name, value, identifier=True, non_empty=True)


def _ttl(value: object) -> int:
    return check_integer("ttl_ms", value, minimum=1, maximum=MAX_TTL_MS)


class CompactionLeaseOperations(StorageLifecycle):
    """Read, take, renew, finish and give up a session's compaction lease."""

    async def read_compaction_lease(self, session_key: str) -> CompactionLease | None:
        key = _name("session_key", session_key)
        async with self.uow.read() as tx:
            return await tx.leases.read(key)

    async def acquire_compaction_lease(
        self, session_key: str, session_id: str, flight_key: str, holder: str, ttl_ms: int
    ) -> bool:
        """``True`` when ``holder`` now holds the lease: there was none, or it was
        finished, or its holder let it lapse."""
        values = (
            _name("session_key", session_key),
            _name("session_id", session_id),
            _name("flight_key", flight_key),
            _name("holder", holder),
            _ttl(ttl_ms),
        )
        async with self.uow.write() as tx:
            return await tx.leases.acquire(*values)

    async def renew_compaction_lease(self, session_key: str, holder: str, ttl_ms: int) -> bool:
        values = (_name("session_key", session_key), _name("holder", holder), _ttl(ttl_ms))
        async with self.uow.write() as tx:
            return await tx.leases.renew(*values)

    async def finish_compaction_lease(self, session_key: str, holder: str, result: str) -> bool:
        values = (
            _name("session_key", session_key),
            _name("holder", holder),
            check_text("result", result, identifier=True),
        )
        async with self.uow.write() as tx:
            return await tx.leases.finish(*values)

    async def release_compaction_lease(self, session_key: str, holder: str) -> None:
        values = (_name("session_key", session_key), _name("holder", holder))
        async with self.uow.write() as tx:
            await tx.leases.release(*values)
