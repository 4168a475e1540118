"""A generation's archive as two steps a runtime can call itself (upstream HEAD's
``capture_session_archive`` and ``write_session_archive``): read what a reset would archive,
then write the file. A reset does both inside its transaction (``usecases/reset.py``); the
file is the same (docs/semantics.md#reset-archive).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..db.uow import Transaction
from ..fs.reset_archive import write_archive
from ..models import GenerationSnapshot, SessionNode, SessionSummary, TranscriptEntry
from ..storage import SessionStorage
from ..support.clock import now_ms

ArchiveContents = tuple[list[TranscriptEntry], list[SessionSummary]]


async def read_generation(tx: Transaction, session_id: str) -> ArchiveContents:
    """The canonical transcript (compacted archive, then live rows) and the summaries of
    one generation, as ``tx`` sees them."""
    return (
        await tx.transcript.list_canonical(session_id),
        await tx.summaries.list_for_session(session_id),
    )


async def capture_session_archive(storage: SessionStorage, node: SessionNode) -> ArchiveContents:
    """What a reset would archive of ``node.session_id`` now, read from one snapshot."""
    async with storage.uow.snapshot() as tx:
        return await read_generation(tx, node.session_id)


async def write_session_archive(
    node: SessionNode,
    entries: Sequence[TranscriptEntry],
    summaries: Sequence[SessionSummary],
) -> Path | None:
    """Write the archive file of ``node`` with ``entries`` and ``summaries``; nothing (and
    ``None``) when both are empty. Any failure removes the temporary file and raises."""
    snapshot = GenerationSnapshot(session=node, transcript=list(entries), summaries=list(summaries))
    return await write_archive(snapshot, now_ms=now_ms())
