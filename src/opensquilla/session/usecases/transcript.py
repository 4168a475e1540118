"""The transcript of a session's current generation: append (fenced), read, truncate.

An append carries the generation it was meant for (docs/semantics.md#fencing): the fence,
the insert and the session touch commit together, and a generation that moved on meanwhile
refuses it (``StaleEpochError``) instead of losing it into a deleted generation. Values
arrive checked (``models.messages.check_message``) and keys canonical: nothing here checks
them again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic
from typing import Any

from ..db.uow import UnitOfWork
from ..errors import ConfigurationError, SessionNotFoundError, StaleEpochError
from ..keys import CanonicalKey
from ..models import TranscriptEntry
from ..models.messages import CheckedMessage, trusted_entry
from ..models.reports import DeletionPreview
from ..support.clock import now_ms
from ..support.timeprefix import stamp, zone_problem
from .appends import append_entry, upsert_entry
from .generations import GenerationCache

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.manager")

MemorySyncNotify = Callable[[int], Awaitable[None] | None]


# How long a plain append (no caller epoch: "the current generation") keeps retrying while
# resets commit between its read of the generation and its write (docs/semantics.md#fencing).
PLAIN_APPEND_RETRY_SECONDS = 10.0


async def after_reset(
    generations: GenerationCache,
    key: CanonicalKey,
    deadline: float | None,
    exc: StaleEpochError,
    operation: str,
) -> float:
    """A plain append's next try after it met a reset (``exc``): the generation forgotten
    (the next try reads the row again), the deadline of its tries (set at the first), a
    turn for the resets' own tasks; past the deadline, the ``StaleEpochError`` that ends
    ``operation``'s tries instead."""
    generations.forget(key)
    if deadline is None:
        deadline = monotonic() + PLAIN_APPEND_RETRY_SECONDS
    elif monotonic() >= deadline:
        raise StaleEpochError(
            f"{operation} to {key} met a reset on every try for "
            f"{PLAIN_APPEND_RETRY_SECONDS:g} s; nothing was written ({exc})"
        ) from exc
    await asyncio.sleep(0)  # let the resets' own tasks run between tries
    return deadline


class Transcripts:
    """Appending to the live transcript: the manager's append options (the time prefix,
    the memory-sync callback) and the generation cache."""

    def __init__(
        self,
        generations: GenerationCache,
        *,
        memory_sync_notify: MemorySyncNotify | None = None,
        inject_time_prefix: bool = True,
        time_prefix_tz: str | None = None,
    ) -> None:
        self._generations = generations
        self._memory_sync_notify = memory_sync_notify
        self._inject_time_prefix = inject_time_prefix
        problem = zone_problem(time_prefix_tz)
        if problem is not None:
            raise ConfigurationError(f"time_prefix_tz {problem}")
        self._time_prefix_tz = time_prefix_tz

    @property
    def generations(self) -> GenerationCache:
        """The per-key cache of the generation last seen."""
        return self._generations

    def entry(
        self, session_id: str, key: CanonicalKey, values: Mapping[str, Any]
    ) -> TranscriptEntry:
        """The entry of checked ``values`` for generation ``session_id``: user content
        time-stamped (unless the manager was built without the prefix)."""
        content = values["content"]
        if values["role"] == "user" and self._inject_time_prefix and isinstance(content, str):
            values = {**values, "content": stamp(content, timezone=self._time_prefix_tz)}
        return trusted_entry(session_id, key, values)

    async def append(
        self, uow: UnitOfWork, key: CanonicalKey, message: CheckedMessage
    ) -> TranscriptEntry:
        """Append a checked ``message`` to the current generation of ``key``: one unit of work
        when the generation is cached (the append's one statement), else a read of the
        session row first. ``token_count`` is added to ``total_tokens`` only when no
        ``turn_usage`` is given; with a message id the append is an upsert: the live row of
        the generation with that id is replaced in place, and only a new row counts its
        tokens."""
        values, delta = message.values, message.token_delta
        by_id = values["message_id"] is not None
        deadline: float | None = None
        while True:
            cached = self._generations.cached(key)
            if cached is None:
                async with uow.read() as tx:
                    node = self._generations.found(key, await tx.sessions.get(key))
                cached = (node.session_id, node.epoch)
            session_id, epoch = cached
            entry = self.entry(session_id, key, values)
            try:
                if by_id:
                    await upsert_entry(
                        uow, entry, expected_epoch=epoch, now=now_ms(), token_delta=delta
                    )
                else:
                    await append_entry(
                        uow, entry, expected_epoch=epoch, now=now_ms(), token_delta=delta
                    )
            except StaleEpochError as exc:
                # The caller named no generation: the append means "the current one". A
                # reset committed between our read and our write, so read the row again and
                # write to its generation; through a storm of resets, for up to
                # PLAIN_APPEND_RETRY_SECONDS (docs/semantics.md#fencing).
                deadline = await after_reset(self._generations, key, deadline, exc, "append")
                continue
            break
        await self.notify_memory_sync(entry)
        return entry

    async def notify_memory_sync(self, entry: TranscriptEntry) -> None:
        """Tell the memory-sync callback that ``entry`` was written (its failure is logged)."""
        if self._memory_sync_notify is None:
            return
        size = len((entry.content or "").encode("utf-8"))
        await self.notify_memory_sync_size(entry.session_key, size, "append_message")

    async def notify_memory_sync_size(self, key: str, size: int, operation: str) -> None:
        """Tell the memory-sync callback that ``size`` bytes of content were written to
        ``key`` (once per append, once per batch); its failure is logged."""
        if self._memory_sync_notify is None:
            return
        try:
            result = self._memory_sync_notify(size)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.warning(
                "memory sync notification failed for %s",
                key,
                exc_info=True,
                extra={"session_key": key, "operation": operation},
            )


