"""Single flight across processes (docs/semantics.md#single-flight): the session's
compaction lease in the database (revision 0005).

Within one process, equal compactions already share one run (``flight.py``).
Across processes, the run that is about to summarise first takes the session's lease:

* no lease, a finished one, or one whose holder stopped renewing it: take it (one
  compare-and-set statement, in the write unit of work that read the lease and re-read the
  session row: a session compacted or reset since the plan's read takes no lease and plans
  again) and run; the holder renews it every third of
  ``lease_seconds`` while it summarises, records the result when done
  (:meth:`HeldLease.finish`) and gives the lease up if it fails or is cancelled;
* a lease another worker holds: wait for it, polling. When it finishes, a waiter whose
  inputs were the same (the *lease key*: the flight key without anything bound to one
  process, and without the API key at all) receives that result; any other waiter plans
  again on the transcript as it now is (:class:`Replan`).

A crashed holder blocks the session for at most ``lease_seconds``. Losing a lease while
running (a holder stalled past its expiry) only costs a second summariser call: the commit
still checks the transcript it planned on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import dataclass, field

from ...compaction import CompactionResult
from ...compaction.result import result_document
from ...db.uow import UnitOfWork
from ...keys import CanonicalKey
from ...models import SessionNode
from ...models.leases import CompactionLease

log = logging.getLogger("opensquilla.session.compactor")

WAIT_MESSAGE = "compaction of %s waits for the worker holding its lease"
MAX_POLL_SECONDS = 0.25


class Replan(Exception):
    """The session changed while this run waited for another worker's: plan again."""


# -- the lease's rows, one unit of work each (SessionStorage's lease methods) ---------------


async def read_lease(uow: UnitOfWork, session_key: str) -> CompactionLease | None:
    async with uow.read() as tx:
        return await tx.leases.read(session_key)


async def acquire_lease(
    uow: UnitOfWork, session_key: str, session_id: str, flight_key: str, holder: str, ttl_ms: int
) -> bool:
    async with uow.write() as tx:
        return await tx.leases.acquire(session_key, session_id, flight_key, holder, ttl_ms)


async def renew_lease(uow: UnitOfWork, session_key: str, holder: str, ttl_ms: int) -> bool:
    async with uow.write() as tx:
        return await tx.leases.renew(session_key, holder, ttl_ms)


async def finish_lease(uow: UnitOfWork, session_key: str, holder: str, result: str) -> bool:
    async with uow.write() as tx:
        return await tx.leases.finish(session_key, holder, result)


async def release_lease(uow: UnitOfWork, session_key: str, holder: str) -> None:
    async with uow.write() as tx:
        await tx.leases.release(session_key, holder)


# -- a run's lease -------------------------------------------------------------------------


@dataclass
class HeldLease:
    """A lease this run holds, renewed in the background until finished or released."""

    uow: UnitOfWork
    session_key: CanonicalKey
    holder: str
    ttl_ms: int
    _renewal: asyncio.Task[None] | None = field(default=None, repr=False)

    def start_renewing(self) -> None:
        self._renewal = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                held = await renew_lease(self.uow, self.session_key, self.holder, self.ttl_ms)
            except Exception:
                log.warning("could not renew the compaction lease of %s", self.session_key)
                continue
            if not held:
                log.warning(
                    "the compaction lease of %s lapsed while its run was still going; another "
                    "worker may summarise the same rows",
                    self.session_key,
                )
                return

    async def _stop_renewing(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewal

    async def finish(self, result: CompactionResult) -> None:
        """Record ``result`` for the workers waiting on this lease (one unit of work)."""
        await self._stop_renewing()
        try:
            recorded = await finish_lease(
                self.uow, self.session_key, self.holder, result_document(result)
            )
        except Exception:
            # The run itself succeeded; waiters take the lease when it lapses and re-plan.
            log.warning("could not record the compaction result of %s", self.session_key)
            return
        if not recorded:
            log.warning("the compaction lease of %s was lost before its result", self.session_key)

    async def release(self) -> None:
        """Give the lease up without a result (the run failed or was cancelled)."""
        await self._stop_renewing()
        try:
            await release_lease(self.uow, self.session_key, self.holder)
        except Exception:
            log.warning("could not release the compaction lease of %s", self.session_key)


def _generation(node: SessionNode | None) -> tuple[str, int, int] | None:
    return None if node is None else (node.session_id, node.epoch, node.compaction_count)


async def take_lease(
    uow: UnitOfWork,
    *,
    planned: SessionNode,
    lease_key: str,
    lease_seconds: float,
    accept_result: bool = True,
) -> HeldLease | str:
    """The session's lease, held, or (``accept_result``) the result document of an equal
    run another worker finished while this one waited (or within the last
    ``lease_seconds``). :class:`Replan` when the session row is no longer ``planned`` (it
    was compacted or reset since the plan's read) or another worker's run ended while this
    one waited.

    Each attempt is one write unit of work: the lease read, its compare-and-set and the
    session row's re-read commit together, so a run never holds a lease for a plan that is
    already stale. Uncontended: one unit of work; a waiter polls, one unit each time."""
    session_key = CanonicalKey(planned.session_key)
    ttl_ms = max(1, round(lease_seconds * 1000))
    poll = min(MAX_POLL_SECONDS, lease_seconds / 10)
    holder = secrets.token_hex(16)
    waited = False
    while True:
        async with uow.write() as tx:
            lease = await tx.leases.read(session_key)
            if (
                accept_result
                and lease is not None
                and lease.flight_key == lease_key
                and lease.session_id == planned.session_id
                and lease.finished_within(ttl_ms)
                and lease.result is not None
            ):
                return lease.result
            free = lease is None or not lease.running
            if free:
                if waited:
                    # Another worker's run ended: whatever it wrote, plan on what is there now.
                    raise Replan
                if not await tx.leases.acquire(
                    session_key, planned.session_id, lease_key, holder, ttl_ms
                ):
                    continue  # taken by another worker between the read and the take
                if _generation(await tx.sessions.get(session_key)) != _generation(planned):
                    raise Replan  # compacted (or reset) since the read: rolled back, not taken
        if free:
            held = HeldLease(uow, session_key, holder, ttl_ms)
            held.start_renewing()
            return held
        if not waited:
            log.info(WAIT_MESSAGE, session_key, extra={"operation": "compact"})
            waited = True
        await asyncio.sleep(poll)
