"""The repair queue: compactions whose memory flush was degraded or must be retried
(docs/semantics.md#repair), and the transcript rows each one folded away."""

from __future__ import annotations

from ..errors import InvalidInputError
from ..models import (
    COMPACTION_ID_MAX_LENGTH,
    SessionSummary,
    TranscriptEntry,
    check_instance,
    check_integer,
    check_text,
)
from ..storage import SessionStorage
from .lifecycle import check_agent_id


async def list_degraded(
    storage: SessionStorage, *, agent_id: str | None, limit: int
) -> list[SessionSummary]:
    check_agent_id(agent_id)
    check_integer("limit", limit)
    return await storage.list_degraded_summaries(agent_id=agent_id, limit=limit)


async def preimage(storage: SessionStorage, summary: SessionSummary) -> list[TranscriptEntry]:
    """The live rows a compaction folded away, as they were (``id`` = their live id)."""
    check_instance("summary", summary, SessionSummary)
    if not summary.compaction_id:
        return []
    rows = await storage.get_compacted_transcript_entries(
        summary.session_id, compaction_id=summary.compaction_id
    )
    return [
        TranscriptEntry.from_row(
            {name: getattr(row, name) for name in TranscriptEntry.model_fields if name != "id"}
            | {"id": row.original_entry_id}
        )
        for row in rows
    ]


async def mark_repair_status(storage: SessionStorage, summary: SessionSummary, status: str) -> None:
    if not isinstance(summary, SessionSummary):
        raise InvalidInputError(f"summary must be a SessionSummary, not {type(summary).__name__}")
    check_text("status", status)
    if summary.id is None:
        return
    await storage.update_summary_flush_receipt_status(summary.id, status)
    summary.flush_receipt_status = status


async def mark_flush_receipt_status(
    storage: SessionStorage, session_key: str, compaction_id: str, status: str
) -> int:
    check_text("compaction_id", compaction_id, max_length=COMPACTION_ID_MAX_LENGTH)
    check_text("status", status)
    return await storage.update_summary_flush_receipt_status_by_compaction(
        session_key, compaction_id, status
    )
