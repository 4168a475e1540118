"""The manager's session calls: lifecycle (create, get, intents, update, finish), listing,
delete, reset, retention, the store's statistics, and the previews of what a reset or
retention would delete.

A part of :class:`SessionManager`, kept apart by job: each call checks and canonicalises
its arguments (here or in ``usecases/lifecycle.py``, the manager's session checks), then
runs one use case on the storage's unit of work, or the storage's method of the same
operation.
"""

from __future__ import annotations

from typing import Any, Unpack

from ..keys import canonicalize_session_key
from ..models import (
    SessionIntent,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    SessionStatus,
    check_integer,
    check_millis,
)
from ..models.reports import DeletionPreview, ResetReport
from ..models.usage import UsageFields, check_usage
from ..storage import SessionStorage
from ..support.clock import now_ms
from ..usecases import overview, reset, retention, usage
from ..usecases.generations import GenerationCache
from ..usecases.lifecycle import Lifecycle
from ..usecases.overview import ArchiveReport, StoreStats


def _cutoff(max_age_ms: int) -> int:
    """The checked ``updated_before`` bound of sessions older than ``max_age_ms``."""
    check_integer("max_age_ms", max_age_ms)
    updated_before = retention.cutoff(max_age_ms)
    check_millis("updated_before", updated_before)
    return updated_before


