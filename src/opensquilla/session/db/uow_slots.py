"""Helpers of the units of work (``db/uow.py``): the pool's capacity as a semaphore, a
statement that a cancellation lets finish, and the discarding of a connection after a
cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")


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


class _RunsToItsEnd(asyncio.Task[T]):
    """The task of :func:`not_interrupted`'s statement: a cancellation does not interrupt
    it. ``cancel()`` calls the caller's hook, passes the cancellation on to the statement
    only when asked (``cancel_statement``), and answers ``False``: asyncio's ``Task.cancel``
    of the task awaiting this one then defers its ``CancelledError`` until this one is done
    (a waiter that refuses to be cancelled), which is what ``asyncio.shield`` was used for,
    without its outer future and its two extra turns of the event loop."""

    __slots__ = ("_on_cancel", "_pass_on")

    def __init__(
        self,
        statement: Coroutine[Any, Any, T],
        on_cancel: Callable[[], None] | None,
        pass_on: bool,
    ) -> None:
        super().__init__(statement)
        self._on_cancel = on_cancel
        self._pass_on = pass_on

    def cancel(self, msg: Any = None) -> bool:
        if not self.done():
            if self._on_cancel is not None:
                self._on_cancel()
            if self._pass_on:
                super().cancel(msg)
        return False


async def not_interrupted(
    statement: Coroutine[Any, Any, T],
    on_cancel: Callable[[], None] | None = None,
    *,
    cancel_statement: bool = False,
) -> T:
    """``await statement`` (a checkout, ``uow._run_on_connection``, a clean-up; begun with a
    pool slot held, so it never waits for the pool), where a cancellation waits for it to
    finish before it propagates.

    Cancelling the driver half-way through a statement, or through opening a connection,
    leaves the connection unusable: the pool then closes it from the cancelled task, which
    fails again ("Exception closing connection"), and asyncpg's own futures are left holding
    errors no one retrieves ("Future exception was never retrieved"): cancelling 400 appends
    logged hundreds of those and threw away pooled connections. One statement is short; it
    runs to its end and hands its connection back, and the caller still gets its
    ``CancelledError`` (the append may then have been written, as when a cancellation meets
    a COMMIT). Waiting for a slot (``UnitOfWork._pool_slot``) stays cancellable.
    ``on_cancel`` is called when the cancellation arrives (SQLite's batch: its statement
    then runs to its end without its COMMIT). ``cancel_statement``: the cancellation is
    passed on to the statement instead (PostgreSQL's batch: asyncpg asks the server to
    cancel it, and the connection, its clean-up waited for, is thrown away:
    ``direct_statement.pool_connection``), and then waited for. The statement runs in a
    task of its own (:class:`_RunsToItsEnd`) whichever way it ends."""
    running = _RunsToItsEnd(statement, on_cancel, cancel_statement)
    try:
        return await running
    except asyncio.CancelledError:
        # The caller's cancellation, raised only once the statement is done (its task never
        # lets itself be cancelled in the caller's place), or the statement's own when it
        # was passed on: its outcome retrieved, the caller gets its cancellation, not the
        # statement's error.
        if not running.cancelled():
            running.exception()
        raise
