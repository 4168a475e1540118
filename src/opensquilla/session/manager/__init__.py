"""SessionManager: the one front door. Everything is addressed by session key.

Each method is one use case from ``usecases/``, which opens the unit of work it needs; the
manager holds the wiring (storage, the generation cache, the summariser, the append
options) and no logic of its own. It never writes SQL. Its transcript calls are in
``transcript.py`` (:class:`TranscriptCalls`), its search calls in ``search.py``
(:class:`SearchCalls`), its reset-archive calls in ``archives.py`` (:class:`ArchiveCalls`),
its prepared intents in ``prepared.py`` (:class:`PreparedCalls`), its context-state calls in
``context_states.py`` (:class:`ContextStateCalls`), its session calls (lifecycle, listing,
reset, retention, stats) in ``sessions.py`` (:class:`SessionCalls`), its branch in
``branching.py`` (:class:`BranchCalls`), the rest here.
"""

from __future__ import annotations

from typing import Any, Unpack

from ..compaction import CompactionConfig, CompactionResult, Summarizer
from ..models import (
    CompactionSourceSnapshot,
    ContextView,
    SessionSummary,
    TranscriptEntry,
)
from ..models.reports import DeletionPreview
from ..observe import instrumented
from ..storage import SessionStorage
from ..usecases import context, repair
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
from ..usecases.reset import Resets
from ..usecases.transcript import MemorySyncNotify, Transcripts
from .archives import ArchiveCalls
from .branching import BranchCalls
from .context_states import ContextStateCalls
from .prepared import PreparedCalls
from .search import SearchCalls
from .sessions import SessionCalls
from .transcript import TranscriptCalls


# Every public coroutine is an operation (debug record, span, histogram); the memory-sync
# callback is the application's own code, timed by the application.
@instrumented(
    "",
    system=lambda manager: manager.storage.backend,
    exclude=frozenset({"notify_message_appended"}),
)
class SessionManager(
    SessionCalls,
    TranscriptCalls,
    BranchCalls,
    SearchCalls,
    ArchiveCalls,
    PreparedCalls,
    ContextStateCalls,
):
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
        resets = Resets(
            self._generations,
            storage.archive_place,
            archive_required=archive_required,
            archive_lost=storage.count_lost_reset_archive,
        )
        self._lifecycle = Lifecycle(self._generations, resets)
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

    async def preview_truncate(self, session_key: str, max_messages: int = 20) -> DeletionPreview:
        return await self._transcripts.preview_truncate(session_key, max_messages)
