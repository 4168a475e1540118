"""Session rows: whole-row writes, reads, listings, counts and narrow updates, each one
unit of work over ``tx.sessions`` (the bodies of ``SessionStorage``'s session methods,
which check and canonicalise the arguments first).

A write that gives a key a generation id claims it inside its unit; the unique index firing
on a concurrent claim is turned into the check's own error by ``generation_guard``, which
reads the owner in a unit of its own (on that error path only).
"""

from __future__ import annotations

from typing import Unpack

from ..db.generations import GenerationRace, generation_guard
from ..db.uow import UnitOfWork
from ..errors import SessionGenerationChangedError, SessionNotFoundError, StaleGenerationError
from ..keys import CanonicalKey
from ..models import SessionListCursor, SessionListFilter, SessionListPage, SessionNode


async def upsert(uow: UnitOfWork, node: SessionNode) -> None:
    """Write the whole row of canonical ``node`` (an older generation, or an id another
    key holds, is refused by the repository)."""
    async with generation_guard(uow, node.session_id, node.session_key), uow.write() as tx:
        await tx.sessions.claim_generation(node.session_id, node.session_key)
        await tx.sessions.upsert(node)


async def upsert_generation(uow: UnitOfWork, node: SessionNode, expected: str) -> None:
    """Write the row only while its key holds generation ``expected`` (upstream HEAD's
    generation-checked write); never creates one."""
    changed = SessionGenerationChangedError(f"Session generation changed: {node.session_key}")
    if node.session_id != expected:
        raise changed
    async with uow.write() as tx:
        if await tx.sessions.update_generation(node, expected):
            return
        stored = await tx.sessions.get(node.session_key)
    if stored is None or stored.session_id != expected:
        raise changed
    raise StaleGenerationError(
        f"Stale write for {node.session_key}: the node is at epoch {node.epoch}, the "
        f"stored generation {expected} at epoch {stored.epoch}"
    )


async def create(uow: UnitOfWork, node: SessionNode) -> bool:
    """Insert canonical ``node``; ``False`` when its key exists (nothing changed)."""
    try:
        async with (
            generation_guard(uow, node.session_id, node.session_key, creating=True),
            uow.write() as tx,
        ):
            await tx.sessions.claim_generation(node.session_id, node.session_key)
            return await tx.sessions.insert_new(node)
    except GenerationRace:
        return False  # the same key and id, created concurrently: the key is taken


async def get(uow: UnitOfWork, key: CanonicalKey) -> SessionNode | None:
    async with uow.read() as tx:
        return await tx.sessions.get(key)


async def listing(
    uow: UnitOfWork, limit: int | None, offset: int, **filters: Unpack[SessionListFilter]
) -> list[SessionNode]:
    """Sessions by recent activity (``updated_at`` then key, both descending)."""
    async with uow.read() as tx:
        return await tx.sessions.list_sessions(limit=limit, offset=offset, **filters)


async def listing_page(
    uow: UnitOfWork,
    page_size: int,
    cursor: SessionListCursor | None,
    **filters: Unpack[SessionListFilter],
) -> SessionListPage:
    """``page_size`` sessions of the listing strictly after ``cursor``, and whether more
    follow (one extra row read tells)."""
    after = (cursor.updated_at, cursor.session_key) if cursor is not None else None
    async with uow.read() as tx:
        nodes = await tx.sessions.list_page(after=after, limit=page_size + 1, **filters)
    has_more = len(nodes) > page_size
    del nodes[page_size:]
    next_cursor = SessionListCursor.of(nodes[-1]) if has_more else None
    return SessionListPage(sessions=nodes, next_cursor=next_cursor, has_more=has_more)


async def count(uow: UnitOfWork) -> int:
    async with uow.read() as tx:
        return await tx.sessions.count()


async def delete(uow: UnitOfWork, key: CanonicalKey) -> bool:
    """Delete the session and every row it owns; ``False`` when there was none."""
    async with uow.write() as tx:
        return bool(await tx.sessions.delete_cascade([key]))


async def epoch(uow: UnitOfWork, key: CanonicalKey) -> int:
    """The key's epoch; 0 for a key that has no session."""
    async with uow.read() as tx:
        found = await tx.sessions.get_epoch(key)
    return found if found is not None else 0


async def increment_epoch(uow: UnitOfWork, key: CanonicalKey) -> int:
    async with uow.write() as tx:
        found = await tx.sessions.increment_epoch(key)
    if found is None:
        raise SessionNotFoundError(f"Session not found: {key}")
    return found


async def update_fields(
    uow: UnitOfWork, key: CanonicalKey, values: dict[str, object]
) -> SessionNode:
    """Set only these (checked) columns, in one statement; the new row."""
    new_id = values.get("session_id")
    async with generation_guard(uow, new_id, key), uow.write() as tx:
        if isinstance(new_id, str):
            await tx.sessions.claim_generation(new_id, key)
        node = await tx.sessions.update_fields(key, dict(values))
    if node is None:
        raise SessionNotFoundError(f"Session not found: {key}")
    return node


async def finish(uow: UnitOfWork, key: CanonicalKey, status: str, now: int) -> SessionNode:
    async with uow.write() as tx:
        node = await tx.sessions.finish(key, status, now)
    if node is None:
        raise SessionNotFoundError(f"Session not found: {key}")
    return node
