"""The atomic compaction commit (docs/semantics.md#compaction and #persist).

The summariser runs outside any transaction; this commit then re-checks the preimage inside
its write transaction. Nothing is written unless the session is still the expected
generation and its live transcript still holds the rows that were planned on: exactly, or
(committing against a captured source) as its prefix, rows appended meanwhile staying live
with their ids. An append that landed meanwhile is never lost, with or without a caller lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...db.uow import UnitOfWork
from ...keys import CanonicalKey
from ...models import SessionContextState, SessionNode, SessionSummary, TranscriptEntry
from ..context.records import PORTABLE_STATE_KIND, context_fingerprint, read_context_records


def portable_states(summary: SessionSummary, now: int) -> list[SessionContextState]:
    """The portable context state a structured summary leaves behind."""
    if summary.summary_format != "structured_v1" or summary.summary_payload is None:
        return []
    payload = dict(summary.summary_payload)
    if summary.compaction_id:
        payload["compaction_id"] = summary.compaction_id
    return [
        SessionContextState(
            session_id=summary.session_id,
            session_key=summary.session_key,
            provider="portable",
            model=None,
            state_kind=PORTABLE_STATE_KIND,
            payload=payload,
            covered_through_id=summary.covered_through_id,
            created_at=now,
            portable=True,
            cacheable=True,
            valid=True,
        )
    ]


class ContextStateChanged(Exception):
    """The checkpoints a rolling compaction replaces changed before its commit; raised
    inside the commit's transaction (which it rolls back, nothing written) and turned into
    the ``stale_context_state`` skip by the compaction use case."""


async def rewrite_compacted_session(
    uow: UnitOfWork,
    planned: SessionNode,
    planned_live: Sequence[TranscriptEntry],
    *,
    expected_prefix: Sequence[TranscriptEntry] = (),
    archive_count: int,
    summary: SessionSummary | None,
    drop_ids: Sequence[int] = (),
    new_entries: Sequence[TranscriptEntry] = (),
    now: int,
    allow_appended: bool = False,
    expected_context_fingerprint: str | None = None,
) -> bool:
    """In one transaction, when the preimage still holds (the session is still the
    generation ``planned`` was read at, and its live rows are still ``planned_live``): the
    summary (its ``compaction_index`` assigned here), the first ``archive_count`` live rows
    copied to the compacted archive and deleted (the rest keep their ids), ``drop_ids`` deleted,
    ``new_entries`` appended, the summary's portable context state saved, and
    ``compaction_count + 1`` and ``updated_at`` set: ``True``. Otherwise ``False``, and
    nothing is written.

    The preimage: the live rows are still ``planned_live``'s ids, and the first of them are
    still exactly ``expected_prefix`` (the rows the caller's decision read, as it read
    them): a row can change in place (an upsert by message id, a rebound turn context),
    and a summary of its old values must not replace it.

    ``allow_appended`` (a commit against a captured source, docs/semantics.md#compaction-source):
    the live rows need only *start* with ``planned_live``'s ids; rows after them were appended
    meanwhile and stay live, ids included.

    ``expected_context_fingerprint`` (a rolling checkpoint, docs/semantics.md#rolling-checkpoints):
    the generation's active context records must still have that fingerprint, or the summary,
    which replaces them, would replace a checkpoint it never read: else
    :class:`ContextStateChanged`, nothing written.

    One write unit of work. The values are trusted: the compaction and persist use cases
    build them from rows they read (their front doors checked the caller's arguments)."""
    key = CanonicalKey(planned.session_key)
    expected_live_ids = [entry.id or 0 for entry in planned_live]
    async with uow.write() as tx:
        node = await tx.sessions.get(key, lock="update")
        if node is None or (node.session_id, node.epoch) != (planned.session_id, planned.epoch):
            return False
        positions = await tx.compaction.live_positions(node.session_id, session_key=key)
        live_ids = [row_id for row_id, _ in positions]
        if allow_appended:
            live_ids = live_ids[: len(expected_live_ids)]
        if live_ids != expected_live_ids:
            return False
        if expected_prefix and list(expected_prefix) != await tx.transcript.list_live(
            node.session_id, session_key=node.session_key, limit=len(expected_prefix)
        ):
            return False
        if expected_context_fingerprint is not None:
            records = await read_context_records(tx, key, node.session_id, now)
            if context_fingerprint(records) != expected_context_fingerprint:
                raise ContextStateChanged(key)
        if summary is not None:
            summary.session_id, summary.session_key = node.session_id, key
            summary.id, summary.compaction_index = await tx.summaries.insert(summary)
        if archive_count > 0:
            last_id, last_created = positions[archive_count - 1]
            boundary = (last_created, last_id)
            await tx.compaction.archive_prefix(
                session_id=node.session_id,
                session_key=key,
                boundary=boundary,
                compaction_id=summary.compaction_id if summary else None,
                compaction_index=summary.compaction_index if summary else None,
                archived_at=now,
            )
            await tx.compaction.delete_prefix(node.session_id, boundary, session_key=key)
        await tx.compaction.delete_ids(node.session_id, drop_ids, session_key=key)
        for entry in new_entries:
            entry.session_id, entry.session_key = node.session_id, key
        await tx.transcript.insert_many(new_entries)
        saved = portable_states(summary, now) if summary is not None else []
        for state in saved:
            state.id = await tx.states.insert(state)
        await tx.sessions.add_compaction(
            key, now, session_id=node.session_id, epoch=node.epoch, count=node.compaction_count
        )
    return True
