"""Single messages of a transcript (docs/semantics.md#message-id): removing one, injecting
one from another session, rebinding its turn context, preparing one for a caller's own
write, and the per-turn context a gateway sets around a turn.

An append given a message id is an upsert (``Transcripts.append``): that is how a reserved
assistant reply (:class:`~..models.AssistantMessageReservation`) is written as a draft,
then final, then replayed, and stays one row.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Any

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key
from ..models import (
    AssistantMessageReservation,
    SessionNode,
    TranscriptEntry,
    check_record,
    check_text,
)
from ..models.identity import check_turn_context
from ..storage import SessionStorage
from .generations import GenerationCache
from .transcript import Transcripts

current_turn_context: ContextVar[dict[str, Any] | None] = ContextVar(
    "opensquilla_session_turn_context", default=None
)
"""The turn context of the turn running in this task (``None`` outside a turn). A message
prepared with ``turn_context=None`` takes it; set it with :func:`set_turn_context`."""


def set_turn_context(turn_context: dict[str, Any] | None) -> Token[dict[str, Any] | None]:
    """Make ``turn_context`` the ambient context of this task (and of tasks it starts from
    now on) until ``current_turn_context.reset(token)`` with the token returned."""
    return current_turn_context.set(check_turn_context(turn_context))


async def remove_message(storage: SessionStorage, session_key: str, message_id: str) -> bool:
    """Delete the live rows of the key's current generation carrying ``message_id`` (every
    duplicate), in one transaction; ``False`` when there is none or no such session. Rows
    already compacted away are never touched, and ``total_tokens``/``updated_at`` are not
    adjusted (this rolls back an append whose follow-up failed)."""
    key = canonicalize_session_key(session_key)
    check_text("message_id", message_id, identifier=True)
    async with storage.uow.write() as tx:
        node = await tx.sessions.get(key)
        if node is None:
            return False
        return await tx.transcript.delete_live_message(node.session_id, message_id) > 0


async def update_message_turn_context(
    storage: SessionStorage,
    session_key: str,
    message_id: str,
    turn_context: dict[str, Any] | None,
) -> bool:
    """Rebind ``turn_context`` on every live and archived row of the key (every
    generation) carrying ``message_id``; ``True`` iff there was one."""
    key = canonicalize_session_key(session_key)
    return await storage.update_transcript_turn_context(key, message_id, turn_context)


def inject_provenance(provenance: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """An injected message's provenance: a string is its ``kind``, a mapping is used as is."""
    return {"kind": provenance} if isinstance(provenance, str) else provenance


async def inject_message(
    transcripts: Transcripts,
    session_key: str,
    message: str,
    provenance: Mapping[str, Any] | str,
) -> bool:
    """Append ``message`` as a **user** message through the normal append (time prefix,
    fence, tokens) with ``provenance``; ``SessionNotFoundError`` (a ``KeyError``) for a
    missing session."""
    check_text("message", message)
    await transcripts.append(
        session_key,
        "user",
        message,
        message_id=None,
        assistant_message_id=None,
        tool_calls=None,
        tool_call_id=None,
        reasoning_content=None,
        turn_usage=None,
        token_count=None,
        provenance=inject_provenance(provenance),
        turn_context=None,
    )
    return True


async def prepare_message(
    transcripts: Transcripts,
    generations: GenerationCache,
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
    turn_context: dict[str, Any] | None,
    token_count: int | None,
    provenance: Mapping[str, Any] | None,
    session_node: SessionNode | None,
) -> tuple[TranscriptEntry, int]:
    """The entry an append would write now and the epoch to fence it to, writing nothing:
    the caller writes it (``storage.append_transcript_entry(entry, expected_epoch=...)``)
    and then calls ``notify_message_appended``.

    ``session_node`` (the caller's copy of the row) saves the read; its key must be the
    key's. ``turn_context=None`` takes :data:`current_turn_context`. No message id means a
    new random one; a blank one, or two different ones, are refused.
    """
    key = canonicalize_session_key(session_key)
    if session_node is not None:
        check_record("session_node", session_node, SessionNode)
        if session_node.session_key != key:
            raise InvalidInputError("session_node does not match session_key")
    fields = transcripts.message_fields(
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
        turn_context=turn_context if turn_context is not None else current_turn_context.get(),
    )
    node = session_node if session_node is not None else await generations.require(key)
    entry = TranscriptEntry(session_id=node.session_id, session_key=key, **fields)
    return entry, node.epoch


async def notify_message_appended(transcripts: Transcripts, entry: TranscriptEntry) -> None:
    """After the caller committed a prepared ``entry``: fire the memory-sync callback, as
    an append does (a failing callback is logged)."""
    check_record("entry", entry, TranscriptEntry)
    await transcripts.notify_memory_sync(entry)


def reserve_assistant_message(
    turn_id: str,
    assistant_message_id: str,
    session_key: str,
    channel_id: str | None = None,
) -> AssistantMessageReservation:
    """Fix the id the assistant reply of ``turn_id`` will be stored under; writes nothing."""
    return AssistantMessageReservation.reserve(
        turn_id, assistant_message_id, session_key, channel_id
    )
