"""The transcript of a session's current generation: append (fenced), read, truncate.

An append carries the generation it was meant for (docs/semantics.md#fencing): the fence,
the insert and the session touch commit together, and a generation that moved on meanwhile
refuses it (``StaleEpochError``) instead of losing it into a deleted generation.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic
from typing import Any

from ..errors import (
    ConfigurationError,
    InvalidInputError,
    SessionNotFoundError,
    StaleEpochError,
)
from ..keys import canonicalize_session_key
from ..models import (
    TranscriptEntry,
    check_integer,
    check_millis,
    check_optional_integer,
    check_optional_text,
    check_page,
    check_text,
)
from ..models.identity import chosen_message_id
from ..models.reports import DeletionPreview
from ..storage import SessionStorage
from ..support.clock import now_ms
from ..support.timeprefix import stamp, zone_problem
from .generations import GenerationCache

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.manager")

MemorySyncNotify = Callable[[int], Awaitable[None] | None]

PROVENANCE_KEYS = (
    "kind",
    "origin_session_id",
    "source_session_key",
    "source_channel",
    "source_tool",
)
# The entry's provenance fields of an append given none.
_NO_PROVENANCE: dict[str, Any] = dict.fromkeys(f"provenance_{name}" for name in PROVENANCE_KEYS)


def provenance_values(provenance: object) -> dict[str, Any]:
    """The provenance mapping's values by key; any other shape or key is refused."""
    if provenance is None:
        return {}
    if not isinstance(provenance, Mapping):
        raise InvalidInputError(
            f"provenance must be a mapping with the keys {', '.join(PROVENANCE_KEYS)}, not "
            f"{type(provenance).__name__}"
        )
    unknown = [str(name)[:40] for name in provenance if name not in PROVENANCE_KEYS]
    if unknown:
        raise InvalidInputError(
            f"unknown provenance key(s) {', '.join(sorted(unknown))}; the keys are "
            f"{', '.join(PROVENANCE_KEYS)}"
        )
    return dict(provenance)


def token_delta(token_count: int | None, turn_usage: dict[str, Any] | None) -> int:
    """What an append adds to ``total_tokens``: ``token_count`` when there is no
    ``turn_usage`` (usage is then accounted elsewhere)."""
    return token_count if token_count and turn_usage is None else 0


# How long a plain append (no caller epoch: "the current generation") keeps retrying while
# resets commit between its read of the generation and its write (docs/semantics.md#fencing).
PLAIN_APPEND_RETRY_SECONDS = 10.0


