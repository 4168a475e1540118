"""A generation's archive as two steps a runtime can call itself (upstream HEAD's
``capture_session_archive`` and ``write_session_archive``): read what a reset would archive,
then write the file (or, with ``archive_store="database"``, the ``session_archives`` row). A
reset does both inside its transaction (``usecases/reset.py``); the archive is the same
(docs/semantics.md#reset-archive).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from ..db.uow import Transaction, UnitOfWork
from ..fs.archive_place import ArchivePlace
from ..fs.reset_archive import (
    RESET_REASON,
    archivable,
    archive_document,
    document_text,
    write_archive,
)
from ..keys import CanonicalKey
from ..models import GenerationSnapshot, SessionNode, SessionSummary, StoredArchive, TranscriptEntry
from ..support.clock import now_ms

ArchiveContents = tuple[list[TranscriptEntry], list[SessionSummary]]


async def read_generation(tx: Transaction, session_id: str, session_key: str) -> ArchiveContents:
    """The canonical transcript (compacted archive, then live rows) and the summaries of
    one generation, as ``tx`` sees them."""
    return (
        await tx.transcript.list_canonical(session_id, session_key=session_key),
        await tx.summaries.list_for_session(session_id, session_key=session_key),
    )


async def capture_session_archive(uow: UnitOfWork, node: SessionNode) -> ArchiveContents:
    """What a reset would archive of ``node.session_id`` now, read from one snapshot."""
    async with uow.snapshot() as tx:
        return await read_generation(tx, node.session_id, node.session_key)


async def archive_text(snapshot: GenerationSnapshot, now: int) -> str:
    """The archive document of ``snapshot`` as the file would hold it (encoded on a worker
    thread: a fresh stack for the encoder, and the event loop stays free)."""
    document = archive_document(snapshot, reason=RESET_REASON, now_ms=now)
    return await asyncio.to_thread(document_text, document)


async def insert_archive(tx: Transaction, snapshot: GenerationSnapshot, text: str, now: int) -> int:
    """Keep ``snapshot``'s archive ``text`` as a ``session_archives`` row of ``tx``; its id."""
    session = snapshot.session
    return await tx.archives.add(
        session_key=session.session_key,
        session_id=session.session_id,
        epoch=session.epoch,
        reason=RESET_REASON,
        created_at=now,
        document=text,
    )


async def write_session_archive(
    uow: UnitOfWork, place: ArchivePlace, snapshot: GenerationSnapshot
) -> Path | int | None:
    """Write the archive of ``snapshot`` where ``place`` says: the file (any failure removes
    the temporary file and raises), or the id of the ``session_archives`` row. Nothing (and
    ``None``) when it holds nothing."""
    now = now_ms()
    if place.store == "files":
        return await write_archive(
            snapshot, directory=place.directory(), now_ms=now, store_tag=place.tag
        )
    if not archivable(snapshot):
        return None
    text = await archive_text(snapshot, now)
    async with uow.write() as tx:
        return await insert_archive(tx, snapshot, text, now)


async def list_archives(
    uow: UnitOfWork, key: CanonicalKey | None, limit: int | None
) -> list[StoredArchive]:
    """The archives in the database, oldest first: all, or those of ``key``; at most
    ``limit``."""
    async with uow.read() as tx:
        return await tx.archives.list_archives(key, limit)


async def read_archive(uow: UnitOfWork, archive_id: int) -> dict[str, Any] | None:
    """The archive document of row ``archive_id``, or ``None`` if there is no such row."""
    async with uow.read() as tx:
        text = await tx.archives.document(archive_id)
    return None if text is None else json.loads(text)
