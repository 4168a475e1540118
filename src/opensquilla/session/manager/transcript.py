"""The manager's transcript calls: append (and by message id), single-message operations,
reads, pages, the context view and truncation, by session key (branching: ``branching.py``).

A part of :class:`SessionManager`, kept apart by job: the front door (arguments checked,
the key canonicalised, once) over one use case of ``usecases/`` each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key
from ..models import (
    AssistantMessageReservation,
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    Cursor,
    SessionNode,
    TranscriptEntry,
    TranscriptLines,
    check_flag,
    check_integer,
    check_optional_integer,
    check_page,
    check_record,
    check_text,
    check_text_list,
)
from ..models.checks import refuse_unknown_fields
from ..models.identity import check_turn_context
from ..models.messages import AppendFields, PrepareFields, check_message
from ..models.pages import check_cursor, check_page_size
from ..models.reports import DeletionPreview
from ..storage import SessionStorage
from ..support.clock import now_ms
from ..usecases import messages, pages, reads, transcript
from ..usecases.generations import GenerationCache
from ..usecases.transcript import Transcripts


class TranscriptCalls:
    """The transcript half of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache
    _transcripts: Transcripts

    # -- transcript --------------------------------------------------------------------

    async def append_message(
        self, session_key: str, role: str, content: str | None, **fields: Unpack[AppendFields]
    ) -> TranscriptEntry:
        """Append one message to the current generation and return it (with its ``id``).

        Keyword fields (each ``None`` by default): ``tool_calls``, ``tool_call_id``,
        ``reasoning_content``, ``turn_usage``, ``token_count``, ``provenance``,
        ``turn_context``, ``message_id``, ``assistant_message_id``.

        The insert, the epoch fence and the session touch commit together. ``token_count``
        is added to ``total_tokens`` only when no ``turn_usage`` is given (usage is then
        accounted elsewhere); ``reasoning_content`` and ``turn_usage`` are kept for the
        assistant role only. With ``message_id`` (or ``assistant_message_id``, the same id)
        the append is an upsert (docs/semantics.md#message-id): the live row with that id
        is replaced in place, keeping its ``id`` and ``created_at``, and tokens are counted
        only when the row is new. A user message gets a time-stamp first line unless the
        manager was built with ``inject_time_prefix=False`` (see ``SessionManager``).
        """
        refuse_unknown_fields("append_message", fields, AppendFields)
        values = check_message(role, content, fields)
        key = canonicalize_session_key(session_key)
        return await self._transcripts.append(self._storage.uow, key, values)

    async def remove_message(self, session_key: str, message_id: str) -> bool:
        """Delete the current generation's live rows with ``message_id``; ``False`` if none
        (or no session). Counters and ``updated_at`` are not adjusted."""
        key = canonicalize_session_key(session_key)
        check_text("message_id", message_id, identifier=True)
        return await messages.remove_message(self._storage.uow, key, message_id)

    async def inject_message(
        self,
        session_key: str,
        message: str,
        provenance: Mapping[str, Any] | str = "inter_session",
    ) -> bool:
        """Append ``message`` as a user message with ``provenance`` (a string is its
        ``kind``), through the normal append (time prefix, fence, tokens); ``KeyError`` if
        the session is missing."""
        check_text("message", message)
        values = check_message(
            "user", message, {"provenance": messages.inject_provenance(provenance)}
        )
        key = canonicalize_session_key(session_key)
        await self._transcripts.append(self._storage.uow, key, values)
        return True

    async def update_message_turn_context(
        self, session_key: str, message_id: str, turn_context: dict[str, Any] | None
    ) -> bool:
        """Rebind the turn context of every live and archived row of the key (every
        generation) with ``message_id``; ``True`` iff there was one."""
        key = canonicalize_session_key(session_key)
        check_text("message_id", message_id, identifier=True)
        context = check_turn_context(turn_context)
        return await messages.update_turn_context(self._storage.uow, key, message_id, context)

    async def prepare_message(
        self, session_key: str, role: str, content: str | None, **fields: Unpack[PrepareFields]
    ) -> tuple[TranscriptEntry, int]:
        """The entry :meth:`append_message` would write and its ``expected_epoch``, writing
        nothing: the caller writes it (``storage.append_transcript_entry(entry,
        expected_epoch=...)``) and then calls :meth:`notify_message_appended`. The keyword
        fields are :meth:`append_message`'s and ``session_node`` (the caller's copy of the
        row, which saves the read; its key must be the key's). ``turn_context=None`` takes
        the ambient ``current_turn_context``. No message id means a new random one; a blank
        one, or two different ones, are refused."""
        refuse_unknown_fields("prepare_message", fields, PrepareFields)
        key = canonicalize_session_key(session_key)
        node = fields.pop("session_node", None)
        if node is not None:
            check_record("session_node", node, SessionNode)
            if node.session_key != key:
                raise InvalidInputError("session_node does not match session_key")
        values = check_message(role, content, fields)
        return await messages.prepare_message(
            self._storage.uow, self._transcripts, self._generations, key, values, node
        )

    @staticmethod
    def reserve_assistant_message(
        turn_id: str,
        assistant_message_id: str,
        session_key: str,
        channel_id: str | None = None,
    ) -> AssistantMessageReservation:
        """The id the assistant reply of ``turn_id`` will be upserted under; writes nothing."""
        return AssistantMessageReservation.reserve(
            turn_id, assistant_message_id, session_key, channel_id
        )

    async def notify_message_appended(self, entry: TranscriptEntry) -> None:
        """Fire the memory-sync callback for an entry the caller wrote itself (a failing
        callback is logged)."""
        check_record("entry", entry, TranscriptEntry)
        await self._transcripts.notify_memory_sync(entry)

    async def get_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """The live transcript of the current generation, in order."""
        return await self._rows(session_key, limit, offset, canonical=False)

    async def get_canonical_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Everything the current generation said: compacted archive plus live rows."""
        return await self._rows(session_key, limit, offset, canonical=True)

    async def _rows(
        self, session_key: str, limit: int | None, offset: int, *, canonical: bool
    ) -> list[TranscriptEntry]:
        """What both transcript listings run: their checks, then the use case."""
        key = canonicalize_session_key(session_key)
        check_page(limit, offset)
        uow = self._storage.uow
        return await transcript.rows(
            uow, self._generations, key, limit, offset, canonical=canonical
        )

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
        size = check_page_size("limit", limit)
        before = check_cursor("before", before)
        after = check_cursor("after", after)
        key = canonicalize_session_key(session_key)
        return await pages.canonical_page(
            self._storage.uow, self._generations, key, size, before, after
        )

    async def get_canonical_transcript_coverage(
        self, session_key: str
    ) -> CanonicalTranscriptCoverage:
        """Whether the current generation's canonical transcript is complete, with the
        compaction count and whether it was inherited from a parent."""
        key = canonicalize_session_key(session_key)
        return await pages.coverage(self._storage.uow, self._generations, key)

    async def is_canonical_transcript_complete(self, session_key: str) -> bool:
        """``get_canonical_transcript_coverage(session_key).canonical_complete``."""
        return (await self.get_canonical_transcript_coverage(session_key)).canonical_complete

    def iter_canonical_transcript(
        self, session_key: str, *, page_size: int = 500
    ) -> AsyncIterator[TranscriptEntry]:
        """Every canonical row of the current generation, oldest first, read ``page_size``
        (an ``int``, below 1 counting as 1) rows at a time, one unit of work per page; what
        concurrent appends, compactions and resets do to the walk:
        ``usecases.pages.iter_canonical_transcript``."""
        size = check_page_size("page_size", page_size)
        key = canonicalize_session_key(session_key)
        return pages.iter_canonical_transcript(self._storage.uow, key, size)

    async def count_transcript_entries(self, session_key: str) -> int:
        """How many live rows the current generation has."""
        key = canonicalize_session_key(session_key)
        return await transcript.count(self._storage.uow, self._generations, key)

    async def get_recent_transcript(self, session_key: str, n: int) -> list[TranscriptEntry]:
        """The newest ``n`` live messages of the current generation, oldest first."""
        check_integer("n", n)
        key = canonicalize_session_key(session_key)
        return await reads.recent_transcript(self._storage.uow, self._generations, key, n)

    async def get_transcript_lines(
        self,
        session_key: str,
        limit: int | None = None,
        *,
        summary: bool = False,
        metadata_only: bool = False,
    ) -> TranscriptLines:
        """The live transcript of the current generation, oldest first, each row a
        :class:`TranscriptLine` (``id``, ``role``, ``content``, ``tool_calls``,
        ``tool_call_id``, ``metadata``: the values its entry holds); with ``limit`` the
        newest ``limit`` rows (as :meth:`get_recent_transcript`); ``metadata_only=True``:
        only ``id`` and ``metadata`` are read, the other fields are ``None``.
        ``summary=True`` adds the latest compaction summary (else ``None``) as of the same
        moment as the rows: a compaction committing meanwhile is seen whole or not at all.

        The read of a framework integration that keeps its own objects in ``metadata``:
        six columns of each row (or two) instead of twenty, no record built per row, one
        unit of work: one statement for the rows, the generation and its latest summary's
        id, then the summary by that id when there is one and it is wanted
        (docs/reading.md#transcript-lines; a write that commits between its statements
        makes it read again from one snapshot, a second unit). ``SessionNotFoundError``
        for a missing key."""
        check_optional_integer("limit", limit)
        check_flag("summary", summary)
        check_flag("metadata_only", metadata_only)
        key = canonicalize_session_key(session_key)
        return await reads.transcript_lines(
            self._storage.uow, self._generations, key, limit, summary, metadata_only
        )

    async def get_canonical_transcript_entry(
        self, session_key: str, message_id: str
    ) -> TranscriptEntry | None:
        """The newest message with ``message_id`` in the compacted archive and the live
        transcript of the current generation, or ``None``."""
        check_text("message_id", message_id, identifier=True)
        key = canonicalize_session_key(session_key)
        return await reads.canonical_entry(self._storage.uow, self._generations, key, message_id)

    async def read_transcript(
        self, session_key: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The live transcript as JSON-ready dicts (``model_dump(mode="json")``)."""
        check_optional_integer("limit", limit)
        key = canonicalize_session_key(session_key)
        return await reads.read_transcript(self._storage.uow, self._generations, key, limit)

    async def count_transcript_entries_batch(self, session_keys: list[str]) -> dict[str, int]:
        """Live message counts by key, keyed as given (0 for a missing key)."""
        keys = check_text_list("session_keys", session_keys, identifier=True)
        canonical = [canonicalize_session_key(key) for key in keys]
        return await reads.count_by_key(self._storage.uow, keys, canonical)

    async def list_user_transcript_content_batch(
        self, session_keys: list[str], *, limit_per_session: int = 3
    ) -> dict[str, list[str]]:
        """The first ``limit_per_session`` non-empty user messages of each key, keyed as
        given (``[]`` for a missing key)."""
        check_integer("limit_per_session", limit_per_session)
        keys = check_text_list("session_keys", session_keys, identifier=True)
        canonical = [canonicalize_session_key(key) for key in keys]
        return await reads.user_content_by_key(
            self._storage.uow, keys, canonical, limit_per_session
        )

    async def truncate(self, session_key: str, max_messages: int = 20) -> dict[str, Any]:
        """Keep the newest ``max_messages`` live entries (one transaction)."""
        check_integer("max_messages", max_messages)
        key = canonicalize_session_key(session_key)
        return await transcript.truncate(self._storage.uow, key, max_messages, now_ms())

    async def preview_truncate(self, session_key: str, max_messages: int = 20) -> DeletionPreview:
        check_integer("max_messages", max_messages)
        key = canonicalize_session_key(session_key)
        return await transcript.preview_truncate(self._storage.uow, key, max_messages)
