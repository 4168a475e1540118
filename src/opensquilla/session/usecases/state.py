"""Session state and scoped state (docs/state.md): a read is one statement, an update one
write transaction (the stored row read under the writers' lock, the compare-and-set, the
merge, the conditional write).

A session's state row belongs to one generation (its ``session_id``). A row of another
generation (a ``session_id`` the session no longer has: written before a whole-row upsert
changed the generation, or left under the key by a release without state) reads as the
empty state at its revision + 1, so the revision never goes back and a compare-and-set
read in that older generation fails; a reset records its new, empty state itself
(``tx.session_states.restart``, in the reset's transaction).
"""

from __future__ import annotations

from ..db.repos.states import StoredState
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


def _updated_at(visible: StoredState) -> int | None:
    return visible.updated_at or None


def _next(visible: StoredState, change: StateChange, target: str) -> tuple[dict[str, object], int]:
    """The state and revision an update writes over ``visible``, after its checks:
    ``StaleStateError`` when the compare-and-set fails; the merged state no larger than
    :data:`MAX_STATE_BYTES`."""
    expected = change.expected_revision
    if expected is not None and expected != visible.revision:
        raise StaleStateError(target, expected, visible.revision)
    merged = change.applied_to(visible.state)
    if state_size(merged) > MAX_STATE_BYTES:
        raise InvalidInputError(
            f"the state of {target} would be larger than {MAX_STATE_BYTES} bytes as JSON; "
            "nothing was written"
        )
    return merged, visible.revision + 1


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
    visible = _visible(stored, session_id)
    return SessionState(
        session_key=key,
        session_id=session_id,
        state=visible.state,
        revision=visible.revision,
        updated_at=_updated_at(visible),
    )


async def update_state(uow: UnitOfWork, key: CanonicalKey, change: StateChange) -> int:
    """Merge ``change`` into the state of the session ``key`` (one write transaction); the
    new revision. ``SessionNotFoundError`` for a missing session, ``StaleStateError`` when
    ``change.expected_revision`` is not the stored revision: nothing written either way."""
    target = f"session {key!r}"
    async with uow.write() as tx:
        found = await tx.session_states.read(key, for_update=True)
        if found is None:
            raise SessionNotFoundError(f"Session not found: {key}; nothing was written")
        session_id, stored = found
        state, revision = _next(_visible(stored, session_id), change, target)
        written = await tx.session_states.write(
            key,
            session_id=session_id,
            state=state,
            revision=revision,
            now=now_ms(),
            stored_revision=None if stored is None else stored.revision,
        )
        if not written:
            raise _lost_race(target)
    return revision


async def get_scope_state(uow: UnitOfWork, scope: StateScope, scope_id: str) -> ScopeState:
    """The state of ``(scope, scope_id)`` (one statement): empty at revision 0 until the
    first update."""
    async with uow.read() as tx:
        visible = _visible(await tx.scope_states.read(scope, scope_id), None)
    return ScopeState(
        scope=scope,
        scope_id=scope_id,
        state=visible.state,
        revision=visible.revision,
        updated_at=_updated_at(visible),
    )


async def update_scope_state(
    uow: UnitOfWork, scope: StateScope, scope_id: str, change: StateChange
) -> int:
    """Merge ``change`` into the state of ``(scope, scope_id)`` (one write transaction); the
    new revision. ``StaleStateError`` as :func:`update_state`."""
    target = scope_label(scope, scope_id)
    async with uow.write() as tx:
        stored = await tx.scope_states.read(scope, scope_id, for_update=True)
        state, revision = _next(_visible(stored, None), change, target)
        written = await tx.scope_states.write(
            scope,
            scope_id,
            state=state,
            revision=revision,
            now=now_ms(),
            stored_revision=None if stored is None else stored.revision,
        )
        if not written:
            raise _lost_race(target)
    return revision
