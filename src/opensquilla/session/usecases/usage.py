"""Usage into the session counters: atomic increments, fenced by the generation
(docs/semantics.md#usage-counters).

A turn's usage belongs to the generation the turn ran in. The call fences on the
generation this manager last saw for the key (its appends' and reads' cache,
``usecases/generations.py``; then it is one statement in autocommit; on a miss, read now,
inside the same transaction as the UPDATE): a reset committed since makes it
``StaleEpochError`` with nothing added, and the usage is never moved into the new
conversation, whose counters the reset set to zero. Unlike a plain append it does not
retry: the cached generation is dropped, so a call after this one reads the current one.
"""

from __future__ import annotations

from ..db.uow import UnitOfWork
from ..errors import InvalidInputError, SessionNotFoundError, StaleEpochError
from ..keys import CanonicalKey
from ..models import INT64_MAX, SessionNode
from ..models.usage import CheckedUsage
from .generations import GenerationCache


async def record_usage(
    uow: UnitOfWork,
    generations: GenerationCache,
    key: CanonicalKey,
    usage: CheckedUsage,
    now: int,
) -> SessionNode:
    """Add checked ``usage`` to the counters of ``key``'s generation: one ``UPDATE ...
    RETURNING`` in autocommit when the generation is cached, else the row read and the
    UPDATE in one write transaction; the updated row. ``StaleEpochError`` when the
    generation moved, ``SessionNotFoundError`` when the session is gone,
    ``InvalidInputError`` when a counter has no room; nothing written in each case."""
    cached = generations.cached(key)
    if cached is not None:
        session_id, epoch = cached
        updated = await uow.add_usage_in_one_statement(
            key, session_id=session_id, epoch=epoch, usage=usage, now=now
        )
        if updated is not None:
            return generations.remember(updated)
        # The error path only: say why the fence refused, from the row as it is now.
        async with uow.read() as tx:
            current = await tx.sessions.get(key)
    else:
        async with uow.write() as tx:
            node = generations.found(key, await tx.sessions.get(key))
            session_id, epoch = node.session_id, node.epoch
            updated = await tx.sessions.add_usage(
                key, session_id=session_id, epoch=epoch, usage=usage, now=now
            )
            if updated is not None:
                return generations.remember(updated)
            current = await tx.sessions.get(key)
    generations.forget(key)
    if current is None:
        raise SessionNotFoundError(f"Session not found: {key}; no usage was recorded")
    if current.session_id != session_id or current.epoch != epoch:
        raise StaleEpochError(
            f"Generation mismatch for {key}: usage for {session_id} at epoch {epoch}, the "
            f"session is now {current.session_id} at epoch {current.epoch} (reset "
            "meanwhile); no usage was recorded"
        )
    generations.remember(current)
    full = usage.full_counters(current)
    raise InvalidInputError(
        f"recording this usage would take {', '.join(full) or 'a counter'} of {key} past the "
        f"largest value it can hold ({INT64_MAX} for a count); nothing was written"
    )


__all__ = ["record_usage"]
