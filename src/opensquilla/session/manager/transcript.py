"""The manager's transcript calls: append (and by message id), single-message operations,
reads, pages, the context view and truncation, by session key (branching: ``branching.py``).

A part of :class:`SessionManager`, kept apart by job; one-line delegations to ``usecases/``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from ..models import (
    AssistantMessageReservation,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    Cursor,
    SessionNode,
    TranscriptEntry,
)
from ..storage import SessionStorage
from ..usecases import messages, pages, reads
from ..usecases.generations import GenerationCache
from ..usecases.transcript import Transcripts


class TranscriptCalls:
    """The transcript half of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache
    _transcripts: Transcripts

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
        only when the row is new. A user message gets a time-stamp first line unless the
        manager was built with ``inject_time_prefix=False`` (see ``SessionManager``).
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
