"""Processes and connections that die: a writer killed with SIGKILL inside its transaction,
and Postgres connections terminated by the server.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import DatabaseError

from . import workers
from .support import HANG_GUARD, admin_dsn, database_name, raw_rows

KEY = "agent:main:survivor"
KILLED_KEY = "agent:main:never-committed"


# A process killed mid-write: what reaches the disk is the point, so the store's own
# durability (SQLite synchronous=FULL, the server's synchronous_commit) stays on. The
# connections terminated by the server below lose no commit of theirs (the server runs on):
# they get the pooled databases.
@pytest.mark.durable
async def test_a_writer_killed_inside_its_transaction_leaves_no_trace(database: str) -> None:
    """A child process opens a write unit, writes a session and ~3 MB of transcript (more
    than SQLite's page cache, so pages reach the WAL uncommitted), tells us, and is killed
    with SIGKILL. The database opens cleanly, none of those rows are visible, earlier
    commits are intact, the lock is free, and SQLite's integrity check passes."""
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        for n in range(5):
            await manager.append_message(KEY, "user", f"committed {n}", token_count=2)

    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    child = context.Process(
        target=workers.hold_write_transaction, args=(database, KILLED_KEY, 150, ready)
    )
    child.start()
    try:
        status, detail = await asyncio.to_thread(ready.get, True, HANG_GUARD)
        assert status == "ready", detail
        assert detail == child.pid
        # While it holds the transaction, nobody else sees its rows.
        async with SessionStorage(database) as storage:
            assert await storage.get_session(KILLED_KEY) is None
        if not database.startswith("postgresql"):
            wal = Path(database + "-wal")
            assert wal.stat().st_size > 1_000_000, "the uncommitted pages never reached the WAL"
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.join, HANG_GUARD)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == -signal.SIGKILL

    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        assert await storage.get_session(KILLED_KEY) is None
        ((uncommitted,),) = await raw_rows(
            database, f"SELECT COUNT(*) FROM transcript_entries WHERE session_key = '{KILLED_KEY}'"
        )
        assert uncommitted == 0
        assert [e.content for e in await manager.get_transcript(KEY)] == [
            f"committed {n}" for n in range(5)
        ]
        # The killed writer's locks are gone: the same key can be written (the timeout is a
        # hang guard; a lock that outlived its process would block this for good).
        await asyncio.wait_for(manager.create(KILLED_KEY), HANG_GUARD)
        await manager.append_message(KILLED_KEY, "user", "written after the crash")
        node = await manager.get_session(KEY)
        assert node is not None and node.total_tokens == 10
    if not database.startswith("postgresql"):
        assert await raw_rows(database, "PRAGMA integrity_check") == [("ok",)]


async def _backend_pids(target: str) -> set[int]:
    conn = await asyncpg.connect(admin_dsn(target))
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1", database_name(target)
        )
    finally:
        await conn.close()
    return {row["pid"] for row in rows}


async def _terminate_all(target: str) -> set[int]:
    """``pg_terminate_backend`` every connection to ``target``'s database; waits until the
    server has let them go (polled, with ``HANG_GUARD`` as the limit)."""
    pids = await _backend_pids(target)
    conn = await asyncpg.connect(admin_dsn(target))
    try:
        for pid in pids:
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()
    deadline = time.monotonic() + HANG_GUARD
    while True:
        remaining = pids & await _backend_pids(target)
        if not remaining or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert not remaining, f"the server kept {remaining} after pg_terminate_backend"
    return pids


async def _closes_seen(storage: SessionStorage) -> None:
    """Until the driver has read the server's close of every pooled connection. The
    server stops listing a backend before its process has exited and closed the socket;
    a checkout in between meets a connection whose FATAL notice asyncpg read and refuses
    statements for, while its close is not on the socket yet (that case:
    tests/storage/test_pg_checkout_ping.py's unread close)."""
    pool: Any = storage.engine.sync_engine.pool
    deadline = time.monotonic() + HANG_GUARD
    while True:
        drivers = [
            record.dbapi_connection.driver_connection
            for record in list(pool._pool._queue._queue)  # the checked-in records
            if record.dbapi_connection is not None
        ]
        if all(driver.is_closed() for driver in drivers):
            return
        assert time.monotonic() < deadline, "the driver never saw the server close them"
        await asyncio.sleep(0.01)


@pytest.mark.postgres_only
async def test_connections_terminated_between_operations_are_replaced(
    backend: Any, database: str
) -> None:
    """Every pooled connection is killed by the server between two operations; the next
    operations (several at once) all succeed on fresh connections."""
    async with SessionStorage(database, pool_size=3) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await asyncio.gather(
            *(manager.append_message(KEY, "user", f"before {n}") for n in range(3))
        )
        assert storage.engine.pool.checkedin() >= 2, "the pool should hold several connections"

        killed = await _terminate_all(database)
        assert killed
        await _closes_seen(storage)

        await asyncio.gather(*(manager.append_message(KEY, "user", f"after {n}") for n in range(3)))
        node, _ = await manager.get_or_create(KEY)
        contents = sorted(e.content or "" for e in await manager.get_transcript(KEY))
        assert contents == sorted(
            [f"before {n}" for n in range(3)] + [f"after {n}" for n in range(3)]
        )
        assert node.session_key == KEY
        assert not killed & await _backend_pids(database)


@pytest.mark.postgres_only
async def test_a_connection_terminated_inside_a_transaction_commits_nothing(
    backend: Any, database: str
) -> None:
    """The server kills the connection halfway through a write unit: the caller gets a
    package error, nothing of the unit is stored, and the next operation succeeds."""
    from opensquilla.session.models import SessionNode

    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        with pytest.raises(DatabaseError) as caught:
            async with storage.uow.write() as tx:
                await tx.sessions.insert_new(SessionNode(session_key=KILLED_KEY))
                await _terminate_all(database)
                await tx.sessions.get(KILLED_KEY)
        assert "terminat" in str(caught.value).lower() or "connection" in str(caught.value)
        assert await storage.get_session(KILLED_KEY) is None
        await manager.append_message(KEY, "user", "still fine")
        assert [e.content for e in await manager.get_transcript(KEY)] == ["still fine"]
        assert storage.engine.pool.checkedout() == 0
