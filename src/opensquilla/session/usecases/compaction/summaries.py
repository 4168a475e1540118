"""The summary rows of a session and its compacted archive, one unit of work per call:
what ``SessionStorage``'s summary methods and the manager's summary reads run
(docs/semantics.md#tables). Values arrive checked by the front door."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...db.uow import UnitOfWork
from ...keys import CanonicalKey
from ...models import CompactedTranscriptEntry, SessionSummary
from ..reads import owner_key

if TYPE_CHECKING:  # a type only: ``generations.py`` still imports the storage
    from ..generations import GenerationCache


async def save(uow: UnitOfWork, summary: SessionSummary) -> SessionSummary:
    """Insert ``summary`` into its generation; ``compaction_index`` is assigned in the
    transaction (max + 1 per session)."""
    async with uow.write() as tx:
        await tx.sessions.check_row_generation(summary.session_id, summary.session_key)
        summary.id, summary.compaction_index = await tx.summaries.insert(summary)
    return summary


async def of_generation(uow: UnitOfWork, session_id: str) -> list[SessionSummary]:
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        return (
            [] if key is None else await tx.summaries.list_for_session(session_id, session_key=key)
        )


async def latest_of_generation(uow: UnitOfWork, session_id: str) -> SessionSummary | None:
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        return None if key is None else await tx.summaries.latest(session_id, session_key=key)


async def by_id(uow: UnitOfWork, summary_id: int) -> SessionSummary | None:
    async with uow.read() as tx:
        return await tx.overview.summary_by_id(summary_id)


async def delete_of_generation(uow: UnitOfWork, session_id: str) -> None:
    async with uow.write() as tx:
        key = await owner_key(tx, session_id)
        if key is not None:
            await tx.summaries.delete_for_session(session_id, session_key=key)


async def degraded(uow: UnitOfWork, key_prefix: str | None, limit: int) -> list[SessionSummary]:
    """Summaries whose flush receipt is ``degraded_forensic`` or ``failed_retryable``, of
    the keys under ``key_prefix`` (``None``: every key)."""
    async with uow.read() as tx:
        return await tx.summaries.list_degraded(key_prefix=key_prefix, limit=limit)


async def set_flush_status(
    uow: UnitOfWork, summary_id: int, status: str, *, session_key: str | None = None
) -> int:
    """Set the flush receipt status of summary ``summary_id`` (stored under ``session_key``;
    ``None``: the key is looked up by the id first); how many rows changed."""
    async with uow.write() as tx:
        key = session_key if session_key is not None else await tx.summaries.key_of(summary_id)
        if key is None:
            return 0
        return await tx.summaries.set_flush_status(summary_id, status, session_key=key)


async def set_flush_status_by_compaction(
    uow: UnitOfWork, key: CanonicalKey, compaction_id: str, status: str
) -> int:
    async with uow.write() as tx:
        return await tx.summaries.set_flush_status_by_compaction(key, compaction_id, status)


async def compacted_entries(
    uow: UnitOfWork,
    session_id: str,
    compaction_id: str | None,
    *,
    session_key: str | None = None,
) -> list[CompactedTranscriptEntry]:
    """The compacted archive of one generation (of one compaction, when given), stored
    under ``session_key`` (``None``: the generation's owner, looked up by its id)."""
    async with uow.read() as tx:
        key = session_key if session_key is not None else await owner_key(tx, session_id)
        if key is None:
            return []
        return await tx.compaction.list_archive(
            session_id, session_key=key, compaction_id=compaction_id
        )


async def current(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey
) -> list[SessionSummary]:
    """The current generation's summaries, oldest first (``SessionNotFoundError`` for a
    missing key), from one snapshot."""
    async with uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await tx.summaries.list_for_session(node.session_id, session_key=node.session_key)


async def latest_current(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey
) -> SessionSummary | None:
    """The current generation's newest summary, or ``None``, from one snapshot."""
    async with uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await tx.summaries.latest(node.session_id, session_key=node.session_key)
