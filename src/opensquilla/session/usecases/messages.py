"""Single messages of a transcript (docs/semantics.md#message-id): removing one, rebinding
its turn context, preparing one for a caller's own write, and the per-turn context a
gateway sets around a turn. Injecting one is an append (``Transcripts.append``) with
provenance, and an append given a message id is an upsert: that is how a reserved
assistant reply (:class:`~..models.AssistantMessageReservation`) is written as a draft,
then final, then replayed, and stays one row.

Values arrive checked and keys canonical (the front door's); one unit of work per call.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import Any

from ..db.uow import UnitOfWork
from ..keys import CanonicalKey
from ..models import SessionNode, TranscriptEntry
from ..models.identity import check_turn_context
from ..models.messages import CheckedMessage
from .generations import GenerationCache
from .reads import owner_key
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


async def remove_message(uow: UnitOfWork, key: CanonicalKey, message_id: str) -> bool:
    """Delete the live rows of the key's current generation carrying ``message_id`` (every
    duplicate), in one transaction; ``False`` when there is none or no such session. Rows
    already compacted away are never touched, and ``total_tokens``/``updated_at`` are not
    adjusted (this rolls back an append whose follow-up failed)."""
    async with uow.write() as tx:
        node = await tx.sessions.get(key)
        if node is None:
            return False
        deleted = await tx.transcript.delete_live_message(
            node.session_id, message_id, session_key=node.session_key
        )
        return deleted > 0


async def delete_entry(uow: UnitOfWork, session_id: str, message_id: str) -> bool:
    """Delete the live rows of generation ``session_id`` carrying ``message_id``; ``True``
    iff there was one (the archive and the session's counters untouched)."""
    async with uow.write() as tx:
        key = await owner_key(tx, session_id)
        if key is None:
            return False
        return await tx.transcript.delete_live_message(session_id, message_id, session_key=key) > 0


async def update_turn_context(
    uow: UnitOfWork, key: str, message_id: str, turn_context: dict[str, Any] | None
) -> bool:
    """Rebind ``turn_context`` on every live and archived row stored under exactly ``key``
    (every generation) carrying ``message_id``, in one transaction; ``True`` iff there was
    one."""
    async with uow.write() as tx:
        return await tx.transcript.set_turn_context(key, message_id, turn_context) > 0


def inject_provenance(provenance: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """An injected message's provenance: a string is its ``kind``, a mapping is used as is."""
    return {"kind": provenance} if isinstance(provenance, str) else provenance


async def prepare_message(
    uow: UnitOfWork,
    transcripts: Transcripts,
    generations: GenerationCache,
    key: CanonicalKey,
    message: CheckedMessage,
    session_node: SessionNode | None,
) -> tuple[TranscriptEntry, int]:
    """The entry an append of a checked ``message`` would write now and the epoch to fence it
    to, writing nothing: the caller writes it (``storage.append_transcript_entry(entry,
    expected_epoch=...)``) and then calls ``notify_message_appended``. ``session_node``
    (the caller's copy of the row, its key the key's) saves the read, else one read unit.
    ``turn_context=None`` takes :data:`current_turn_context` (checked when it was set)."""
    values = message.values
    if values["turn_context"] is None:
        ambient = current_turn_context.get()
        if ambient is not None:
            values = {**values, "turn_context": dict(ambient)}
    node = session_node
    if node is None:
        async with uow.read() as tx:
            node = generations.found(key, await tx.sessions.get(key))
    return transcripts.entry(node.session_id, key, values), node.epoch
