"""Prepared intents (docs/semantics.md#prepared-intents): the row ``apply_intent`` would
write, or a prefix fork's child and its copied rows, decided and returned without writing.

Upstream HEAD applies such a plan in its turn-acceptance transaction, together with the
turn's first message and tables outside this store; here the plan is a value, and
:meth:`SessionStorage.upsert_session` / ``append_transcript_entry`` (or any writer of the
caller's) apply it; a ``reset`` plan only with ``apply_intent`` (its archive and deletes are
not in the plan; its session id is a preview, ``apply_intent`` makes the id). Each plan is
read from one snapshot.
"""

from __future__ import annotations

from ..db.uow import UnitOfWork
from ..errors import (
    MessageNotFoundError,
    SessionExistsError,
    SessionKeyConflictError,
    SessionNotFoundError,
)
from ..keys import CanonicalKey
from ..models import (
    PreparedAction,
    PreparedSessionIntent,
    SessionIntent,
    SessionNode,
    TranscriptEntry,
)
from ..support.clock import new_session_id, now_ms
from .branching import child_of, set_lineage
from .reset import next_generation_values

# What a copied row does not take from its source: its owner, its row id and its message id
# (a fork's copies get fresh ones, as branch's do).
_NOT_COPIED = {"id", "message_id", "session_id", "session_key"}


def reset_node(stored: SessionNode, now: int) -> SessionNode:
    """``stored``'s next generation as a reset writes it (a copy; ``stored`` is unchanged)."""
    values = next_generation_values(stored, new_session_id(), now)
    return SessionNode(**{**stored.model_dump(), **values})


def _plan(
    action: PreparedAction,
    node: SessionNode,
    previous: SessionNode | None = None,
    copies: tuple[TranscriptEntry, ...] = (),
) -> PreparedSessionIntent:
    """The plan of ``action`` writing ``node``: its appends fenced to ``node.epoch``, after
    ``previous`` (the generation a reset replaces, the parent a fork copies ``copies``
    from)."""
    return PreparedSessionIntent(
        node=node,
        action=action,
        expected_epoch=node.epoch,
        previous_session_id=None if previous is None else previous.session_id,
        previous_node=previous,
        initial_transcript_entries=copies,
    )


async def prepare_intent(
    uow: UnitOfWork, resolved: SessionIntent, created: SessionNode
) -> PreparedSessionIntent:
    """What ``apply_intent`` of ``resolved`` would do, as a plan (``created``: the row it
    would create, its fields checked at the front door as ``apply_intent`` checks them):
    ``create`` for a missing key (any intent), ``SessionKeyConflictError`` for
    ``NEW_CHAT`` on a taken key, ``reset`` for ``RESET_SAME_KEY``, else ``continue``. One
    read unit of work."""
    async with uow.read() as tx:
        stored = await tx.sessions.get(created.session_key)
    if stored is None:
        return _plan("create", created)
    if resolved is SessionIntent.NEW_CHAT:
        raise SessionKeyConflictError(f"session_key conflict: {stored.session_key}")
    if resolved is SessionIntent.RESET_SAME_KEY:
        return _plan("reset", reset_node(stored, now_ms()), stored)
    return _plan("continue", stored)


async def prepare_prefix_branch(
    uow: UnitOfWork, key: CanonicalKey, child_key: CanonicalKey, before: str, child_status: str
) -> PreparedSessionIntent:
    """The prefix fork ``branch(parent, child, fork_transcript=True,
    fork_before_message_id=...)`` would write, as a plan (action ``fork``): the child row
    (lineage proof as a prefix fork records it) and copies of the parent's canonical rows
    before the message. ``SessionNotFoundError`` for a missing parent,
    ``MessageNotFoundError`` for a message not in its canonical transcript,
    ``SessionExistsError`` for a child key already taken. One snapshot."""
    async with uow.snapshot() as tx:
        parent = await tx.sessions.get(key)
        if parent is None:
            raise SessionNotFoundError(f"Parent session not found: {key}")
        position = await tx.transcript.find_canonical_position(
            parent.session_id, before, session_key=parent.session_key
        )
        if position is None:
            raise MessageNotFoundError(f"Transcript message not found in {key}: {before}")
        if await tx.sessions.get(child_key) is not None:
            raise SessionExistsError(f"Session already exists: {child_key}")
        coverage = await tx.transcript.coverage(parent.session_id, session_key=parent.session_key)
        canonical = await tx.transcript.list_canonical(
            parent.session_id, session_key=parent.session_key
        )
    child = child_of(parent, child_key, child_status, now_ms())
    child.display_name = parent.display_name
    child.forked_from_parent = True
    set_lineage(child, coverage, "prefix")
    copies = tuple(
        TranscriptEntry(
            **entry.model_dump(exclude=_NOT_COPIED),
            session_id=child.session_id,
            session_key=child.session_key,
        )
        for entry in canonical
        if (entry.created_at, entry.id or 0) < position
    )
    return _plan("fork", child, parent, copies)