class SessionCalls:
    """The session half of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _lifecycle: Lifecycle
    _generations: GenerationCache

    async def create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> SessionNode:
        """A new session (``SessionExistsError``, a ``ValueError``, if the key is taken)."""
        return await self._lifecycle.create(self._storage.uow, session_key, agent_id, kwargs)

    async def get_session(self, session_key: str) -> SessionNode | None:
        """The session row, or ``None``; never touches ``updated_at``."""
        return await self._lifecycle.get(self._storage.uow, session_key)

    async def get_or_create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> tuple[SessionNode, bool]:
        """The existing row untouched, or a new one; race-safe (exactly one creator wins)."""
        uow = self._storage.uow
        return await self._lifecycle.get_or_create(uow, session_key, agent_id, kwargs)

    async def apply_intent(
        self,
        session_key: str,
        intent: SessionIntent | str,
        /,
        *,
        agent_id: str = "main",
        **create_kwargs: Any,
    ) -> tuple[SessionNode, bool]:
        """Apply a session intent; returns ``(node, created_or_rotated)``.

        A missing key is created for every intent. ``NEW_CHAT`` on an existing key is a
        ``SessionKeyConflictError``; ``RESET_SAME_KEY`` starts a new generation (see
        :meth:`reset`); ``CONTINUE`` returns the row untouched.
        """
        uow = self._storage.uow
        return await self._lifecycle.apply_intent(uow, session_key, intent, agent_id, create_kwargs)

    async def list_sessions(
        self,
        agent_id: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        spawned_by: str | None = None,
        *,
        parent_session_key: str | None = None,
        key_prefix: str | None = None,
    ) -> list[SessionNode]:
        """Sessions by recent activity (``updated_at`` then key, both descending); with
        ``key_prefix``, only those whose canonical key starts with it, byte-exact (a
        complete ``agent:<id>:`` segment normalised, nothing else: docs/semantics.md#key-prefix)."""
        return await self._storage.list_sessions(
            agent_id,
            status,
            limit,
            offset,
            spawned_by,
            parent_session_key=parent_session_key,
            key_prefix=key_prefix,
        )

    async def list_sessions_page(
        self,
        *,
        limit: int = 100,
        cursor: SessionListCursor | None = None,
        agent_id: str | None = None,
        status: str | None = None,
        key_prefix: str | None = None,
    ) -> SessionListPage:
        """One keyset page of :meth:`list_sessions`' order: ``max(1, limit)`` sessions
        strictly after ``cursor``; pass ``page.next_cursor`` for the next one (with the
        same filters)."""
        return await self._storage.list_sessions_page(
            limit=limit, cursor=cursor, agent_id=agent_id, status=status, key_prefix=key_prefix
        )

    async def count_sessions(self) -> int:
        return await self._storage.count_sessions()

    async def delete(self, session_key: str) -> bool:
        """Delete the session and every row stored under its key; ``False`` if none."""
        return await self._storage.delete_session(session_key)

    async def reset(self, session_key: str) -> SessionNode:
        """Start a new generation of the key; see :meth:`reset_with_report`."""
        return (await self._lifecycle.reset(self._storage.uow, session_key)).session

    async def reset_with_report(self, session_key: str) -> ResetReport:
        """Start a new generation of the key, in one transaction, and say where the old one
        went (docs/semantics.md#reset): its transcript, compacted archive and summaries are
        archived to a file and deleted, its context states invalidated, the epoch bumped and
        the identity and counters renewed. A failed archive write is logged and the reset
        goes on, or, with ``SessionManager(..., archive_required=True)``, raises
        ``ArchiveWriteError`` (an ``OSError``) and changes nothing. A concurrent change
        waits for the other writer (the reset reads and locks the row in its transaction)."""
        return await self._lifecycle.reset(self._storage.uow, session_key)

    async def resume(self, session_key: str) -> SessionNode:
        """Touch ``updated_at``; ``KeyError`` if the session is missing."""
        return await self._lifecycle.resume(self._storage.uow, session_key)

    async def update(self, session_key: str, /, **fields: Any) -> SessionNode:
        """Set mutable fields (one narrow UPDATE); identity, key and epoch are refused."""
        return await self._lifecycle.update(self._storage.uow, session_key, fields)

    async def finish(
        self, session_key: str, status: SessionStatus | str = SessionStatus.DONE
    ) -> SessionNode:
        """Set the final status, ``ended_at`` and ``runtime_ms`` in one statement."""
        return await self._lifecycle.finish(self._storage.uow, session_key, status)

    async def archive(self, session_key: str) -> None:
        """A soft finish (status ``done``); nothing is moved or deleted."""
        await self._lifecycle.finish(self._storage.uow, session_key, SessionStatus.DONE)

    # -- usage -------------------------------------------------------------------------

    async def record_usage(self, session_key: str, **fields: Unpack[UsageFields]) -> SessionNode:
        """Add a turn's usage to the session's counters, atomically, and return the row.

        Keywords (``models.usage.UsageFields``): ``input_tokens``, ``output_tokens``,
        ``cache_read``, ``cache_write`` (0 each), ``cost_usd`` and ``cost_source``
        (``None``). One ``UPDATE`` of increments (concurrent calls all count), fenced on the
        generation this manager last saw for the key, as an append is: after a reset it raises
        ``StaleEpochError`` and adds nothing (the usage is not moved into the new
        conversation). ``total_tokens`` grows by ``input_tokens + output_tokens``; a cost
        needs its ``cost_source``: ``"provider_billed"`` (adds to ``billed_cost_usd``),
        ``"opensquilla_estimate"`` (to ``estimated_cost_component_usd``), both also to
        ``total_cost_usd`` and ``estimated_cost_usd``; ``"unavailable"`` (no ``cost_usd``)
        counts a ``missing_cost_entries``. The row's ``cost_source`` becomes ``"mixed"``
        once two kinds were recorded (docs/semantics.md#usage-counters). Every argument is
        checked first (``InvalidInputError``, nothing written), and so is the room left in
        each counter."""
        checked = check_usage(fields)
        key = canonicalize_session_key(session_key)
        return await usage.record_usage(
            self._storage.uow, self._generations, key, checked, now_ms()
        )

    # -- retention ---------------------------------------------------------------------

    async def prune_stale(self, max_age_ms: int) -> int:
        """Delete sessions not updated for ``max_age_ms``; how many were deleted."""
        return await retention.prune_stale(self._storage.uow, _cutoff(max_age_ms))

    async def cap_entries(self, max_entries: int = 500) -> int:
        """Keep at most ``max_entries`` sessions, deleting the least recently updated."""
        check_integer("max_entries", max_entries)
        return await retention.cap_sessions(self._storage.uow, max_entries)

    # -- the store ---------------------------------------------------------------------

    async def archive_report(self) -> ArchiveReport:
        """The reset archive files of this store (published, staged, settled at start)."""
        storage = self._storage
        return await overview.archive_report(storage.archive_place, storage.recovered_archives)

    async def stats(self) -> StoreStats:
        """Row counts of the whole store, plus its reset archives: this store's files in the
        archive directory on this machine, and its ``session_archives`` rows."""
        storage = self._storage
        return await overview.collect_stats(
            storage.uow,
            storage.archive_place,
            storage.recovered_archives,
            storage.lost_reset_archives,
        )

    # -- previews: what a deleting operation would remove now, nothing changed ---------

    async def preview_reset(self, session_key: str) -> DeletionPreview:
        return await reset.preview(self._storage.uow, canonicalize_session_key(session_key))

    async def preview_prune_stale(self, max_age_ms: int) -> DeletionPreview:
        return await retention.preview_prune(self._storage.uow, _cutoff(max_age_ms))

    async def preview_cap_entries(self, max_entries: int = 500) -> DeletionPreview:
        check_integer("max_entries", max_entries)
        return await retention.preview_cap(self._storage.uow, max_entries)
