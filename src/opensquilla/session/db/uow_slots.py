"""Two helpers of the units of work (``db/uow.py``): the pool's capacity as a semaphore,
and the discarding of a connection after a cancellation."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


async def discard_cancelled(conn: AsyncConnection) -> None:
    """Invalidate ``conn`` after a cancellation, once the driver's own clean-up of the
    interrupted statement (asyncpg sends the server a cancel request on a connection of its
    own) has run: closing the connection under it leaves that request's futures holding
    errors no one retrieves."""
    sync = conn.sync_connection
    if sync is None or sync.invalidated:
        return  # SQLAlchemy threw it away itself (the cancellation met a statement)
    driver = sync.connection.driver_connection
    pending = getattr(driver, "_cancellations", None)  # asyncpg's cancel requests in flight
    if pending:
        await asyncio.gather(*list(pending), return_exceptions=True)
    await conn.invalidate()


def pool_slots(engine: AsyncEngine) -> tuple[asyncio.Semaphore | None, float]:
    """A semaphore of the pool's capacity, and the pool's timeout, for a bounded pool
    (PostgreSQL's, a SQLite file's); ``None`` for a pool that never makes a checkout wait
    (the one connection of ``:memory:``, ``NullPool``, an unbounded overflow)."""
    pool = engine.pool
    size, overflow = getattr(pool, "size", None), getattr(pool, "_max_overflow", -1)
    timeout = getattr(pool, "timeout", None)
    if not callable(size) or not isinstance(overflow, int) or overflow < 0:
        return None, 0.0
    capacity = size() + overflow
    seconds = timeout() if callable(timeout) else 30.0
    return asyncio.Semaphore(capacity), float(seconds)
