"""SessionManager: the one front door. Everything is addressed by session key.

Each method is one use case from ``usecases/``, which opens the unit of work it needs; the
manager holds the wiring (storage, the generation cache, the summariser, the append
options) and no logic of its own. It never writes SQL. Its transcript calls are in
``transcript.py`` (:class:`TranscriptCalls`), its search calls in ``search.py``
(:class:`SearchCalls`), its reset-archive calls in ``archives.py`` (:class:`ArchiveCalls`),
its prepared intents in ``prepared.py`` (:class:`PreparedCalls`), its context-state calls in
``context_states.py`` (:class:`ContextStateCalls`), the rest here.
"""

from __future__ import annotations

from typing import Any, Unpack

from ..compaction import CompactionConfig, CompactionResult, Summarizer
from ..models import (
    CompactionSourceSnapshot,
    ContextView,
    SessionIntent,
    SessionListCursor,
    SessionListPage,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
)
from ..models.reports import DeletionPreview, ResetReport
from ..observe import instrumented
from ..storage import SessionStorage
from ..usecases import context, overview, repair, retention
from ..usecases.compaction import Compactor
from ..usecases.compaction_options import (
    CompactionOptions,
    MutationContext,
    PersistSourceOptions,
)
from ..usecases.compaction_source import capture_compaction_source
from ..usecases.context_view import context_view
from ..usecases.generations import GenerationCache
from ..usecases.lifecycle import Lifecycle
from ..usecases.overview import ArchiveReport, StoreStats
from ..usecases.reset import Resets
from ..usecases.transcript import MemorySyncNotify, Transcripts
from .archives import ArchiveCalls
from .context_states import ContextStateCalls
from .prepared import PreparedCalls
from .search import SearchCalls
from .transcript import TranscriptCalls


# Every public coroutine is an operation (debug record, span, histogram); the memory-sync
# callback is the application's own code, timed by the application.
@instrumented(
    "",
    system=lambda manager: manager.storage.backend,
    exclude=frozenset({"notify_message_appended"}),
)
class SessionManager(TranscriptCalls, SearchCalls, ArchiveCalls, PreparedCalls, ContextStateCalls):
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
        commit_against_source: bool | None = None,
        archive_required: bool = False,
    ) -> None:
        """A manager on ``storage``.

        ``inject_time_prefix=True`` (the default, as the older store did) makes
        ``append_message`` store each *user* message with its time as a first line:
        ``"hello"`` is stored and returned as ``"[2026-11-30T12:34+00:00 Mon UTC]\nhello"``
        (zone: ``time_prefix_tz``, else ``$OPENSQUILLA_TIMEZONE``, ``$TZ``, the local zone).
        Pass ``inject_time_prefix=False`` to store content exactly as given
        (docs/semantics.md#time-prefix).
        """
        self._storage = storage
        self._generations = GenerationCache(storage)
        self._resets = Resets(storage, self._generations, archive_required=archive_required)
        self._lifecycle = Lifecycle(storage, self._generations, self._resets)
        self._transcripts = Transcripts(
            storage,
            self._generations,
            memory_sync_notify=memory_sync_notify,
            inject_time_prefix=inject_time_prefix,
            time_prefix_tz=time_prefix_tz,
        )
        self._compactor = Compactor(
            storage, summarizer, commit_against_source=commit_against_source
        )

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
        goes on, or, with ``SessionManager(..., archive_required=True)``, raises
        ``ArchiveWriteError`` (an ``OSError``) and changes nothing. A concurrent change
        makes the reset re-read and try again."""
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

    # -- summaries and context states --------------------------------------------------

    async def get_summaries(self, session_key: str) -> list[SessionSummary]:
        """The current generation's compaction summaries, oldest first."""
        return await context.summaries(self._storage, self._generations, session_key)

    async def get_latest_summary(self, session_key: str) -> SessionSummary | None:
        """The current generation's newest compaction summary, or ``None``."""
        return await context.latest_summary(self._storage, self._generations, session_key)

    async def get_context_view(self, session_key: str, *, max_tokens: int) -> ContextView:
        """What a prompt needs, from one snapshot: the latest summary and the newest live
        messages that fit ``max_tokens`` with it, starting on a turn boundary (docs/reading.md,
        "Reading a session")."""
        return await context_view(self._storage, session_key, max_tokens)

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
        ``mutation_context`` (a lock around the read and the commit), ``summarizer``,
        ``protected_boundary_message_id`` (that live row and every later one stay live;
        none carries it: skipped with ``protected_boundary_missing``, nothing called or
        written)."""
        return await self._compactor.compact_with_result(
            session_key, context_window_tokens, config, custom_instructions, **options
        )

    async def persist_compaction_result(
        self,
        session_key: str,
        summary: str,
        kept_entries: list[dict[str, Any]],
        **options: Unpack[PersistSourceOptions],
    ) -> bool:
        """Store a summary produced elsewhere and keep ``kept_entries`` as the live tail,
        positionally (docs/semantics.md#persist): a dict keeps the live row at its position
        when role and content match (``match_kept="role"``, upstream HEAD's opt-in: role
        alone), else it is a new row. An empty summary writes nothing. With
        ``source_entries`` (and ``source_preimage``, ``removed_count``, optionally the
        boundary ids, all from :meth:`capture_compaction_source`): archive the first
        ``removed_count`` source rows if the source is still the transcript's prefix; the
        rest and any row appended since stay live with their ids (``kept_entries`` is
        ignored; docs/semantics.md#compaction-source)."""
        return await self._compactor.persist_compaction_result(
            session_key, summary, kept_entries, **options
        )

    async def capture_compaction_source(
        self,
        session_key: str,
        *,
        boundary_message_id: str | None = None,
        transcript_entries: list[TranscriptEntry] | None = None,
    ) -> CompactionSourceSnapshot:
        """The rows an inline compaction plans on, with their preimage: ``transcript_entries``
        if given (no read), else the live transcript; through ``boundary_message_id`` if
        given (unknown: an empty snapshot, which no install accepts)."""
        return await capture_compaction_source(
            self._storage,
            session_key,
            boundary_message_id=boundary_message_id,
            transcript_entries=transcript_entries,
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
        """Row counts of the whole store, plus its reset archives: this store's files in the
        archive directory on this machine, and its ``session_archives`` rows."""
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
