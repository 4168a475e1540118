"""Compaction leases (revision 0005): the database's record of which worker is compacting
a session, so that workers in other processes wait for it instead of summarising the same
rows again (docs/semantics.md#compaction-lease). Each method checks its arguments
(identifiers: text without NUL, the time to live in milliseconds; the session key is taken
as given, as the compaction use case canonicalised it) and runs one use case of
``usecases/compaction/lease.py``: one short unit of work."""

from __future__ import annotations

from ..db.lifecycle import StorageLifecycle
from ..models.checks import check_integer, check_text
from ..models.leases import CompactionLease
from ..usecases.compaction import lease

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
        return await lease.read_lease(self.uow, key)

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
        return await lease.acquire_lease(self.uow, *values)

    async def renew_compaction_lease(self, session_key: str, holder: str, ttl_ms: int) -> bool:
        values = (_name("session_key", session_key), _name("holder", holder), _ttl(ttl_ms))
        return await lease.renew_lease(self.uow, *values)

    async def finish_compaction_lease(self, session_key: str, holder: str, result: str) -> bool:
        values = (
            _name("session_key", session_key),
            _name("holder", holder),
            check_text("result", result, identifier=True),
        )
        return await lease.finish_lease(self.uow, *values)

    async def release_compaction_lease(self, session_key: str, holder: str) -> None:
        values = (_name("session_key", session_key), _name("holder", holder))
        await lease.release_lease(self.uow, *values)
