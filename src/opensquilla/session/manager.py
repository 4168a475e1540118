"""SessionManager: the one front door. Everything is addressed by session key.

Each method is one use case from ``usecases/``, which opens the unit of work it needs; the
manager holds the wiring (storage, the generation cache, the summariser, the append
options) and no logic of its own. It never writes SQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

from .compaction import CompactionConfig, CompactionResult, Summarizer
from .models import (
    AssistantMessageReservation,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    ContextView,
    Cursor,
    SessionContextState,
    SessionIntent,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
)
from .models.reports import DeletionPreview, ResetReport
from .storage import SessionStorage
from .usecases import branching, context, messages, overview, pages, reads, repair, retention
from .usecases.compaction import CompactionOptions, Compactor, MutationContext, PersistOptions
from .usecases.context_view import context_view
from .usecases.generations import GenerationCache
from .usecases.lifecycle import Lifecycle
from .usecases.overview import ArchiveReport, StoreStats
from .usecases.reset import Resets
from .usecases.transcript import MemorySyncNotify, Transcripts


class SessionManager:
    """Session lifecycle, transcript, intents, branching, compaction, context states and
    retention, by session key."""

    def __init__(
        self,
        storage: SessionStorage,
        memory_sync_notify: MemorySyncNotify | None = None,
        *,
        inject_time_prefix: bool = True,
        time_prefix_tz: str | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self._storage = storage
        self._generations = GenerationCache(storage)
        self._resets = Resets(storage, self._generations)
        self._lifecycle = Lifecycle(storage, self._generations, self._resets)
        self._transcripts = Transcripts(
            storage,
            self._generations,
            memory_sync_notify=memory_sync_notify,
            inject_time_prefix=inject_time_prefix,
            time_prefix_tz=time_prefix_tz,
        )
        self._compactor = Compactor(storage, summarizer)

    @property
    def storage(self) -> SessionStorage:
        return self._storage

    def get_cached_epoch(self, session_key: str) -> int | None:
        return self._generations.cached_epoch(session_key)

    def set_cached_epoch(self, session_key: str, epoch: int) -> None:
        self._generations.observe_epoch(session_key, epoch)

    # -- sessions ----------------------------------------------------------------------

    async def create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> SessionNode:
        """A new session (``SessionExistsError``, a ``ValueError``, if the key is taken)."""
        return await self._lifecycle.create(session_key, agent_id, kwargs)

    async def get_session(self, session_key: str) -> SessionNode | None:
        """The session row, or ``None``; never touches ``updated_at``."""
        return await self._lifecycle.get(session_key)

    async def get_or_create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> tuple[SessionNode, bool]:
        """The existing row untouched, or a new one; race-safe (exactly one creator wins)."""
        return await self._lifecycle.get_or_create(session_key, agent_id, kwargs)

    async def apply_intent(
        self,
        session_key: str,
        intent: SessionIntent | str,
        /,
        *,
        agent_id: str = "main",
        **create_kwargs: Any,
    ) -> tuple[SessionNode, bool]:
        """Apply a session intent; returns ``(node, created_or_rotated)``.

        A missing key is created for every intent. ``NEW_CHAT`` on an existing key is a
        ``SessionKeyConflictError``; ``RESET_SAME_KEY`` starts a new generation (see
        :meth:`reset`); ``CONTINUE`` returns the row untouched.
        """
        return await self._lifecycle.apply_intent(session_key, intent, agent_id, create_kwargs)

    async def list_sessions(
        self,
        agent_id: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        spawned_by: str | None = None,
        *,
        parent_session_key: str | None = None,
    ) -> list[SessionNode]:
        """Sessions by recent activity (``updated_at`` then key, both descending)."""
        return await self._storage.list_sessions(
            agent_id, status, limit, offset, spawned_by, parent_session_key=parent_session_key
        )

    async def list_sessions_page(
        self,
        *,
        limit: int = 100,
        cursor: SessionListCursor | None = None,
        agent_id: str | None = None,
        status: str | None = None,
    ) -> SessionListPage:
        """One keyset page of :meth:`list_sessions`' order: ``max(1, limit)`` sessions
        strictly after ``cursor``; pass ``page.next_cursor`` for the next one."""
        return await self._storage.list_sessions_page(
            limit=limit, cursor=cursor, agent_id=agent_id, status=status
        )

    async def count_sessions(self) -> int:
        return await self._storage.count_sessions()

    async def delete(self, session_key: str) -> bool:
        """Delete the session and every row stored under its key; ``False`` if none."""
        return await self._storage.delete_session(session_key)

    async def reset(self, session_key: str) -> SessionNode:
        """Start a new generation of the key; see :meth:`reset_with_report`."""
        return (await self._resets.reset(session_key)).session

    async def reset_with_report(self, session_key: str) -> ResetReport:
        """Start a new generation of the key, in one transaction, and say where the old one
        went (docs/semantics.md#reset): its transcript, compacted archive and summaries are
        archived to a file and deleted, its context states invalidated, the epoch bumped and
        the identity and counters renewed. A failed archive write is logged and the reset
        goes on. A concurrent change makes the reset re-read and try again."""
        return await self._resets.reset(session_key)

    async def resume(self, session_key: str) -> SessionNode:
        """Touch ``updated_at``; ``KeyError`` if the session is missing."""
        return await self._lifecycle.resume(session_key)

    async def update(self, session_key: str, /, **fields: Any) -> SessionNode:
        """Set mutable fields (one narrow UPDATE); identity, key and epoch are refused."""
        return await self._lifecycle.update(session_key, fields)

    async def finish(
        self, session_key: str, status: SessionStatus | str = SessionStatus.DONE
    ) -> SessionNode:
        """Set the final status, ``ended_at`` and ``runtime_ms`` in one statement."""
        return await self._lifecycle.finish(session_key, status)

    async def archive(self, session_key: str) -> None:
        """A soft finish (status ``done``); nothing is moved or deleted."""
        await self._lifecycle.finish(session_key, SessionStatus.DONE)

    # -- transcript --------------------------------------------------------------------

    async def append_message(
        self,
        session_key: str,
        role: str,
        content: str | None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        reasoning_content: str | None = None,
        turn_usage: dict[str, Any] | None = None,
        token_count: int | None = None,
        provenance: Mapping[str, Any] | None = None,
        turn_context: dict[str, Any] | None = None,
        message_id: str | None = None,
        assistant_message_id: str | None = None,
    ) -> TranscriptEntry:
        """Append one message to the current generation and return it (with its ``id``).

        The insert, the epoch fence and the session touch commit together. ``token_count``
        is added to ``total_tokens`` only when no ``turn_usage`` is given (usage is then
        accounted elsewhere); ``reasoning_content`` and ``turn_usage`` are kept for the
        assistant role only. With ``message_id`` (or ``assistant_message_id``, the same id)
        the append is an upsert (docs/semantics.md#message-id): the live row with that id
        is replaced in place, keeping its ``id`` and ``created_at``, and tokens are counted
        only when the row is new.
        """
        return await self._transcripts.append(
            session_key,
            role,
            content,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            reasoning_content=reasoning_content,
            turn_usage=turn_usage,
            token_count=token_count,
            provenance=provenance,
            turn_context=turn_context,
        )

    async def remove_message(self, session_key: str, message_id: str) -> bool:
        """Delete the current generation's live rows with ``message_id``; ``False`` if none
        (or no session). Counters and ``updated_at`` are not adjusted."""
        return await messages.remove_message(self._storage, session_key, message_id)

    async def inject_message(
        self,
        session_key: str,
        message: str,
        provenance: Mapping[str, Any] | str = "inter_session",
    ) -> bool:
        """Append ``message`` as a user message with ``provenance`` (a string is its
        ``kind``); ``KeyError`` if the session is missing."""
        return await messages.inject_message(self._transcripts, session_key, message, provenance)

    async def update_message_turn_context(
        self, session_key: str, message_id: str, turn_context: dict[str, Any] | None
    ) -> bool:
        """Rebind the turn context of every live and archived row of the key (every
        generation) with ``message_id``; ``True`` iff there was one."""
        return await messages.update_message_turn_context(
            self._storage, session_key, message_id, turn_context
        )

    async def prepare_message(
        self,
        session_key: str,
        role: str,
        content: str | None,
        *,
        message_id: str | None = None,
        assistant_message_id: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        reasoning_content: str | None = None,
        turn_usage: dict[str, Any] | None = None,
        turn_context: dict[str, Any] | None = None,
        token_count: int | None = None,
        provenance: Mapping[str, Any] | None = None,
        session_node: SessionNode | None = None,
    ) -> tuple[TranscriptEntry, int]:
        """The entry :meth:`append_message` would write and its ``expected_epoch``, writing
        nothing; ``turn_context=None`` takes the ambient ``current_turn_context``."""
        return await messages.prepare_message(
            self._transcripts,
            self._generations,
            session_key,
            role,
            content,
            message_id=message_id,
            assistant_message_id=assistant_message_id,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            reasoning_content=reasoning_content,
            turn_usage=turn_usage,
            turn_context=turn_context,
            token_count=token_count,
            provenance=provenance,
            session_node=session_node,
        )

    @staticmethod
    def reserve_assistant_message(
        turn_id: str,
        assistant_message_id: str,
        session_key: str,
        channel_id: str | None = None,
    ) -> AssistantMessageReservation:
        """The id the assistant reply of ``turn_id`` will be upserted under; writes nothing."""
        return messages.reserve_assistant_message(
            turn_id, assistant_message_id, session_key, channel_id
        )

    async def notify_message_appended(self, entry: TranscriptEntry) -> None:
        """Fire the memory-sync callback for an entry the caller wrote itself."""
        await messages.notify_message_appended(self._transcripts, entry)

    async def get_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """The live transcript of the current generation, in order."""
        return await self._transcripts.live(session_key, limit, offset)

    async def get_canonical_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Everything the current generation said: compacted archive plus live rows."""
        return await self._transcripts.canonical(session_key, limit, offset)

    async def get_canonical_transcript_page(
        self,
        session_key: str,
        *,
        limit: int,
        before: Cursor | None = None,
        after: Cursor | None = None,
    ) -> CanonicalTranscriptPage:
        """One page of the current generation's canonical transcript, oldest first
        (docs/semantics.md#pages), with ``has_more`` and ``canonical_complete`` (read after
        the page). Cursors are ``(created_at, id)`` of a row; an unknown one counts as
        absent and ``before`` wins over ``after``. ``limit`` must be an ``int``; as
        upstream does, below 1 it counts as 1 (compatibility). ``SessionNotFoundError`` for
        a missing key."""
        return await pages.canonical_page(
            self._storage, self._generations, session_key, limit=limit, before=before, after=after
        )

    async def get_canonical_transcript_coverage(
        self, session_key: str
    ) -> CanonicalTranscriptCoverage:
        """Whether the current generation's canonical transcript is complete, with the
        compaction count and whether it was inherited from a parent."""
        return await pages.coverage(self._storage, self._generations, session_key)

    async def is_canonical_transcript_complete(self, session_key: str) -> bool:
        """``get_canonical_transcript_coverage(session_key).canonical_complete``."""
        return (await self.get_canonical_transcript_coverage(session_key)).canonical_complete

    def iter_canonical_transcript(
        self, session_key: str, *, page_size: int = 500
    ) -> AsyncIterator[TranscriptEntry]:
        """Every canonical row of the current generation, oldest first, read ``page_size``
        (an ``int``, below 1 counting as 1) rows at a time; what concurrent appends,
        compactions and resets do to the walk: ``usecases.pages.iter_canonical_transcript``."""
        return pages.iter_canonical_transcript(self._storage, session_key, page_size=page_size)

    async def count_transcript_entries(self, session_key: str) -> int:
        """How many live rows the current generation has."""
        return await self._transcripts.count(session_key)

    async def get_recent_transcript(self, session_key: str, n: int) -> list[TranscriptEntry]:
        """The newest ``n`` live messages of the current generation, oldest first."""
        return await reads.recent_transcript(self._storage, self._generations, session_key, n)

    async def get_canonical_transcript_entry(
        self, session_key: str, message_id: str
    ) -> TranscriptEntry | None:
        """The newest message with ``message_id`` in the compacted archive and the live
        transcript of the current generation, or ``None``."""
        return await reads.canonical_entry(
            self._storage, self._generations, session_key, message_id
        )

    async def read_transcript(
        self, session_key: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The live transcript as JSON-ready dicts (``model_dump(mode="json")``)."""
        return await reads.read_transcript(self._storage, self._generations, session_key, limit)

    async def count_transcript_entries_batch(self, session_keys: list[str]) -> dict[str, int]:
        """Live message counts by key, keyed as given (0 for a missing key)."""
        return await reads.count_by_key(self._storage, session_keys)

    async def list_user_transcript_content_batch(
        self, session_keys: list[str], *, limit_per_session: int = 3
    ) -> dict[str, list[str]]:
        """The first ``limit_per_session`` non-empty user messages of each key, keyed as
        given (``[]`` for a missing key)."""
        return await reads.user_content_by_key(
            self._storage, session_keys, limit_per_session=limit_per_session
        )

    async def truncate(self, session_key: str, max_messages: int = 20) -> dict[str, Any]:
        """Keep the newest ``max_messages`` live entries (one transaction)."""
        return await self._transcripts.truncate(session_key, max_messages)

    async def branch(
        self,
        parent_session_key: str,
        new_session_key: str,
        fork_transcript: bool = False,
        max_fork_tokens: int | None = None,
        status: SessionStatus | str = SessionStatus.RUNNING,
        fork_before_message_id: str | None = None,
    ) -> SessionNode:
        """A child session of ``parent_session_key`` (docs/semantics.md#branching), in one
        transaction: with ``fork_transcript`` a full fork (live transcript, compacted
        archive, summaries, valid context states) or, with ``fork_before_message_id``, a
        prefix fork, when it fits ``max_fork_tokens``. An existing child key is refused."""
        return await branching.branch(
            self._storage,
            parent_session_key,
            new_session_key,
            fork_transcript=fork_transcript,
            max_fork_tokens=max_fork_tokens,
            status=status,
            fork_before_message_id=fork_before_message_id,
        )

    # -- summaries and context states --------------------------------------------------

    async def get_summaries(self, session_key: str) -> list[SessionSummary]:
        """The current generation's compaction summaries, oldest first."""
        return await context.summaries(self._storage, self._generations, session_key)

    async def get_latest_summary(self, session_key: str) -> SessionSummary | None:
        """The current generation's newest compaction summary, or ``None``."""
        return await context.latest_summary(self._storage, self._generations, session_key)

    async def get_context_view(self, session_key: str, *, max_tokens: int) -> ContextView:
        """What a prompt needs, from one snapshot: the latest summary and the newest live
        messages that fit ``max_tokens`` with it, starting on a turn boundary (README,
        "Reading a session")."""
        return await context_view(self._storage, session_key, max_tokens)

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        return await context.save_state(self._storage, state)

    async def get_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        valid_only: bool = True,
    ) -> list[SessionContextState]:
        """States of the key (``[]`` for an unknown key)."""
        return await context.states(self._storage, session_key, provider, state_kind, valid_only)

    async def invalidate_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        reason: str = "invalidated",
    ) -> int:
        return await context.invalidate_states(
            self._storage, session_key, provider, state_kind, reason
        )

    # -- retention ---------------------------------------------------------------------

    async def prune_stale(self, max_age_ms: int) -> int:
        """Delete sessions not updated for ``max_age_ms``; how many were deleted."""
        return await retention.prune_stale(self._storage, retention.cutoff(max_age_ms))

    async def cap_entries(self, max_entries: int = 500) -> int:
        """Keep at most ``max_entries`` sessions, deleting the least recently updated."""
        return await retention.cap_sessions(self._storage, max_entries)

    # -- compaction --------------------------------------------------------------------

    async def compact(
        self,
        session_key: str,
        context_window_tokens: int,
        config: CompactionConfig | None = None,
        custom_instructions: str | None = None,
        *,
        mutation_context: MutationContext | None = None,
    ) -> str:
        """Compact if needed; the summary, or ``""`` when nothing was removed."""
        result = await self._compactor.compact_with_result(
            session_key,
            context_window_tokens,
            config,
            custom_instructions,
            mutation_context=mutation_context,
        )
        return result.summary if result.removed_count else ""

    async def compact_with_result(
        self,
        session_key: str,
        context_window_tokens: int,
        config: CompactionConfig | None = None,
        custom_instructions: str | None = None,
        **options: Unpack[CompactionOptions],
    ) -> CompactionResult:
        """Fold the oldest part of the live transcript into an out-of-band summary
        (docs/semantics.md#compaction): the removed rows move to the compacted archive, the
        summary and a portable context state are saved and ``compaction_count`` grows, all
        in one transaction; or nothing changes and the result says why (``skip_reason``,
        ``stale_preimage`` when the transcript changed while the summariser ran). Options:
        ``compaction_id``, ``trigger_reason``, ``flush_receipt_status``,
        ``mutation_context`` (a lock around the read and the commit), ``summarizer``."""
        return await self._compactor.compact_with_result(
            session_key, context_window_tokens, config, custom_instructions, **options
        )

    async def persist_compaction_result(
        self,
        session_key: str,
        summary: str,
        kept_entries: list[dict[str, Any]],
        **options: Unpack[PersistOptions],
    ) -> bool:
        """Store a summary produced elsewhere and keep ``kept_entries`` as the live tail,
        positionally (docs/semantics.md#persist). An empty summary writes nothing."""
        return await self._compactor.persist_compaction_result(
            session_key, summary, kept_entries, **options
        )

    async def list_degraded_compactions(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[SessionSummary]:
        """The repair queue: summaries whose memory flush was degraded or must be retried."""
        return await repair.list_degraded(self._storage, agent_id=agent_id, limit=limit)

    async def get_compaction(self, summary_id: int) -> SessionSummary | None:
        """One compaction summary by its id (the repair queue addresses summaries so)."""
        return await self._storage.get_summary(summary_id)

    async def archive_report(self) -> ArchiveReport:
        """The reset archive files of this store (published, staged, settled at start)."""
        return await overview.archive_report(self._storage)

    async def stats(self) -> StoreStats:
        """Row counts of the whole store, plus the reset archive files on this machine."""
        return await overview.collect_stats(self._storage)

    async def get_compaction_preimage(self, summary: SessionSummary) -> list[TranscriptEntry]:
        return await repair.preimage(self._storage, summary)

    async def mark_compaction_repair_status(self, summary: SessionSummary, status: str) -> None:
        await repair.mark_repair_status(self._storage, summary, status)

    async def mark_compaction_flush_receipt_status(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        return await repair.mark_flush_receipt_status(
            self._storage, session_key, compaction_id, status
        )

    # -- previews: what a deleting operation would remove now, nothing changed ---------

    async def preview_reset(self, session_key: str) -> DeletionPreview:
        return await self._resets.preview(session_key)

    async def preview_truncate(self, session_key: str, max_messages: int = 20) -> DeletionPreview:
        return await self._transcripts.preview_truncate(session_key, max_messages)

    async def preview_prune_stale(self, max_age_ms: int) -> DeletionPreview:
        return await retention.preview_prune(self._storage, retention.cutoff(max_age_ms))

    async def preview_cap_entries(self, max_entries: int = 500) -> DeletionPreview:
        return await retention.preview_cap(self._storage, max_entries)
