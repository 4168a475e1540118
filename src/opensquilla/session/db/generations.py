"""Generation ids under races: the unique index on ``sessions.session_id`` firing becomes
the error our own check gives (docs/semantics.md#keys).

Every writer checks that the id it gives a key is free (``SessionRepository.claim_generation``)
before writing; a concurrent writer can still take the id between that check and the
commit, and then the unique index refuses ours. :func:`generation_guard` wraps such a unit
of work and turns that refusal into what the check would have said.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ..errors import IntegrityViolationError
from .repos.sessions import generation_in_use
from .uow import UnitOfWork


class GenerationRace(Exception):
    """A concurrent creator of the same key, with the same session id, won: the key is taken."""


@contextlib.asynccontextmanager
async def generation_guard(
    uow: UnitOfWork, session_id: object, session_key: str | None, *, creating: bool = False
) -> AsyncIterator[None]:
    """Around a unit of work that gives ``session_key`` (``None``: a new generation of a
    key) the id ``session_id``."""
    try:
        yield
    except IntegrityViolationError as exc:
        if not isinstance(session_id, str):
            raise
        error = await generation_violation(uow, exc, session_id, session_key, creating=creating)
        if error is exc:
            raise
        raise error from exc


async def generation_violation(
    uow: UnitOfWork,
    exc: IntegrityViolationError,
    session_id: str,
    session_key: str | None,
    *,
    creating: bool = False,
) -> Exception:
    """What to raise for ``exc``, recognised by what the database holds afterwards, not by
    an index name: another key's session has the id now, ``SessionIdInUseError``; this very
    key has it and we were ``creating`` (two creators of one key with one id),
    :class:`GenerationRace`; otherwise ``exc`` itself, unchanged."""
    async with uow.read() as tx:
        owner = await tx.sessions.generation_owner(session_id)
    if owner is None:
        return exc
    if owner != session_key:
        return generation_in_use(session_id, owner, session_key)
    return GenerationRace() if creating else exc
