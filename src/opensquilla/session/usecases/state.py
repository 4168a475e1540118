"""Session state and scoped state (docs/state.md): a read is one statement; an update a
read and one compare-and-set statement in autocommit (read again when it lost its race;
after every try lost, one write transaction under the writers' lock).

A session's state row belongs to one generation (its ``session_id``). A row of another
generation (a ``session_id`` the session no longer has: written before a whole-row upsert
changed the generation, or left under the key by a release without state) reads as the
empty state at its revision + 1, so the revision never goes back and a compare-and-set
read in that older generation fails; a reset records its new, empty state itself
(``tx.session_states.restart``, in the reset's transaction).
"""

from __future__ import annotations

from typing import TypedDict

from ..db.repos.states import SessionStateWrite, StateWrite, StoredState
from ..db.uow import UnitOfWork
from ..errors import InvalidInputError, SessionNotFoundError, StaleStateError
from ..keys import CanonicalKey
from ..models.state import (
    MAX_STATE_BYTES,
    ScopeState,
    SessionState,
    StateChange,
    StateScope,
    scope_label,
    state_size,
)
from ..support.clock import now_ms


def _visible(stored: StoredState | None, session_id: str | None) -> StoredState:
    """What a read shows of ``stored`` for generation ``session_id`` (``None``: a scope):
    the row itself; the empty state at revision 0 without one; the empty state at its
    revision + 1 for a row of another generation."""
    if stored is None:
        return StoredState(session_id, {}, 0, 0)
    if session_id is not None and stored.session_id != session_id:
        return StoredState(session_id, {}, stored.revision + 1, 0)
    return stored


class _Shown(TypedDict):
    """The fields of a read's :class:`SessionState` or :class:`ScopeState` that the stored
    row gives (``updated_at`` ``None`` before the first update)."""

    state: dict[str, object]
    revision: int
    updated_at: int | None


def _shown(stored: StoredState | None, session_id: str | None) -> _Shown:
    visible = _visible(stored, session_id)
    return _Shown(
        state=visible.state, revision=visible.revision, updated_at=visible.updated_at or None
    )


def _next(
    stored: StoredState | None, session_id: str | None, change: StateChange, target: str
) -> StateWrite:
    """The write of an update over ``stored`` as generation ``session_id`` sees it
    (:func:`_visible`), after its checks: ``StaleStateError`` when the compare-and-set
    fails; the merged state no larger than :data:`MAX_STATE_BYTES`."""
    visible = _visible(stored, session_id)
    expected = change.expected_revision
    if expected is not None and expected != visible.revision:
        raise StaleStateError(target, expected, visible.revision)
    merged = change.applied_to(visible.state)
    if state_size(merged) > MAX_STATE_BYTES:
        raise InvalidInputError(
            f"the state of {target} would be larger than {MAX_STATE_BYTES} bytes as JSON; "
            "nothing was written"
        )
    return StateWrite(
        state=merged,
        revision=visible.revision + 1,
        now=now_ms(),
        stored_revision=None if stored is None else stored.revision,
    )


def _lost_race(target: str) -> AssertionError:
    # The writers' lock makes the conditional write always find what the read saw.
    return AssertionError(f"the state of {target} changed under the writers' lock")


async def get_state(uow: UnitOfWork, key: CanonicalKey) -> SessionState:
    """The state of the session ``key``'s current generation (one statement);
    ``SessionNotFoundError`` for a missing session."""
    async with uow.read() as tx:
        found = await tx.session_states.read(key)
    if found is None:
        raise SessionNotFoundError(f"Session not found: {key}")
    session_id, stored = found
    return SessionState(session_key=key, session_id=session_id, **_shown(stored, session_id))


async def update_state(uow: UnitOfWork, key: CanonicalKey, change: StateChange) -> int:
    """Merge ``change`` into the state of the session ``key``; the new revision.
    ``SessionNotFoundError`` for a missing session, ``StaleStateError`` when
    ``change.expected_revision`` is not the stored revision: nothing written either way.

    One unit in autocommit, no transaction: the row read, then the compare-and-set write
    of the merge, one statement (``UPDATE ... WHERE revision = <read>``; the first write
    of a generation ``INSERT ... ON CONFLICT DO NOTHING`` while the session row is still
    that generation's). A write that found the revision moved (another writer, a reset, a
    delete) reads again, and ``expected_revision`` is checked against what it reads."""
    target = f"session {key!r}"

    def next_write(found: tuple[str, StoredState | None] | None) -> SessionStateWrite:
        if found is None:
            raise SessionNotFoundError(f"Session not found: {key}; nothing was written")
        session_id, stored = found
        return SessionStateWrite(session_id=session_id, **_next(stored, session_id, change, target))

    revision = await uow.update_session_state(key, next_write, tries=STATE_TRIES)
    if revision is not None:
        return revision
    # Every try lost its race (a thousand writers in between): in turn with the others,
    # in a write transaction that takes the writers' lock.
    async with uow.write() as tx:
        found = await tx.session_states.read(key, for_update=True)
        if found is None:
            raise SessionNotFoundError(f"Session not found: {key}; nothing was written")
        session_id, stored = found
        write = _next(stored, session_id, change, target)
        if not await tx.session_states.write(key, session_id=session_id, **write):
            raise _lost_race(target)
    return write["revision"]


# How often an update reads again after its compare-and-set found the revision moved.
STATE_TRIES = 1000


async def get_scope_state(uow: UnitOfWork, scope: StateScope, scope_id: str) -> ScopeState:
    """The state of ``(scope, scope_id)`` (one statement): empty at revision 0 until the
    first update."""
    async with uow.read() as tx:
        stored = await tx.scope_states.read(scope, scope_id)
    return ScopeState(scope=scope, scope_id=scope_id, **_shown(stored, None))


async def update_scope_state(
    uow: UnitOfWork, scope: StateScope, scope_id: str, change: StateChange
) -> int:
    """Merge ``change`` into the state of ``(scope, scope_id)``; the new revision.
    ``StaleStateError`` as :func:`update_state`, and as it, a read and one compare-and-set
    statement in autocommit (read again when it lost its race; a scope's first write is an
    ``INSERT ... ON CONFLICT DO NOTHING``)."""
    target = scope_label(scope, scope_id)

    def next_write(stored: StoredState | None) -> StateWrite:
        return _next(stored, None, change, target)

    revision = await uow.update_scope_state(scope, scope_id, next_write, tries=STATE_TRIES)
    if revision is not None:
        return revision
    # Every try lost its race: in turn with the others, under the writers' lock.
    async with uow.write() as tx:
        stored = await tx.scope_states.read(scope, scope_id, for_update=True)
        write = _next(stored, None, change, target)
        if not await tx.scope_states.write(scope, scope_id, **write):
            raise _lost_race(target)
    return write["revision"]