class Transcripts:
    """Appending to, reading and truncating the live transcript."""

    def __init__(
        self,
        storage: SessionStorage,
        generations: GenerationCache,
        *,
        memory_sync_notify: MemorySyncNotify | None = None,
        inject_time_prefix: bool = True,
        time_prefix_tz: str | None = None,
    ) -> None:
        self._storage = storage
        self._generations = generations
        self._memory_sync_notify = memory_sync_notify
        self._inject_time_prefix = inject_time_prefix
        problem = zone_problem(time_prefix_tz)
        if problem is not None:
            raise ConfigurationError(f"time_prefix_tz {problem}")
        self._time_prefix_tz = time_prefix_tz

    def message_fields(
        self,
        role: str,
        content: str | None,
        *,
        message_id: str | None,
        assistant_message_id: str | None,
        tool_calls: list[dict[str, Any]] | None,
        tool_call_id: str | None,
        reasoning_content: str | None,
        turn_usage: dict[str, Any] | None,
        token_count: int | None,
        provenance: Mapping[str, Any] | None,
        turn_context: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The fields of the entry an append writes, but its owner (``session_id``,
        ``session_key``): the arguments checked, user content time-stamped,
        ``reasoning_content`` and ``turn_usage`` kept for the assistant role only, the
        message id chosen (``None`` leaves the entry's random default)."""
        check_text("role", role, identifier=True, non_empty=True)
        check_optional_text("content", content)
        check_optional_integer("token_count", token_count)
        chosen = (
            None
            if message_id is None and assistant_message_id is None
            else chosen_message_id(message_id, assistant_message_id)
        )
        if provenance is None:
            origin = _NO_PROVENANCE
        else:
            given = provenance_values(provenance)
            origin = {f"provenance_{name}": given.get(name) for name in PROVENANCE_KEYS}
        if role == "user" and self._inject_time_prefix and isinstance(content, str):
            content = stamp(content, timezone=self._time_prefix_tz)
        assistant = role == "assistant"
        fields: dict[str, Any] = {
            "role": role,
            "content": content,
            "tool_calls": tool_calls,
            "tool_call_id": tool_call_id,
            "reasoning_content": reasoning_content if assistant else None,
            "turn_usage": turn_usage if assistant else None,
            "turn_context": turn_context,
            "token_count": token_count,
            **origin,
        }
        if chosen is not None:
            fields["message_id"] = chosen
        return fields

    async def append(
        self,
        session_key: str,
        role: str,
        content: str | None,
        *,
        message_id: str | None,
        assistant_message_id: str | None,
        tool_calls: list[dict[str, Any]] | None,
        tool_call_id: str | None,
        reasoning_content: str | None,
        turn_usage: dict[str, Any] | None,
        token_count: int | None,
        provenance: Mapping[str, Any] | None,
        turn_context: dict[str, Any] | None,
    ) -> TranscriptEntry:
        """``token_count`` is added to ``total_tokens`` only when no ``turn_usage`` is given
        (usage is then accounted elsewhere); ``reasoning_content`` and ``turn_usage`` are
        kept for the assistant role only. With a message id (``message_id`` or
        ``assistant_message_id``) the append is an upsert: the live row of the generation
        with that id is replaced in place, and only a new row counts its tokens."""
        fields = self.message_fields(
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
        key = canonicalize_session_key(session_key)
        delta = token_delta(token_count, turn_usage)
        deadline: float | None = None
        while True:
            (session_id, epoch), _cached = await self._generations.current(key)
            # InvalidInputError names any value out of its domain
            entry = TranscriptEntry(session_id=session_id, session_key=key, **fields)
            try:
                if "message_id" in fields:
                    await self._storage.upsert_transcript_entry_and_touch(
                        entry, expected_epoch=epoch, updated_at=now_ms(), token_delta=delta
                    )
                else:
                    await self._storage.append_message_entry(
                        entry, expected_epoch=epoch, now=now_ms(), token_delta=delta
                    )
            except StaleEpochError as exc:
                # The caller named no generation: the append means "the current one". A
                # reset committed between our read and our write, so read the row again and
                # write to its generation; through a storm of resets, for up to
                # PLAIN_APPEND_RETRY_SECONDS (docs/semantics.md#fencing).
                self._generations.forget(key)
                if deadline is None:
                    deadline = monotonic() + PLAIN_APPEND_RETRY_SECONDS
                elif monotonic() >= deadline:
                    raise StaleEpochError(
                        f"append to {key} met a reset on every try for "
                        f"{PLAIN_APPEND_RETRY_SECONDS:g} s; nothing was written ({exc})"
                    ) from exc
                await asyncio.sleep(0)  # let the resets' own tasks run between tries
                continue
            break
        await self.notify_memory_sync(entry)
        return entry

    async def notify_memory_sync(self, entry: TranscriptEntry) -> None:
        """Tell the memory-sync callback that ``entry`` was written (its failure is logged)."""
        if self._memory_sync_notify is None:
            return
        size = len((entry.content or "").encode("utf-8"))
        try:
            result = self._memory_sync_notify(size)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.warning(
                "memory sync notification failed for %s",
                entry.session_key,
                exc_info=True,
                extra={"session_key": entry.session_key, "operation": "append_message"},
            )

    async def live(self, session_key: str, limit: int | None, offset: int) -> list[TranscriptEntry]:
        """The session row, then its generation's live rows, on one connection: one unit of
        work, not one per statement (a second checkout cost as much as reading a few rows).
        Each statement is consistent on its own, as :meth:`SessionStorage.get_transcript`'s."""
        key = canonicalize_session_key(session_key)
        async with self._storage.uow.read() as tx:
            node = self._generations.found(key, await tx.sessions.get(key))
            check_page(limit, offset)
            return await tx.transcript.list_live(node.session_id, limit=limit, offset=offset)

    async def canonical(
        self, session_key: str, limit: int | None, offset: int
    ) -> list[TranscriptEntry]:
        """:meth:`live` for the canonical transcript (archive plus live rows)."""
        key = canonicalize_session_key(session_key)
        async with self._storage.uow.read() as tx:
            node = self._generations.found(key, await tx.sessions.get(key))
            check_page(limit, offset)
            return await tx.transcript.list_canonical(node.session_id, limit=limit, offset=offset)

    async def count(self, session_key: str) -> int:
        node = await self._generations.require(session_key)
        return await self._storage.count_transcript_entries(node.session_id)

    async def truncate(self, session_key: str, max_messages: int) -> dict[str, Any]:
        check_integer("max_messages", max_messages)
        truncated, before, after = await truncate_transcript(
            self._storage, session_key, max_messages, now_ms()
        )
        return {"truncated": truncated, "before_count": before, "after_count": after}

    async def preview_truncate(self, session_key: str, max_messages: int) -> DeletionPreview:
        """What :meth:`truncate` would delete now; nothing is changed."""
        check_integer("max_messages", max_messages)
        key = canonicalize_session_key(session_key)
        async with self._storage.uow.snapshot() as tx:
            node = await tx.sessions.get(key)
            if node is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            return await tx.overview.preview_truncate(node.session_id, max_messages)


async def truncate_transcript(
    storage: SessionStorage, session_key: str, max_messages: int, now: int
) -> tuple[bool, int, int]:
    """Keep the newest ``max_messages`` live rows (ids unchanged), drop the rest and the
    compacted archive, in one transaction. ``(truncated, before, after)``."""
    key = canonicalize_session_key(session_key)
    check_integer("max_messages", max_messages)
    check_millis("now", now)
    async with storage.uow.write() as tx:
        node = await tx.sessions.get(key, lock="update")
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        before = await tx.transcript.count_live(node.session_id)
        if before <= max_messages:
            return False, before, before
        await tx.transcript.delete_live_except_last(node.session_id, max_messages)
        await tx.transcript.delete_all_archive(node.session_id)
        await tx.sessions.update_fields(key, {"updated_at": now})
    return True, before, max_messages
