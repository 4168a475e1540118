"""PostgreSQL's liveness check on checkout (db/engine.py): a round trip for a connection
idle for ``PING_AFTER_IDLE_S`` or more, none for one in use a moment ago; a connection the
server closed is replaced either way, never handed to an operation."""

from __future__ import annotations

import asyncio
import select
from typing import Any

import asyncpg
import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import engine as engine_module

KEY = "agent:main:ping"
HANG_GUARD = 60.0

pytestmark = pytest.mark.postgres_only


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    frozen = Clock()
    monkeypatch.setattr(engine_module, "_monotonic", frozen)
    return frozen


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = asyncpg.Connection.fetchrow

    async def fetchrow(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if query == ";":
            seen.append(query)
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "fetchrow", fetchrow)
    return seen


async def _recent_driver(storage: SessionStorage) -> Any:
    """The driver connection of the pool's one connection, just used and checked in."""
    async with storage.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        return raw.driver_connection


async def _terminate(database: str, pid: int, *, until_gone: bool = False) -> None:
    """``pg_terminate_backend(pid)``; with ``until_gone``, until the server has let the
    backend go (its socket closed: the close is on its way to the driver)."""
    admin = await asyncpg.connect(database.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        query = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
        while until_gone and await admin.fetchval(query, pid):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
    finally:
        await admin.close()


async def test_only_a_connection_idle_for_a_while_is_pinged(
    database: str, clock: Clock, pings: list[str]
) -> None:
    async with SessionStorage(database, pool_size=1, max_overflow=0) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        pings.clear()
        for n in range(5):
            await manager.append_message(KEY, "user", f"busy {n}")
            clock.now += engine_module.PING_AFTER_IDLE_S / 10
        assert pings == []
        clock.now += engine_module.PING_AFTER_IDLE_S
        await manager.append_message(KEY, "user", "after a pause")
        assert pings == [";"]
        assert len(await manager.get_transcript(KEY)) == 6


async def test_a_recently_used_connection_the_server_closed_is_replaced(
    database: str, clock: Clock, pings: list[str]
) -> None:
    async with SessionStorage(database, pool_size=1, max_overflow=0) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await manager.append_message(KEY, "user", "before")
        driver = await _recent_driver(storage)
        pid = driver.get_server_pid()
        await _terminate(database, pid)
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while not driver.is_closed():  # the driver has seen the socket close
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        pings.clear()
        # Used a moment ago, so not pinged: refused on its closed socket, and the one ping
        # is the replacement's (a new connection's first checkout).
        entry = await manager.append_message(KEY, "user", "after")
        assert pings == [";"]
        assert [e.content for e in await manager.get_transcript(KEY)] == ["before", "after"]
        assert entry.id is not None


class _ReadOnce(asyncio.Protocol):
    """Between asyncpg's protocol and its transport: forwards what arrives, then stops the
    transport reading, so that the close that follows stays unread."""

    def __init__(self, inner: Any, transport: Any) -> None:
        self.inner, self.transport, self.read = inner, transport, asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)
        self.transport.pause_reading()
        self.read.set()

    def eof_received(self) -> bool | None:
        return bool(self.inner.eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)


async def test_a_recently_used_connection_whose_close_is_still_unread_is_replaced(
    database: str, clock: Clock, pings: list[str]
) -> None:
    """The server terminates the backend of a connection used a moment ago, and the event
    loop reads its FATAL notice but not yet the close (asyncpg's protocol is then in an
    error state, ``is_closed()`` still false): the socket shows the unread close, so the
    checkout pings, the ping fails, and the pool replaces the connection before the append
    runs (without the socket's check the append itself failed: "another operation is in
    progress"). (Left open: a checkout between the notice's read and the close's arrival,
    apart by the backend's exit, still finds nothing on the socket; that operation fails
    with ``DatabaseUnavailableError``.)"""
    async with SessionStorage(database, pool_size=1, max_overflow=0) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await manager.append_message(KEY, "user", "before")
        driver = await _recent_driver(storage)
        pid = driver.get_server_pid()
        transport = driver._transport
        between = _ReadOnce(transport.get_protocol(), transport)
        transport.set_protocol(between)
        await _terminate(database, pid, until_gone=True)
        await asyncio.wait_for(between.read.wait(), HANG_GUARD)  # the FATAL notice, read
        # The close reaches the socket when the backend's process has exited, which can be
        # a while after the server stopped listing it (a busy machine): wait for it there.
        socket_fd = transport.get_extra_info("socket").fileno()
        deadline = asyncio.get_running_loop().time() + HANG_GUARD
        while not select.select([socket_fd], [], [], 0)[0]:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert not driver.is_closed()  # its close is not read
        pings.clear()
        entry = await manager.append_message(KEY, "user", "after")
        assert pings == [";", ";"]  # the dead one's, then its replacement's
        assert [e.content for e in await manager.get_transcript(KEY)] == ["before", "after"]
        assert entry.id is not None
