"""The manager's reset-archive calls: read a generation as a reset would archive it, and
write its archive file (upstream HEAD's ``capture_session_archive`` and
``write_session_archive``).

A part of :class:`SessionManager`, kept apart by job: the arguments checked, then one use
case (``usecases/session_archive.py``), or the storage's method of the same operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import (
    GenerationSnapshot,
    SessionNode,
    SessionSummary,
    StoredArchive,
    TranscriptEntry,
    check_instance,
    check_instances,
)
from ..storage import SessionStorage
from ..usecases import session_archive


class ArchiveCalls:
    """The reset-archive calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage

    async def capture_session_archive(
        self, node: SessionNode
    ) -> tuple[list[TranscriptEntry], list[SessionSummary]]:
        """``(canonical transcript, summaries)`` of the generation ``node.session_id``, read
        from one snapshot: what a reset of it would archive."""
        check_instance("node", node, SessionNode)
        return await session_archive.capture_session_archive(self._storage.uow, node)

    async def write_session_archive(
        self,
        node: SessionNode,
        entries: Sequence[TranscriptEntry],
        summaries: Sequence[SessionSummary],
    ) -> None:
        """Write the archive a reset writes, for ``node`` with ``entries`` and ``summaries``
        (nothing if both are empty), where the storage keeps archives
        (docs/semantics.md#reset-archive): a file in the archive directory resolved now,
        staged owner-only, fsynced, renamed into place, the directory fsynced (any failure
        removes the temporary file and raises; two calls never write the same file); or,
        with ``archive_store="database"``, a row of ``session_archives``."""
        snapshot = GenerationSnapshot(
            session=check_instance("node", node, SessionNode),
            transcript=check_instances("entries", entries, TranscriptEntry),
            summaries=check_instances("summaries", summaries, SessionSummary),
        )
        storage = self._storage
        await session_archive.write_session_archive(storage.uow, storage.archive_place, snapshot)

    async def list_session_archives(
        self, session_key: str | None = None, *, limit: int | None = None
    ) -> list[StoredArchive]:
        """The reset archives kept in the database (``archive_store="database"``), oldest
        first: all, or those of ``session_key``'s generations; at most ``limit``."""
        return await self._storage.list_session_archives(session_key, limit=limit)

    async def read_session_archive(self, archive_id: int) -> dict[str, Any] | None:
        """The document of one archive kept in the database (the JSON an archive file
        holds), or ``None``."""
        return await self._storage.read_session_archive(archive_id)
