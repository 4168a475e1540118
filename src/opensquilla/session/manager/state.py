"""The manager's state calls: a session's state and the state of wider scopes, each a JSON
object with a compare-and-set revision (docs/state.md).

A part of :class:`SessionManager`, kept apart by job: the front door (the key
canonicalised, the changes, removals, revision and scope checked once) over one use case of
``usecases/state.py`` each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..keys import canonicalize_session_key
from ..models.state import (
    ScopeState,
    SessionState,
    StateScope,
    check_scope,
    check_state_change,
)
from ..storage import SessionStorage
from ..usecases import state


class StateCalls:
    """The state calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage

    async def get_state(self, session_key: str) -> SessionState:
        """The state of the session's current generation: ``state`` (``{}`` until the first
        update), ``revision`` (0 until then) and ``updated_at``. A missing session:
        ``SessionNotFoundError``."""
        key = canonicalize_session_key(session_key)
        return await state.get_state(self._storage.uow, key)

    async def update_state(
        self,
        session_key: str,
        changes: dict[str, Any],
        expected_revision: int | None = None,
        *,
        remove: Sequence[str] = (),
    ) -> int:
        """Merge ``changes`` (a JSON object) into the session's state, one top-level key at a
        time, drop the keys named in ``remove``, and return the new revision (one more than
        the old, also for an empty change). With ``expected_revision``, only while the
        state is at that revision: else ``StaleStateError`` and nothing written. Atomic:
        of two concurrent updates expecting the same revision exactly one succeeds."""
        change = check_state_change(changes, remove, expected_revision)
        key = canonicalize_session_key(session_key)
        return await state.update_state(self._storage.uow, key, change)

    async def get_scope_state(self, scope: StateScope, scope_id: str) -> ScopeState:
        """The state of ``scope`` (``"app"`` or ``"user"``) and ``scope_id``: ``{}`` at
        revision 0 until the first update. No session is involved."""
        checked_scope, checked_id = check_scope(scope, scope_id)
        return await state.get_scope_state(self._storage.uow, checked_scope, checked_id)

    async def update_scope_state(
        self,
        scope: StateScope,
        scope_id: str,
        changes: dict[str, Any],
        expected_revision: int | None = None,
        *,
        remove: Sequence[str] = (),
    ) -> int:
        """:meth:`update_state` for the state of ``scope`` and ``scope_id``."""
        change = check_state_change(changes, remove, expected_revision)
        checked_scope, checked_id = check_scope(scope, scope_id)
        return await state.update_scope_state(self._storage.uow, checked_scope, checked_id, change)
