"""SessionManager: the use cases over SessionStorage. It never writes SQL.

Every change that touches several rows is one storage transaction; the manager decides
*what* changes (pure logic: new nodes, intents, budgets, the time prefix) and the storage
makes it happen atomically.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from .archive import stage_reset_archive
from .clock import new_session_id, now_ms
from .compaction import CompactionConfig, CompactionResult, Summarizer, estimate_tokens_for_length
from .compactor import Compactor, MutationContext
from .errors import (
    InvalidInputError,
    ProtectedFieldError,
    SessionExistsError,
    SessionKeyConflictError,
    SessionNotFoundError,
    StaleEpochError,
)
from .files import StagedFile
from .keys import canonicalize_session_key, normalize_agent_id, require_session_key
from .models import (
    COMPACTION_ID_MAX_LENGTH,
    PROVIDER_MAX_LENGTH,
    STATE_KIND_MAX_LENGTH,
    ChatType,
    GenerationSnapshot,
    QueueMode,
    SendPolicy,
    SessionContextState,
    SessionIntent,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
    check_flag,
    check_integer,
    check_optional_integer,
    check_optional_text,
    check_text,
)
from .operations import DeletionPreview, ResetReport
from .storage import SessionStorage
from .timeprefix import stamp

log = logging.getLogger(__name__)

MemorySyncNotify = Callable[[int], Awaitable[None] | None]

# Fields only the store changes: identity, fencing, bookkeeping.
PROTECTED_FIELDS = frozenset(
    {
        "session_key",
        "session_id",
        "epoch",
        "created_at",
        "updated_at",
        "compaction_count",
        "schema_version",
    }
)
# Of those, a new session may be given only its session id (checked to be free: see
# ``SessionStorage.create_session``); epoch, timestamps, counters and the schema version
# start where the store starts them, exactly as update() refuses to change them.
CREATE_PROTECTED_FIELDS = PROTECTED_FIELDS - {"session_key", "session_id"}
SESSION_FIELDS = frozenset(SessionNode.model_fields)
PROVENANCE_KEYS = (
    "kind",
    "origin_session_id",
    "source_session_key",
    "source_channel",
    "source_tool",
)
_SETTLE_READS = 3
_RESET_ATTEMPTS = 5
GENERATION_CACHE_SIZE = 10_000


E = TypeVar("E", bound=StrEnum)
# Session fields whose values are an enum's (SEMANTICS §2.1): checked on every write.
ENUM_FIELDS: dict[str, type[StrEnum]] = {
    "status": SessionStatus,
    "chat_type": ChatType,
    "queue_mode": QueueMode,
    "send_policy": SendPolicy,
}


def _enum(kind: type[E], value: object) -> E:
    """``kind(value)``, refused as an ``InvalidInputError`` (still a ``ValueError``)."""
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value))
    except ValueError:
        raise InvalidInputError(f"{value!r} is not a valid {kind.__name__}") from None


def _check_enum_fields(fields: Mapping[str, Any]) -> None:
    for name, kind in ENUM_FIELDS.items():
        if name in fields:
            _enum(kind, fields[name])


def _check_agent_id(agent_id: object) -> None:
    if agent_id is not None and not isinstance(agent_id, str):
        raise InvalidInputError(f"agent_id must be a string or None, not {type(agent_id).__name__}")


def _provenance(provenance: object) -> dict[str, Any]:
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


class SessionManager:
    """Session lifecycle, transcript, intents, branching, context states and retention."""

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
        self._compactor = Compactor(storage, summarizer)
        self._memory_sync_notify = memory_sync_notify
        self._inject_time_prefix = inject_time_prefix
        self._time_prefix_tz = time_prefix_tz
        # key -> (session_id, epoch) of the generation last seen, least recently used first.
        # Appends fence on both, so a stale entry (another process reset or re-created the
        # session) is caught by the database and refreshed, never trusted.
        self._generations: OrderedDict[str, tuple[str, int]] = OrderedDict()

    @property
    def storage(self) -> SessionStorage:
        return self._storage

    def get_cached_epoch(self, session_key: str) -> int | None:
        cached = self._generations.get(canonicalize_session_key(session_key))
        return cached[1] if cached is not None else None

    def set_cached_epoch(self, session_key: str, epoch: int) -> None:
        check_integer("epoch", epoch)
        key = canonicalize_session_key(session_key)
        cached = self._generations.get(key)
        if cached is not None and cached[1] != epoch:
            del self._generations[key]  # the next operation reads the row again

    def _remember(self, node: SessionNode) -> SessionNode:
        self._generations[node.session_key] = (node.session_id, node.epoch)
        self._generations.move_to_end(node.session_key)
        if len(self._generations) > GENERATION_CACHE_SIZE:
            self._generations.popitem(last=False)
        return node

    async def _require(self, session_key: str) -> SessionNode:
        key = canonicalize_session_key(session_key)
        node = await self._storage.get_session(key)
        if node is None:
            self._generations.pop(key, None)
            raise SessionNotFoundError(f"Session not found: {key}")
        return self._remember(node)

    async def _generation(self, key: str) -> tuple[tuple[str, int], bool]:
        """The current generation of ``key``, and whether it came from the cache."""
        cached = self._generations.get(key)
        if cached is not None:
            return cached, True
        node = await self._require(key)
        return (node.session_id, node.epoch), False

    # -- lifecycle ---------------------------------------------------------------------

    def _new_node(
        self, session_key: str, agent_id: str | None, fields: Mapping[str, Any]
    ) -> SessionNode:
        key = require_session_key(session_key)
        _check_agent_id(agent_id)
        unknown = set(fields) - SESSION_FIELDS
        if unknown:
            raise InvalidInputError(f"unknown session field(s): {', '.join(sorted(unknown))}")
        if "session_key" in fields:
            raise ProtectedFieldError("session_key is given as the first argument")
        protected = set(fields) & CREATE_PROTECTED_FIELDS
        if protected:
            raise ProtectedFieldError(
                f"field(s) {', '.join(sorted(protected))} of a new session are set by the "
                "store itself (epoch 0, the creation time, zero counters); create() takes "
                "session_id and the mutable fields"
            )
        _check_enum_fields(fields)
        now = now_ms()
        values: dict[str, Any] = {
            "created_at": now,
            "updated_at": now,
            "started_at": now,
            "status": SessionStatus.RUNNING.value,
            **fields,
            "session_key": key,
            "agent_id": normalize_agent_id(agent_id),
        }
        return SessionNode(**values)  # InvalidInputError names any value out of its domain

    async def create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> SessionNode:
        """A new session (``SessionExistsError``, a ``ValueError``, if the key is taken)."""
        node = self._new_node(session_key, agent_id, kwargs)
        if not await self._storage.create_session(node):
            raise SessionExistsError(f"Session already exists: {node.session_key}")
        return self._remember(node)

    async def get_session(self, session_key: str) -> SessionNode | None:
        """The session row, or ``None``; never touches ``updated_at``."""
        node = await self._storage.get_session(session_key)
        return self._remember(node) if node is not None else None

    async def get_or_create(
        self, session_key: str, /, agent_id: str = "main", **kwargs: Any
    ) -> tuple[SessionNode, bool]:
        """The existing row untouched, or a new one; race-safe (exactly one creator wins)."""
        node = self._new_node(session_key, agent_id, kwargs)
        while True:
            existing = await self._storage.get_session(node.session_key)
            if existing is not None:
                return self._remember(existing), False
            if await self._storage.create_session(node):
                return self._remember(node), True

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
        intent = _enum(SessionIntent, intent)
        node, created = await self.get_or_create(session_key, agent_id, **create_kwargs)
        if created:
            return node, True
        if intent is SessionIntent.NEW_CHAT:
            raise SessionKeyConflictError(f"session_key conflict: {node.session_key}")
        if intent is SessionIntent.RESET_SAME_KEY:
            return await self.reset(node.session_key), True
        return node, False

    async def reset(self, session_key: str) -> SessionNode:
        """Start a new generation of the key (SEMANTICS §7); see :meth:`reset_with_report`."""
        return (await self.reset_with_report(session_key)).session

    async def reset_with_report(self, session_key: str) -> ResetReport:
        """Start a new generation of the key, in one transaction, and say where the old one
        went.

        Inside the transaction the old generation (canonical transcript and summaries) is
        first written to an archive file under a temporary name and fsynced; then its
        transcript, compacted archive and summaries are deleted, its context states
        invalidated, the epoch bumped and the identity and counters renewed. After the
        commit the archive is renamed into place; if the transaction rolls back it is
        removed. A failed archive write is logged and the reset goes on, as the contract
        requires. Another writer's concurrent change makes the compare-and-set fail; the
        reset then re-reads and tries again.
        """
        key = canonicalize_session_key(session_key)
        for _ in range(_RESET_ATTEMPTS):
            node = await self._require(key)
            staged: list[StagedFile] = []
            renewed_id = new_session_id()
            try:
                renewed = await self._storage.reset_session(
                    key,
                    expected_session_id=node.session_id,
                    expected_epoch=node.epoch,
                    new_session_id=renewed_id,
                    now=now_ms(),
                    before_commit=functools.partial(self._stage_archive, staged),
                )
            except BaseException as exc:
                if staged:
                    await self._settle_archive(staged, key, renewed_id, refused=exc)
                if isinstance(exc, StaleEpochError):
                    continue
                raise
            path = None
            for file in staged:
                path = await self._publish_archive(file, key)
            return ResetReport(self._remember(renewed), node.session_id, path)
        raise StaleEpochError(f"reset of {key} kept racing other writers; not applied")

    async def _settle_archive(
        self, staged: list[StagedFile], key: str, renewed_id: str, *, refused: BaseException
    ) -> None:
        """After a reset raised, keep its staged archive exactly when the reset committed.

        A cancellation or a lost connection can arrive while the COMMIT is already on its
        way; then the old generation is gone from the database and the archive is its only
        copy. So the row decides: the new identity means publish, the old one means discard,
        and no answer means keep the staged file where it is.
        """
        committed: bool | None = False
        if not isinstance(refused, StaleEpochError):
            committed = None
            # The first read may meet the connection the cancellation is still tearing
            # down; a few tries, before the outcome is declared unknown.
            for attempt in range(_SETTLE_READS):
                try:
                    row = await asyncio.shield(self._storage.get_session(key))
                except Exception:
                    log.debug("reading %s to settle its reset archive failed", key, exc_info=True)
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                committed = row is not None and row.session_id == renewed_id
                break
        for file in staged:
            if committed is None:
                # Unlocked, so that the next start of the store settles it (publishes it
                # if the reset committed after all, discards it if not).
                file.release()
                log.warning(
                    "reset of %s failed and its outcome is unknown; its archive is kept at %s",
                    key,
                    file.temporary,
                    extra={"session_key": key, "operation": "reset"},
                )
            elif committed:
                await self._publish_archive(file, key)
            else:
                await asyncio.to_thread(file.discard)

    async def _stage_archive(self, staged: list[StagedFile], snapshot: GenerationSnapshot) -> None:
        try:
            file = await stage_reset_archive(
                snapshot, now_ms=now_ms(), store_tag=self._storage.archive_store_tag
            )
        except Exception:
            log.warning(
                "reset archive for %s (%s) could not be written; the reset goes on",
                snapshot.session.session_key,
                snapshot.session.session_id,
                exc_info=True,
                extra={"session_key": snapshot.session.session_key, "operation": "reset"},
            )
            return
        if file is not None:
            staged.append(file)

    @staticmethod
    async def _publish_archive(file: StagedFile, key: str) -> Path | None:
        try:
            path = await asyncio.to_thread(file.publish)
        except OSError:  # publish() has unlocked it: the store's next start retries
            log.warning(
                "reset archive %s could not be renamed into place; it is kept under that name",
                file.temporary,
                exc_info=True,
                extra={"session_key": key, "operation": "reset"},
            )
            return file.temporary
        log.info(
            "archived the previous generation of %s to %s",
            key,
            path,
            extra={"session_key": key, "operation": "reset"},
        )
        return path

    async def resume(self, session_key: str) -> SessionNode:
        """Touch ``updated_at``; ``KeyError`` if the session is missing."""
        key = canonicalize_session_key(session_key)
        return await self._storage.update_session_fields(key, {"updated_at": now_ms()})

    async def update(self, session_key: str, /, **fields: Any) -> SessionNode:
        """Set mutable fields (one narrow UPDATE); identity, key and epoch are refused."""
        key = canonicalize_session_key(session_key)
        unknown = set(fields) - SESSION_FIELDS
        if unknown:
            raise InvalidInputError(f"unknown session field(s): {', '.join(sorted(unknown))}")
        protected = set(fields) & PROTECTED_FIELDS
        if protected:
            raise ProtectedFieldError(
                f"field(s) {', '.join(sorted(protected))} of {key} can only be changed by the "
                "store itself (reset, compaction, create)"
            )
        _check_enum_fields(fields)
        validated = SessionNode(session_key=key, **fields)  # each value checked in its domain
        values: dict[str, Any] = {name: getattr(validated, name) for name in fields}
        if "agent_id" in values:
            values["agent_id"] = normalize_agent_id(values["agent_id"])
        for lineage in ("parent_session_key", "spawned_by"):
            if values.get(lineage):
                values[lineage] = canonicalize_session_key(values[lineage])
        values["updated_at"] = now_ms()
        return await self._storage.update_session_fields(key, values)

    async def finish(
        self, session_key: str, status: SessionStatus | str = SessionStatus.DONE
    ) -> SessionNode:
        """Set the final status, ``ended_at`` and ``runtime_ms`` in one statement."""
        value = _enum(SessionStatus, status).value
        return await self._storage.finish_session(session_key, value, now_ms())

    async def archive(self, session_key: str) -> None:
        """A soft finish (status ``done``); nothing is moved or deleted."""
        await self.finish(session_key, SessionStatus.DONE)

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
    ) -> TranscriptEntry:
        """Append one message to the current generation and return it (with its ``id``).

        The insert, the epoch fence and the session touch commit together. ``token_count``
        is added to ``total_tokens`` only when no ``turn_usage`` is given (usage is then
        accounted elsewhere); ``reasoning_content`` and ``turn_usage`` are kept for the
        assistant role only.
        """
        check_text("role", role, identifier=True, non_empty=True)
        check_optional_text("content", content)
        check_optional_integer("token_count", token_count)
        origin = _provenance(provenance)
        key = canonicalize_session_key(session_key)
        if role == "user" and self._inject_time_prefix and isinstance(content, str):
            content = stamp(content, timezone=self._time_prefix_tz)
        assistant = role == "assistant"
        delta = token_count if token_count and turn_usage is None else 0
        while True:
            (session_id, epoch), cached = await self._generation(key)
            entry = TranscriptEntry(  # InvalidInputError names any value out of its domain
                session_id=session_id,
                session_key=key,
                role=role,
                content=content,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                reasoning_content=reasoning_content if assistant else None,
                turn_usage=turn_usage if assistant else None,
                turn_context=turn_context,
                token_count=token_count,
                **{f"provenance_{name}": origin.get(name) for name in PROVENANCE_KEYS},
            )
            try:
                await self._storage.append_message_entry(
                    entry, expected_epoch=epoch, now=now_ms(), token_delta=delta
                )
            except StaleEpochError:
                self._generations.pop(key, None)
                if cached:
                    continue  # our cached generation was old: read the row and try once more
                raise
            break
        await self._notify_memory_sync(entry)
        return entry

    async def _notify_memory_sync(self, entry: TranscriptEntry) -> None:
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

    async def get_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """The live transcript of the current generation, in order."""
        node = await self._require(session_key)
        return await self._storage.get_transcript(node.session_id, limit, offset)

    async def get_canonical_transcript(
        self, session_key: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Everything the current generation said: compacted archive plus live rows."""
        node = await self._require(session_key)
        return await self._storage.get_canonical_transcript(node.session_id, limit, offset)

    async def truncate(self, session_key: str, max_messages: int = 20) -> dict[str, Any]:
        """Keep the newest ``max_messages`` live entries (one transaction)."""
        check_integer("max_messages", max_messages)
        truncated, before, after = await self._storage.truncate_transcript(
            session_key, max_messages, now_ms()
        )
        return {"truncated": truncated, "before_count": before, "after_count": after}

    # -- branching ---------------------------------------------------------------------

    async def branch(
        self,
        parent_session_key: str,
        new_session_key: str,
        fork_transcript: bool = False,
        max_fork_tokens: int | None = None,
        status: SessionStatus | str = SessionStatus.RUNNING,
        fork_before_message_id: str | None = None,
    ) -> SessionNode:
        """A child session of ``parent_session_key`` (SEMANTICS §11), in one transaction.

        With ``fork_transcript`` the child gets the parent's live transcript, compacted
        archive, summaries and valid context states (a full fork), or, with
        ``fork_before_message_id``, the canonical transcript before that message (a prefix
        fork), when it fits ``max_fork_tokens``. An existing child key is refused.
        """
        child_key = require_session_key(new_session_key)
        child_status = _enum(SessionStatus, status).value
        check_flag("fork_transcript", fork_transcript)
        check_optional_integer("max_fork_tokens", max_fork_tokens)
        check_optional_text("fork_before_message_id", fork_before_message_id, identifier=True)
        now = now_ms()

        def make_child(parent: SessionNode) -> SessionNode:
            return SessionNode(
                session_key=child_key,
                agent_id=parent.agent_id,
                parent_session_key=parent.session_key,
                spawned_by=parent.session_key,
                spawn_depth=parent.spawn_depth + 1,
                created_at=now,
                updated_at=now,
                started_at=now,
                status=child_status,
                model=parent.model,
                model_provider=parent.model_provider,
                channel=parent.channel,
                chat_type=parent.chat_type,
            )

        if not fork_transcript:
            fork = "none"
        elif fork_before_message_id is not None:
            fork = "prefix"
        else:
            fork = "full"
        return await self._storage.branch_session(
            parent_session_key,
            make_child,
            fork=fork,  # type: ignore[arg-type]
            before_message_id=fork_before_message_id,
            max_fork_tokens=max_fork_tokens,
            summary_tokens=estimate_tokens_for_length,
        )

    # -- summaries and context states --------------------------------------------------

    async def get_summaries(self, session_key: str) -> list[SessionSummary]:
        node = await self._require(session_key)
        return await self._storage.get_all_summaries(node.session_id)

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        if not isinstance(state, SessionContextState):
            raise InvalidInputError(
                f"state must be a SessionContextState, not {type(state).__name__}"
            )
        return await self._storage.save_context_state(state)

    async def get_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        valid_only: bool = True,
    ) -> list[SessionContextState]:
        """States of the key (``[]`` for an unknown key)."""
        check_optional_text("provider", provider)
        check_optional_text("state_kind", state_kind)
        check_flag("valid_only", valid_only)
        return await self._storage.get_context_states(
            session_key, provider=provider, state_kind=state_kind, valid_only=valid_only
        )

    async def invalidate_context_states(
        self,
        session_key: str,
        provider: str | None = None,
        state_kind: str | None = None,
        reason: str = "invalidated",
    ) -> int:
        check_optional_text("provider", provider, max_length=PROVIDER_MAX_LENGTH)
        check_optional_text("state_kind", state_kind, max_length=STATE_KIND_MAX_LENGTH)
        check_text("reason", reason)
        return await self._storage.invalidate_context_states(
            session_key, provider=provider, state_kind=state_kind, reason=reason
        )

    # -- retention ---------------------------------------------------------------------

    async def prune_stale(self, max_age_ms: int) -> int:
        """Delete sessions not updated for ``max_age_ms``; how many were deleted."""
        check_integer("max_age_ms", max_age_ms)
        return await self._storage.prune_stale(now_ms() - max_age_ms)

    async def cap_entries(self, max_entries: int = 500) -> int:
        """Keep at most ``max_entries`` sessions, deleting the least recently updated."""
        check_integer("max_entries", max_entries)
        return await self._storage.cap_sessions(max_entries)

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
        result = await self.compact_with_result(
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
        *,
        compaction_id: str | None = None,
        trigger_reason: str | None = None,
        flush_receipt_status: str | None = None,
        mutation_context: MutationContext | None = None,
        summarizer: Summarizer | None = None,
    ) -> CompactionResult:
        """Fold the oldest part of the live transcript into an out-of-band summary.

        The removed rows move to the compacted archive (the canonical transcript stays
        whole), the summary and a portable context state are saved and
        ``compaction_count`` grows, all in one transaction; or nothing changes and the
        result says why (``skip_reason``). The summariser runs outside any transaction; if
        the transcript changed meanwhile the rewrite is skipped (``stale_preimage``).
        """
        return await self._compactor.compact_with_result(
            session_key,
            context_window_tokens,
            config,
            custom_instructions,
            compaction_id=compaction_id,
            trigger_reason=trigger_reason,
            flush_receipt_status=flush_receipt_status,
            mutation_context=mutation_context,
            summarizer=summarizer,
        )

    async def persist_compaction_result(
        self,
        session_key: str,
        summary: str,
        kept_entries: list[dict[str, Any]],
        *,
        compaction_id: str | None = None,
        trigger_reason: str | None = None,
        flush_receipt_status: str | None = None,
    ) -> bool:
        """Store a summary produced elsewhere and keep ``kept_entries`` as the live tail.

        Positional (SEMANTICS §9): the oldest ``len(live) - len(kept_entries)`` rows are
        archived; each kept dict reuses the live row at its position when role and content
        match, otherwise it becomes a new row and the unmatched live row is dropped (not
        archived; the contract depends on this). An empty summary writes nothing.
        """
        return await self._compactor.persist_compaction_result(
            session_key,
            summary,
            kept_entries,
            compaction_id=compaction_id,
            trigger_reason=trigger_reason,
            flush_receipt_status=flush_receipt_status,
        )

    async def list_degraded_compactions(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[SessionSummary]:
        """The repair queue: summaries whose memory flush was degraded or must be retried."""
        _check_agent_id(agent_id)
        check_integer("limit", limit)
        return await self._storage.list_degraded_summaries(agent_id=agent_id, limit=limit)

    async def get_compaction_preimage(self, summary: SessionSummary) -> list[TranscriptEntry]:
        return await self._compactor.compaction_preimage(summary)

    async def mark_compaction_repair_status(self, summary: SessionSummary, status: str) -> None:
        if not isinstance(summary, SessionSummary):
            raise InvalidInputError(
                f"summary must be a SessionSummary, not {type(summary).__name__}"
            )
        check_text("status", status)
        if summary.id is None:
            return
        await self._storage.update_summary_flush_receipt_status(summary.id, status)
        summary.flush_receipt_status = status

    async def mark_compaction_flush_receipt_status(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        check_text("compaction_id", compaction_id, max_length=COMPACTION_ID_MAX_LENGTH)
        check_text("status", status)
        return await self._storage.update_summary_flush_receipt_status_by_compaction(
            session_key, compaction_id, status
        )

    # -- operator tools ----------------------------------------------------------------

    async def preview_reset(self, session_key: str) -> DeletionPreview:
        """What :meth:`reset` would delete and invalidate now; nothing is changed."""
        return await self._storage.preview_reset(session_key)

    async def preview_truncate(self, session_key: str, max_messages: int = 20) -> DeletionPreview:
        """What :meth:`truncate` would delete now; nothing is changed."""
        check_integer("max_messages", max_messages)
        return await self._storage.preview_truncate(session_key, max_messages)

    async def preview_prune_stale(self, max_age_ms: int) -> DeletionPreview:
        """What :meth:`prune_stale` would delete now; nothing is changed."""
        check_integer("max_age_ms", max_age_ms)
        return await self._storage.preview_prune(now_ms() - max_age_ms)

    async def preview_cap_entries(self, max_entries: int = 500) -> DeletionPreview:
        """What :meth:`cap_entries` would delete now; nothing is changed."""
        check_integer("max_entries", max_entries)
        return await self._storage.preview_cap(max_entries)