async def rows(
    uow: UnitOfWork,
    generations: GenerationCache,
    key: CanonicalKey,
    limit: int | None,
    offset: int,
    *,
    canonical: bool,
) -> list[TranscriptEntry]:
    """The session row, then its generation's live rows (``canonical``: archive plus live
    rows), in one unit of work. Each statement is consistent on its own, as
    :meth:`SessionStorage.get_transcript`'s."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        listing = tx.transcript.list_canonical if canonical else tx.transcript.list_live
        return await listing(
            node.session_id, session_key=node.session_key, limit=limit, offset=offset
        )


async def count(uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey) -> int:
    """How many live rows the current generation has, in one unit of work."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await tx.transcript.count_live(node.session_id, session_key=node.session_key)


async def truncate(
    uow: UnitOfWork, key: CanonicalKey, max_messages: int, now: int
) -> dict[str, Any]:
    """Keep the newest ``max_messages`` live rows (ids unchanged), drop the rest and the
    compacted archive, in one transaction."""
    truncated, before, after = await truncate_transcript(uow, key, max_messages, now)
    return {"truncated": truncated, "before_count": before, "after_count": after}


async def truncate_transcript(
    uow: UnitOfWork, key: CanonicalKey, max_messages: int, now: int
) -> tuple[bool, int, int]:
    """:func:`truncate` as ``(truncated, before, after)``."""
    async with uow.write() as tx:
        node = await tx.sessions.get(key, lock="update")
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        before = await tx.transcript.count_live(node.session_id, session_key=node.session_key)
        if before <= max_messages:
            return False, before, before
        await tx.transcript.delete_live_except_last(
            node.session_id, max_messages, session_key=node.session_key
        )
        await tx.transcript.delete_all_archive(node.session_id, session_key=node.session_key)
        await tx.sessions.update_fields(key, {"updated_at": now})
    return True, before, max_messages


async def preview_truncate(
    uow: UnitOfWork, key: CanonicalKey, max_messages: int
) -> DeletionPreview:
    """What :func:`truncate` would delete now, from one snapshot; nothing is changed."""
    async with uow.snapshot() as tx:
        node = await tx.sessions.get(key)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return await tx.overview.preview_truncate(
            node.session_id, max_messages, session_key=node.session_key
        )
