"""Statements on ``session_context_states`` (filtered by key: every generation's states)."""

from __future__ import annotations

from typing import Any, Unpack

from sqlalchemy import Update, true, update

from ...models import SessionContextState
from ...models.records import ContextStateFilter, StateSelection
from ..rows import select_rows, to_models, values_of
from ..sql import copy_rows
from ..tables import session_context_states as states
from .repository import Generation, Repository

ORDER = (states.c.created_at.asc(), states.c.id.asc())


def _selected(stmt: Any, selection: StateSelection) -> Any:
    """``stmt`` narrowed to the selection's provider and kind (``None``: any)."""
    provider, state_kind = selection.get("provider"), selection.get("state_kind")
    if provider is not None:
        stmt = stmt.where(states.c.provider == provider)
    if state_kind is not None:
        stmt = stmt.where(states.c.state_kind == state_kind)
    return stmt


def _invalidate(session_key: str, reason: str, selection: StateSelection) -> Update:
    stmt = update(states).where(states.c.session_key == session_key, states.c.valid == true())
    selected: Update = _selected(stmt, selection)
    return selected.values(valid=False, invalid_reason=reason)


class ContextStateRepository(Repository):
    """Statements on ``session_context_states``, on one unit of work's connection; never commits."""

    __slots__ = ()

    async def insert(self, state: SessionContextState) -> int:
        stmt = states.insert().values(values_of(state, states)).returning(states.c.id)
        return int((await self.conn.execute(stmt)).scalar_one())

    async def list_for_key(
        self,
        session_key: str,
        *,
        session_id: str | None = None,
        **selection: Unpack[ContextStateFilter],
    ) -> list[SessionContextState]:
        """The key's states (every generation's, or generation ``session_id``'s) matching
        ``selection`` (valid ones only unless ``valid_only=False``), oldest first."""
        query = select_rows(states, self.conn).where(states.c.session_key == session_key)
        if session_id is not None:
            query = query.where(states.c.session_id == session_id)
        query = _selected(query, selection)
        if selection.get("valid_only", True):
            query = query.where(states.c.valid == true())
        return to_models(
            SessionContextState,
            self.conn.dialect.name,
            await self.conn.execute(query.order_by(*ORDER)),
        )

    async def invalidate(
        self,
        session_key: str,
        *,
        reason: str = "invalidated",
        **selection: Unpack[StateSelection],
    ) -> int:
        """Invalidate the currently valid states matching ``selection``; how many changed."""
        result = await self.conn.execute(_invalidate(session_key, reason, selection))
        return int(result.rowcount)

    async def copy_valid_to_session(self, source: Generation, target: Generation) -> int:
        """Copy the valid context states stored under ``source``'s key to ``target``."""
        stmt = copy_rows(
            states,
            states.c,
            given={"session_id": target.session_id, "session_key": target.session_key},
            where=(states.c.session_key == source.session_key, states.c.valid == true()),
            order_by=ORDER,
        )
        return int((await self.conn.execute(stmt)).rowcount)
