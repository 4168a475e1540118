"""The transcript, summaries and context states of a session, row by row: the front door
(arguments checked, keys canonicalised) over one use case each."""

from __future__ import annotations

from typing import Any, Unpack

from ..db.lifecycle import StorageLifecycle
from ..keys import agent_key_prefix, canonicalize_session_key
from ..models import (
    CanonicalTranscriptCoverage,
    CompactedTranscriptEntry,
    Cursor,
    SessionContextState,
    SessionSummary,
    TranscriptEntry,
    check_integer,
    check_millis,
    check_optional_integer,
    check_optional_text,
    check_page,
    check_record,
    check_text,
    check_text_list,
)
from ..models.checks import refuse_unknown_fields
from ..models.identity import check_turn_context
from ..models.pages import check_cursor, check_page_size
from ..models.records import ContextStateFilter, StateSelection
from ..usecases import appends, messages, pages, reads
from ..usecases.compaction import summaries as summary_rows
from ..usecases.context import states


def _owned(record: TranscriptEntry | SessionContextState) -> None:
    """The record's key in canonical form (set without validating it a second time)."""
    record.__dict__["session_key"] = canonicalize_session_key(record.session_key)


def _check_fenced(
    entry: object, expected_epoch: object, clock: str, now: object, token_delta: object
) -> None:
    """The arguments of a fenced write (the entry's key made canonical)."""
    check_record("entry", entry, TranscriptEntry)
    check_integer("expected_epoch", expected_epoch)
    check_millis(clock, now)
    check_integer("token_delta", token_delta)
    assert isinstance(entry, TranscriptEntry)
    _owned(entry)


