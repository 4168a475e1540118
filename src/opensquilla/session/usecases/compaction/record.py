"""The summary row a compaction stores, built in one place for both paths: the compaction
(its summariser's result) and ``persist_compaction_result`` (the caller's summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...models import SessionNode, SessionSummary, TranscriptEntry
from ...support.clock import new_compaction_id
from .options import PersistOptions, flush_status


def summary_record(
    node: SessionNode,
    options: PersistOptions,
    removed: Sequence[TranscriptEntry],
    *,
    kept_count: int,
    now: int,
    covered_floor: int = 0,
    **fields: Any,
) -> SessionSummary:
    """The summary row of a compaction of ``node``'s generation that folds ``removed``
    away: the record options (``compaction_id``, else a new one; ``trigger_reason``; the
    stored flush-receipt status), the counts, the last live row id it covers (at least
    ``covered_floor``, what the checkpoints it replaces covered), and ``fields`` (the
    summary's text, payload, format, coverage...)."""
    return SessionSummary(
        session_id=node.session_id,
        session_key=node.session_key,
        compaction_id=options.get("compaction_id") or new_compaction_id(),
        trigger_reason=options.get("trigger_reason"),
        removed_count=len(removed),
        kept_count=kept_count,
        flush_receipt_status=flush_status(options.get("flush_receipt_status")),
        covered_through_id=max([covered_floor, *(entry.id or 0 for entry in removed)]),
        created_at=now,
        **fields,
    )
