"""Generation ids: a session id names one generation of one session, so a write that gives
a key an id first checks that no other key holds it (the checking half of the statements
on ``sessions``: :class:`SessionGenerations`, a part of ``SessionRepository``)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ...errors import SessionIdInUseError
from ..routing import cross_session
from ..tables import OWNED_TABLES, sessions


def _shown(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def generation_in_use(
    session_id: str, holder: str, session_key: str | None, *, holder_is_session: bool = True
) -> SessionIdInUseError:
    """The error for ``session_key`` (``None``: a new generation) taking an id ``holder``
    holds: as its current generation, or (``holder_is_session=False``) in rows stored
    under that key."""
    taker = f"session {_shown(session_key)}" if session_key is not None else "a new generation"
    held = (
        f"already belongs to session {_shown(holder)}"
        if holder_is_session
        else f"is already carried by rows stored under the key {_shown(holder)}"
    )
    return SessionIdInUseError(
        f"session id {_shown(session_id)} {held}; {taker} cannot take it (a session id names "
        "one generation of one session, and deleting or resetting a session removes every "
        "row carrying it). Nothing was written"
    )


class SessionGenerations:
    """Who holds a session id, and the refusal of a claim on one another key holds."""

    __slots__ = ()
    conn: AsyncConnection

    async def generation_claimant(self, session_id: str, session_key: str | None) -> str | None:
        """A session key other than ``session_key`` that already holds ``session_id``: the
        key of the session whose generation it is, or of any row stored under it; ``None``
        when the id is free for ``session_key``. One statement, an index probe per table,
        by id alone: it fans out under distribution (``listing``, the by-id resolution)."""
        probes = []
        for table in (sessions, *OWNED_TABLES):
            probe = select(table.c.session_key).where(table.c.session_id == session_id)
            if session_key is not None:
                probe = probe.where(table.c.session_key != session_key)
            probes.append(probe.limit(1).scalar_subquery())
        with cross_session("listing"):
            result = await self.conn.execute(select(func.coalesce(*probes)))
        claimant = result.scalar_one_or_none()
        return str(claimant) if claimant is not None else None

    async def generation_owner(self, session_id: str) -> str | None:
        """The key of the session whose current generation is ``session_id``, if any."""
        query = select(sessions.c.session_key).where(sessions.c.session_id == session_id).limit(1)
        owner = (await self.conn.execute(query)).scalar_one_or_none()
        return str(owner) if owner is not None else None

    async def claim_generation(self, session_id: str, session_key: str | None) -> None:
        """Refuse (``SessionIdInUseError``) to give ``session_key`` a session id that another
        key already holds (:func:`generation_claimant`). Inside the writing transaction, before
        anything is written; the unique index on ``sessions.session_id`` backs it against a
        concurrent writer (``db/generations.py`` translates that violation into the same error)."""
        claimant = await self.generation_claimant(session_id, session_key)
        if claimant is not None:
            owner = await self.generation_owner(session_id)
            if owner is not None and owner != session_key:
                raise generation_in_use(session_id, owner, session_key)
            raise generation_in_use(session_id, claimant, session_key, holder_is_session=False)

    async def check_row_generation(self, session_id: str, session_key: str) -> None:
        """Refuse a row stored under ``session_key`` that carries the session id of another
        session: it would show up in that session's transcript, and go when it is deleted."""
        owner = await self.generation_owner(session_id)
        if owner is not None and owner != session_key:
            raise SessionIdInUseError(
                f"session id {_shown(session_id)} belongs to session {_shown(owner)}; a row of "
                f"session {_shown(session_key)} cannot carry it. Nothing was written"
            )