class HistoryRowOperations(StorageLifecycle):
    """Transcript, summary and context-state rows, one unit of work per call."""

    # -- transcript --------------------------------------------------------------------

    async def append_transcript_entry(
        self, entry: TranscriptEntry, *, expected_epoch: int | None = None
    ) -> TranscriptEntry:
        """Insert ``entry`` (its ``id`` is set). With ``expected_epoch`` the insert happens
        only while the session is still the entry's generation (``session_id``) at exactly
        that epoch; otherwise ``StaleEpochError`` and nothing is written."""
        check_record("entry", entry, TranscriptEntry)
        check_optional_integer("expected_epoch", expected_epoch)
        _owned(entry)
        return await appends.insert_entry(self.uow, entry, expected_epoch)

    async def append_message_entry(
        self,
        entry: TranscriptEntry,
        *,
        expected_epoch: int,
        now: int,
        token_delta: int = 0,
    ) -> TranscriptEntry:
        """The manager's append: the fence (key, epoch, session id), the insert and the
        session touch (``updated_at``, ``total_tokens + delta``) commit together or not at
        all, in one statement run in autocommit (docs/semantics.md#fencing); on an SQLite
        without RETURNING, three statements in a write transaction."""
        _check_fenced(entry, expected_epoch, "now", now, token_delta)
        return await appends.append_entry(
            self.uow, entry, expected_epoch=expected_epoch, now=now, token_delta=token_delta
        )

    # -- single-message operations (docs/semantics.md#message-id) --------------------------

    async def upsert_transcript_entry_and_touch(
        self,
        entry: TranscriptEntry,
        *,
        expected_epoch: int,
        updated_at: int,
        token_delta: int = 0,
    ) -> bool:
        """The append by message id, one write transaction: the fence (key, epoch, session
        id; else ``StaleEpochError`` and nothing written), then the lowest live row of the
        generation with ``entry.message_id`` replaced in place (all columns but ``id`` and
        ``created_at``; counters untouched) or ``entry`` inserted (``total_tokens +
        token_delta``, ``total_tokens_fresh`` false), and ``updated_at`` set either way.
        ``entry`` gets the row's ``id`` and ``created_at``; ``True`` iff it was inserted."""
        _check_fenced(entry, expected_epoch, "updated_at", updated_at, token_delta)
        return await appends.upsert_entry(
            self.uow, entry, expected_epoch=expected_epoch, now=updated_at, token_delta=token_delta
        )

    async def delete_transcript_entry(self, session_id: str, message_id: str) -> bool:
        """Delete the live rows of generation ``session_id`` carrying ``message_id`` (every
        duplicate); ``True`` iff there was one. The compacted archive is never touched, and
        the session's counters and ``updated_at`` are left as they are."""
        check_text("session_id", session_id, identifier=True)
        check_text("message_id", message_id, identifier=True)
        return await messages.delete_entry(self.uow, session_id, message_id)

    async def update_transcript_turn_context(
        self, session_key: str, message_id: str, turn_context: dict[str, Any] | None
    ) -> bool:
        """Replace ``turn_context`` on every live and archived row stored under exactly
        ``session_key`` (every generation) with ``message_id``, in one transaction; ``True``
        iff there was one. The key is used as given (the manager canonicalises it)."""
        check_text("session_key", session_key, identifier=True)
        check_text("message_id", message_id, identifier=True)
        context = check_turn_context(turn_context)
        return await messages.update_turn_context(self.uow, session_key, message_id, context)

    async def get_transcript(
        self, session_id: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Live rows of one generation, ``ORDER BY created_at ASC, id ASC``, paginated."""
        check_page(limit, offset)
        return await reads.rows(self.uow, session_id, limit, offset, canonical=False)

    async def get_canonical_transcript(
        self, session_id: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Compacted archive plus live rows, in transcript order, paginated."""
        check_page(limit, offset)
        return await reads.rows(self.uow, session_id, limit, offset, canonical=True)

    async def get_canonical_transcript_page(
        self,
        session_id: str,
        *,
        limit: int,
        before: Cursor | None = None,
        after: Cursor | None = None,
    ) -> tuple[list[TranscriptEntry], bool]:
        """One page of the canonical transcript, oldest first, and whether more rows lie
        beyond it in the direction of travel (docs/semantics.md#pages).

        ``limit`` is an ``int``; below 1 it counts as 1. A cursor is a ``(created_at, id)``
        tuple; one that names no canonical row of ``session_id`` counts as absent, and
        ``before`` wins when both name rows. No cursor: the newest rows (``has_more``: older
        ones exist); ``before``: the newest rows before it (older ones exist); ``after``: the
        oldest rows after it (newer ones exist). The rows come from one statement over both
        tables, so a concurrent compaction can neither duplicate nor drop rows."""
        check_text("session_id", session_id)
        size = check_page_size("limit", limit)
        before = check_cursor("before", before)
        after = check_cursor("after", after)
        return await pages.page_of(self.uow, session_id, size, before, after)

    async def get_canonical_transcript_coverage(
        self, session_id: str
    ) -> CanonicalTranscriptCoverage:
        """Whether the generation's canonical transcript is complete, with the evidence
        (docs/semantics.md#pages); ``(False, 0, False)`` when no session has that id."""
        check_text("session_id", session_id)
        return await pages.coverage_of(self.uow, session_id)

    async def is_canonical_transcript_complete(self, session_id: str) -> bool:
        """``get_canonical_transcript_coverage(session_id).canonical_complete``."""
        check_text("session_id", session_id)
        return (await pages.coverage_of(self.uow, session_id)).canonical_complete

    async def count_transcript_entries(self, session_id: str) -> int:
        """Live rows only."""
        return await reads.live_count(self.uow, session_id)

    async def get_recent_transcript(self, session_id: str, n: int) -> list[TranscriptEntry]:
        """The newest ``n`` live rows of one generation, oldest first (``[]`` for 0). A
        negative ``n`` is refused (upstream returned every row)."""
        check_text("session_id", session_id, identifier=True)
        check_integer("n", n)
        return await reads.recent_rows(self.uow, session_id, n)

    async def get_canonical_transcript_entry(
        self, session_id: str, message_id: str
    ) -> TranscriptEntry | None:
        """The newest row carrying ``message_id`` (``created_at``, then id, descending)
        among the compacted archive (``id`` := the id it had when live) and the live rows
        of one generation; ``None`` when there is none."""
        check_text("session_id", session_id, identifier=True)
        check_text("message_id", message_id, identifier=True)
        return await reads.canonical_row(self.uow, session_id, message_id)

    async def count_transcript_entries_batch(self, session_ids: list[str]) -> dict[str, int]:
        """Live rows per session id: every id given is a key (0 when it has none, or is
        unknown); ``{}`` for no ids. One snapshot, 500 ids per statement."""
        ids = check_text_list("session_ids", session_ids, identifier=True)
        return await reads.live_counts(self.uow, ids)

    async def list_user_transcript_content_batch(
        self, session_ids: list[str], *, limit_per_session: int = 3
    ) -> dict[str, list[str]]:
        """Per session id, the contents of its first ``limit_per_session`` live ``user``
        rows whose content is a non-empty string, in transcript order; every id given is a
        key (``[]`` when none). The compacted archive is not read. One snapshot, 300 ids per
        statement."""
        ids = check_text_list("session_ids", session_ids, identifier=True)
        check_integer("limit_per_session", limit_per_session)
        return await reads.user_contents(self.uow, ids, limit_per_session)

    async def get_compacted_transcript_entries(
        self, session_id: str, *, compaction_id: str | None = None
    ) -> list[CompactedTranscriptEntry]:
        return await summary_rows.compacted_entries(self.uow, session_id, compaction_id)

    async def delete_transcript(self, session_id: str) -> None:
        """Delete the live rows and the compacted archive of one generation."""
        check_text("session_id", session_id)
        await reads.delete_transcript(self.uow, session_id)

    # -- summaries ---------------------------------------------------------------------

    async def save_summary(self, summary: SessionSummary) -> SessionSummary:
        """Insert; ``compaction_index`` is assigned in the transaction (max + 1 per session)."""
        check_record("summary", summary, SessionSummary)
        summary.session_key = canonicalize_session_key(summary.session_key)
        return await summary_rows.save(self.uow, summary)

    async def get_all_summaries(self, session_id: str) -> list[SessionSummary]:
        return await summary_rows.of_generation(self.uow, session_id)

    async def get_latest_summary(self, session_id: str) -> SessionSummary | None:
        return await summary_rows.latest_of_generation(self.uow, session_id)

    async def delete_summaries(self, session_id: str) -> None:
        check_text("session_id", session_id)
        await summary_rows.delete_of_generation(self.uow, session_id)

    async def list_degraded_summaries(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[SessionSummary]:
        """Summaries whose flush receipt is ``degraded_forensic`` or ``failed_retryable``."""
        check_page(limit, 0)
        prefix = agent_key_prefix(agent_id) if agent_id is not None else None
        return await summary_rows.degraded(self.uow, prefix, limit)

    async def update_summary_flush_receipt_status(self, summary_id: int, status: str) -> int:
        check_integer("summary_id", summary_id, minimum=-(2**63))
        check_text("status", status)
        return await summary_rows.set_flush_status(self.uow, summary_id, status)

    async def update_summary_flush_receipt_status_by_compaction(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        key = canonicalize_session_key(session_key)
        check_text("compaction_id", compaction_id)
        check_text("status", status)
        return await summary_rows.set_flush_status_by_compaction(
            self.uow, key, compaction_id, status
        )

    # -- context states ----------------------------------------------------------------

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        check_record("state", state, SessionContextState)
        _owned(state)
        return await states.save_state(self.uow, state)

    async def get_context_states(
        self, session_key: str, **selection: Unpack[ContextStateFilter]
    ) -> list[SessionContextState]:
        """States of the key (every generation), ``created_at`` then id order; keyword
        options ``provider``, ``state_kind`` (``None``: any) and ``valid_only`` (``True``)."""
        refuse_unknown_fields("get_context_states", selection, ContextStateFilter)
        key = canonicalize_session_key(session_key)
        return await states.states(self.uow, key, **selection)

    async def invalidate_context_states(
        self,
        session_key: str,
        *,
        reason: str = "invalidated",
        **selection: Unpack[StateSelection],
    ) -> int:
        """Invalidate the key's valid states (of ``provider`` and ``state_kind`` when
        given); how many changed."""
        refuse_unknown_fields("invalidate_context_states", selection, StateSelection)
        key = canonicalize_session_key(session_key)
        check_optional_text("provider", selection.get("provider"))
        check_optional_text("state_kind", selection.get("state_kind"))
        check_text("reason", reason)
        return await states.invalidate_states(self.uow, key, reason, **selection)

    async def get_summary(self, summary_id: int) -> SessionSummary | None:
        """One compaction summary by its id (the repair queue addresses summaries so)."""
        return await summary_rows.by_id(self.uow, summary_id)
