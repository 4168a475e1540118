"""Single flight across processes (docs/semantics.md#single-flight): the session's
compaction lease in the database (revision 0005).

Within one process, equal compactions already share one run (``compaction_flight.py``).
Across processes, the run that is about to summarise first takes the session's lease:

* no lease, a finished one, or one whose holder stopped renewing it: take it (one
  compare-and-set statement) and run; the holder renews it every third of
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

from ..compaction import CompactionResult
from ..compaction.result import result_document
from ..storage import SessionStorage

log = logging.getLogger("opensquilla.session.compactor")

WAIT_MESSAGE = "compaction of %s waits for the worker holding its lease"
MAX_POLL_SECONDS = 0.25


class Replan(Exception):
    """The session changed while this run waited for another worker's: plan again."""


@dataclass
class HeldLease:
    """A lease this run holds, renewed in the background until finished or released."""

    storage: SessionStorage
    session_key: str
    holder: str
    ttl_ms: int
    _renewal: asyncio.Task[None] | None = field(default=None, repr=False)

    def start_renewing(self) -> None:
        self._renewal = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                held = await self.storage.renew_compaction_lease(
                    self.session_key, self.holder, self.ttl_ms
                )
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
        """Record ``result`` for the workers waiting on this lease."""
        await self._stop_renewing()
        try:
            recorded = await self.storage.finish_compaction_lease(
                self.session_key, self.holder, result_document(result)
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
            await self.storage.release_compaction_lease(self.session_key, self.holder)
        except Exception:
            log.warning("could not release the compaction lease of %s", self.session_key)


async def take_lease(
    storage: SessionStorage,
    *,
    session_key: str,
    session_id: str,
    lease_key: str,
    lease_seconds: float,
    accept_result: bool = True,
) -> HeldLease | str:
    """The session's lease, held, or (``accept_result``) the result document of an equal
    run another worker finished while this one waited (or within the last
    ``lease_seconds``)."""
    ttl_ms = max(1, round(lease_seconds * 1000))
    poll = min(MAX_POLL_SECONDS, lease_seconds / 10)
    holder = secrets.token_hex(16)
    waited = False
    while True:
        lease = await storage.read_compaction_lease(session_key)
        if (
            accept_result
            and lease is not None
            and lease.flight_key == lease_key
            and lease.session_id == session_id
            and lease.finished_within(ttl_ms)
            and lease.result is not None
        ):
            return lease.result
        if lease is None or not lease.running:
            if waited:
                # Another worker's run ended: whatever it wrote, plan on what is there now.
                raise Replan
            if await storage.acquire_compaction_lease(
                session_key, session_id, lease_key, holder, ttl_ms
            ):
                held = HeldLease(storage, session_key, holder, ttl_ms)
                held.start_renewing()
                return held
            continue  # taken by another worker between the read and the take: look again
        if not waited:
            log.info(WAIT_MESSAGE, session_key, extra={"operation": "compact"})
            waited = True
        await asyncio.sleep(poll)
