"""The repair queue: compactions whose memory flush was degraded or must be retried
(docs/semantics.md#repair), and the transcript rows each one folded away. One unit of work
per call; the values arrive checked by the manager."""

from __future__ import annotations

from ...db.uow import UnitOfWork
from ...keys import CanonicalKey, agent_key_prefix
from ...models import SessionSummary, TranscriptEntry
from . import summaries


async def list_degraded(
    uow: UnitOfWork, *, agent_id: str | None, limit: int
) -> list[SessionSummary]:
    prefix = agent_key_prefix(agent_id) if agent_id is not None else None
    return await summaries.degraded(uow, prefix, limit)


async def preimage(uow: UnitOfWork, summary: SessionSummary) -> list[TranscriptEntry]:
    """The live rows a compaction folded away, as they were (``id`` = their live id)."""
    if not summary.compaction_id:
        return []
    rows = await summaries.compacted_entries(
        uow, summary.session_id, summary.compaction_id, session_key=summary.session_key
    )
    return [
        TranscriptEntry.from_row(
            {name: getattr(row, name) for name in TranscriptEntry.model_fields if name != "id"}
            | {"id": row.original_entry_id}
        )
        for row in rows
    ]


async def mark_repair_status(uow: UnitOfWork, summary: SessionSummary, status: str) -> None:
    if summary.id is None:
        return
    await summaries.set_flush_status(uow, summary.id, status, session_key=summary.session_key)
    summary.flush_receipt_status = status


async def mark_flush_receipt_status(
    uow: UnitOfWork, key: CanonicalKey, compaction_id: str, status: str
) -> int:
    return await summaries.set_flush_status_by_compaction(uow, key, compaction_id, status)
