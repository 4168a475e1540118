"""The manager's reset-archive calls: read a generation as a reset would archive it, and
write its archive file (upstream HEAD's ``capture_session_archive`` and
``write_session_archive``).

A part of :class:`SessionManager`, kept apart by job; one-line delegations to ``usecases/``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models import SessionNode, SessionSummary, TranscriptEntry
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
        return await session_archive.capture_session_archive(self._storage, node)

    async def write_session_archive(
        self,
        node: SessionNode,
        entries: Sequence[TranscriptEntry],
        summaries: Sequence[SessionSummary],
    ) -> None:
        """Write the archive file a reset writes, for ``node`` with ``entries`` and
        ``summaries`` (nothing if both are empty), to the archive directory resolved now
        (docs/semantics.md#reset-archive): staged owner-only, fsynced, renamed into place,
        the directory fsynced. Any failure removes the temporary file and raises; two
        calls never write the same file."""
        await session_archive.write_session_archive(node, entries, summaries)
