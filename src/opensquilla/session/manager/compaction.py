"""The manager's compaction calls: compaction, a summary the caller already has, the
captured source of an inline compaction, the summaries, and the repair queue, by session key.

A part of :class:`SessionManager`, kept apart by job. Each call checks and canonicalises its
arguments here, once, then runs one use case of ``usecases/compaction/`` on the storage's
unit of work (``usecases/compaction/run.py`` says how many units a compaction opens).
"""

from __future__ import annotations

from typing import Any, Unpack

from ..compaction import CompactionConfig, CompactionDecision, CompactionResult
from ..errors import InvalidInputError
from ..keys import canonicalize_session_key
from ..models import (
    COMPACTION_ID_MAX_LENGTH,
    CompactionSourceSnapshot,
    SessionSummary,
    TranscriptEntry,
    check_instance,
    check_integer,
    check_optional_text,
    check_text,
)
from ..storage import SessionStorage
from ..usecases.compaction import (
    CompactionOptions,
    Compactor,
    MutationContext,
    PersistSourceOptions,
    capture_compaction_source,
    check_compaction_call,
    check_persist_call,
    check_source_entries,
    repair,
    summaries,
)
from ..usecases.compaction import compact_with_result as compaction_run
from ..usecases.compaction import needs_compaction as compaction_decision
from ..usecases.compaction import persist_compaction_result as compaction_persist
from ..usecases.generations import GenerationCache
from ..usecases.lifecycle import check_agent_id


class CompactionCalls:
    """The compaction calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache
    _compactor: Compactor

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
        options: CompactionOptions = {"mutation_context": mutation_context}
        result = await self._compaction(
            session_key, context_window_tokens, config, custom_instructions, options
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
        return await self._compaction(
            session_key, context_window_tokens, config, custom_instructions, options
        )

    async def needs_compaction(
        self,
        session_key: str,
        context_window_tokens: int,
        config: CompactionConfig | None = None,
        custom_instructions: str | None = None,
        *,
        protected_boundary_message_id: str | None = None,
    ) -> CompactionDecision:
        """What :meth:`compact_with_result` with these arguments would decide now, without
        running it: the same read and the same plan, then ``should_compact`` (it would
        summarise) or the ``skip_reason`` its result would carry, with the planner's
        ``estimated_tokens`` and ``threshold_tokens`` (docs/compaction.md#needs-compaction).
        One read; no summariser call, no lease, no write. A planned compaction can still be
        refused after its summary (quality gate, coverage, an empty summary) or at its
        commit (the transcript changed meanwhile)."""
        options: CompactionOptions = {
            "protected_boundary_message_id": protected_boundary_message_id
        }
        checked = check_compaction_call(context_window_tokens, config, custom_instructions, options)
        key = canonicalize_session_key(session_key)
        return await compaction_decision(
            self._storage.uow,
            key,
            context_window_tokens,
            checked,
            custom_instructions,
            protected_boundary_message_id,
        )

    async def _compaction(
        self,
        session_key: str,
        context_window_tokens: int,
        config: CompactionConfig | None,
        custom_instructions: str | None,
        options: CompactionOptions,
    ) -> CompactionResult:
        """What both compaction calls run: their checks, then the use case."""
        checked = check_compaction_call(context_window_tokens, config, custom_instructions, options)
        key = canonicalize_session_key(session_key)
        return await compaction_run(
            self._storage.uow,
            self._compactor,
            key,
            context_window_tokens,
            checked,
            custom_instructions,
            options,
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
        checked = check_persist_call(summary, kept_entries, options)
        key = canonicalize_session_key(session_key)
        return await compaction_persist(self._storage.uow, key, summary, kept_entries, checked)

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
        check_optional_text("boundary_message_id", boundary_message_id, identifier=True)
        supplied = None
        if transcript_entries is not None:
            supplied = check_source_entries("transcript_entries", transcript_entries)
        key = canonicalize_session_key(session_key)
        return await capture_compaction_source(
            self._storage.uow,
            key,
            boundary_message_id=boundary_message_id,
            transcript_entries=supplied,
        )

    async def list_degraded_compactions(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[SessionSummary]:
        """The repair queue: summaries whose memory flush was degraded or must be retried."""
        check_agent_id(agent_id)
        check_integer("limit", limit)
        return await repair.list_degraded(self._storage.uow, agent_id=agent_id, limit=limit)

    async def get_compaction(self, summary_id: int) -> SessionSummary | None:
        """One compaction summary by its id (the repair queue addresses summaries so)."""
        return await self._storage.get_summary(summary_id)

    async def get_compaction_preimage(self, summary: SessionSummary) -> list[TranscriptEntry]:
        check_instance("summary", summary, SessionSummary)
        return await repair.preimage(self._storage.uow, summary)

    async def mark_compaction_repair_status(self, summary: SessionSummary, status: str) -> None:
        if not isinstance(summary, SessionSummary):
            raise InvalidInputError(
                f"summary must be a SessionSummary, not {type(summary).__name__}"
            )
        check_text("status", status)
        await repair.mark_repair_status(self._storage.uow, summary, status)

    async def mark_compaction_flush_receipt_status(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        check_text("compaction_id", compaction_id, max_length=COMPACTION_ID_MAX_LENGTH)
        check_text("status", status)
        key = canonicalize_session_key(session_key)
        return await repair.mark_flush_receipt_status(self._storage.uow, key, compaction_id, status)

    # -- summaries ---------------------------------------------------------------------

    async def get_summaries(self, session_key: str) -> list[SessionSummary]:
        """The current generation's compaction summaries, oldest first."""
        key = canonicalize_session_key(session_key)
        return await summaries.current(self._storage.uow, self._generations, key)

    async def get_latest_summary(self, session_key: str) -> SessionSummary | None:
        """The current generation's newest compaction summary, or ``None``."""
        key = canonicalize_session_key(session_key)
        return await summaries.latest_current(self._storage.uow, self._generations, key)
