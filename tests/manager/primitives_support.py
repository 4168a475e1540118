"""Helpers of the batch, pop and order tests (issue 28): another connection holding the
session row (PostgreSQL) or the write lock (SQLite), so that the calls under test are
forced to wait together, and statement events to see them arrive."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
from sqlalchemy import event

from opensquilla.session import SessionStorage
from tests.reliability.support import asyncpg_dsn, database_name, is_postgres_target

WAIT_GUARD = 60.0
# A batch's INSERT on every path: PostgreSQL's (fed by the fenced touch), SQLite's into the
# append view (a batch of one chunk) or into the table (the three-statement path).
BATCH_INSERT = "INSERT INTO transcript_"


class Held:
    """What holds the lock: ``waiters()`` (PostgreSQL: sessions of the database waiting on
    a lock) and ``release()``."""

    def __init__(self, target: str, conn: Any) -> None:
        self.target = target
        self.conn = conn
        self.released = False

    async def waiters(self) -> int:
        if not is_postgres_target(self.target):
            raise AssertionError("SQLite shows no waiters: use statement events")
        admin = await asyncpg.connect(asyncpg_dsn(self.target))
        try:
            return int(
                await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = $1 AND wait_event_type = 'Lock'",
                    database_name(self.target),
                )
            )
        finally:
            await admin.close()

    async def wait_for_waiters(self, count: int) -> None:
        async with asyncio.timeout(WAIT_GUARD):
            # The server's lock table is the event: polled, never a guessed delay.
            while await self.waiters() < count:  # noqa: ASYNC110
                await asyncio.sleep(0.01)

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        if is_postgres_target(self.target):
            await self.conn.execute("ROLLBACK")
            await self.conn.close()
        else:
            self.conn.execute("ROLLBACK")
            self.conn.close()


@contextlib.asynccontextmanager
async def holding(target: str, key: str) -> AsyncIterator[Held]:
    """PostgreSQL: the session row of ``key`` locked FOR UPDATE by another connection.
    SQLite: the database's write lock held by another connection."""
    if is_postgres_target(target):
        conn = await asyncpg.connect(asyncpg_dsn(target))
        await conn.execute("BEGIN")
        await conn.execute("SELECT 1 FROM sessions WHERE session_key = $1 FOR UPDATE", key)
    else:
        conn = sqlite3.connect(target, isolation_level=None, timeout=0)
        conn.execute("BEGIN IMMEDIATE")
    held = Held(target, conn)
    try:
        yield held
    finally:
        await held.release()


@contextlib.contextmanager
def arrivals(storage: SessionStorage, marker: str) -> Iterator[asyncio.Event]:
    """An event set when a statement containing ``marker`` is about to run on
    ``storage`` (the listener runs on the event loop's thread)."""
    arrived = asyncio.Event()

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if marker in statement:
            arrived.set()

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield arrived
    finally:
        event.remove(engine, "before_cursor_execute", seen)


@contextlib.contextmanager
def statements(storage: SessionStorage) -> Iterator[list[str]]:
    """Every statement run on ``storage`` meanwhile (forces the Connection path)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@contextlib.contextmanager
def on_statement(
    storage: SessionStorage, marker: str, action: Callable[[], None], *, when: str = "after"
) -> Iterator[None]:
    """Run ``action`` after (``when="before"``: just before) the first statement containing
    ``marker`` on ``storage``."""
    done = False

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        nonlocal done
        if not done and marker in statement:
            done = True
            action()

    engine = storage.engine.sync_engine
    name = f"{when}_cursor_execute"
    event.listen(engine, name, after)
    try:
        yield
    finally:
        event.remove(engine, name, after)
