"""The append's two paths failing (``db/direct_statement.py``): a refused checkout, a
connection lost mid-statement, a cancellation, a timeout end alike on both, and a
connection is never returned to the pool broken.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import text

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import DatabaseError, DatabaseUnavailableError
from tests.storage.direct_paths import HANG_GUARD, KEY, force_path, listening, paths


@pytest.fixture(params=[True, False], ids=["direct", "connection"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both paths: the direct one as it is, the Connection one forced."""
    force_path(monkeypatch, request.param)
    return bool(request.param)


async def test_a_refused_checkout_is_database_unavailable_on_both_paths(
    storage: SessionStorage, manager: SessionManager, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    refusing = True

    def refuse(*args: Any) -> None:
        if refusing:
            raise ConnectionRefusedError("the test refuses every new connection")

    # do_connect is a pool-side event: it sees no statement, the append keeps its path.
    with paths(monkeypatch) as taken, listening(storage, "do_connect", refuse):
        await storage.engine.dispose()
        with pytest.raises(
            DatabaseUnavailableError,
            match="cannot connect to the database: the test refuses every new connection",
        ):
            await manager.append_message(KEY, "user", "refused")
        refusing = False
        await manager.append_message(KEY, "user", "after")
    assert taken == ["direct" if fast else "connection"] * 2
    assert [e.content for e in await manager.get_transcript(KEY)] == ["before", "after"]


@pytest.mark.postgres_only
async def test_a_connection_lost_in_the_statement_is_never_returned_to_the_pool(
    storage: SessionStorage, manager: SessionManager, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server connection dies while the append's statement is sent: the append raises
    ``DatabaseUnavailableError``, the connection is invalidated (not handed out again),
    and the next append runs on a new one."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    dialect: Any = storage.engine.sync_engine.dialect
    original = dialect.do_execute
    kill = True

    def dying(cursor: Any, statement: str, parameters: Any, context: Any = None) -> Any:
        nonlocal kill
        if kill and "transcript_entries" in statement:
            kill = False
            cursor._adapt_connection._connection.terminate()
        return original(cursor, statement, parameters, context)

    monkeypatch.setattr(dialect, "do_execute", dying)
    invalidated: list[Any] = []
    # A pool event, which the direct path keeps: it sees the connection let go of.
    with (
        paths(monkeypatch) as taken,
        listening(storage, "invalidate", lambda *args: invalidated.append(args)),
    ):
        with pytest.raises(DatabaseUnavailableError) as caught:
            await manager.append_message(KEY, "user", "lost")
        assert len(invalidated) == 1
        cause: Any = caught.value.__cause__
        assert cause.connection_invalidated  # and the pool's older connections recycled
        await manager.append_message(KEY, "user", "after")
    assert taken == ["direct" if fast else "connection"] * 2
    contents = [e.content for e in await manager.get_transcript(KEY)]
    assert contents == ["before", "after"]


@pytest.mark.sqlite_only
async def test_a_cancelled_append_on_a_memory_store_loses_nothing(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while its statement waits for the driver's thread: the append runs to its
    end first (a one-statement append, once it holds its connection, is never interrupted:
    docs/semantics.md#cancellation), then the cancellation propagates; the connection
    (``:memory:`` keeps its one) goes back clean and the store keeps working."""
    release = threading.Event()
    reached = asyncio.Event()
    original = aiosqlite.Connection._execute
    loop = asyncio.get_running_loop()

    async def held(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "") == "_run_one" and "transcript_appends" in str(args[1]):

            def blocked(*inner: Any, **inner_kw: Any) -> Any:
                loop.call_soon_threadsafe(reached.set)
                assert release.wait(HANG_GUARD)
                return fn(*inner, **inner_kw)

            return await original(self, blocked, *args, **kwargs)
        return await original(self, fn, *args, **kwargs)

    async with SessionStorage(":memory:") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await manager.append_message(KEY, "user", "before")
        dbapi: Any = storage.engine.sync_engine.dialect.loaded_dbapi
        assert not dbapi.reconnected
        monkeypatch.setattr(aiosqlite.Connection, "_execute", held)
        with paths(monkeypatch) as taken:
            task = asyncio.create_task(manager.append_message(KEY, "user", "cancelled"))
            await asyncio.wait_for(reached.wait(), HANG_GUARD)
            task.cancel()
            for _ in range(20):  # the cancellation waits for the statement
                await asyncio.sleep(0)
            assert not task.done()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            await manager.append_message(KEY, "user", "after")
        assert taken == ["direct" if fast else "connection"] * 2
        assert not dbapi.reconnected  # the connection came back clean and was kept
        contents = [e.content for e in await manager.get_transcript(KEY)]
        assert contents == ["before", "cancelled", "after"]  # the statement had started


@pytest.mark.postgres_only
async def test_a_cancelled_append_on_postgres_returns_no_busy_connection(
    database: str,
    storage: SessionStorage,
    manager: SessionManager,
    fast: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled while its statement waits on a row lock another connection holds: the
    append runs to its end once the lock is gone, then the cancellation propagates; no
    connection is handed out again mid-statement, and every pooled one stays usable."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    async with storage.engine.connect() as holder:
        lock = await holder.begin()
        await holder.execute(
            text("SELECT 1 FROM sessions WHERE session_key = :k FOR UPDATE"), {"k": KEY}
        )
        invalidated: list[Any] = []
        with (
            paths(monkeypatch) as taken,
            listening(storage, "invalidate", lambda *args: invalidated.append(args)),
        ):
            task = asyncio.create_task(manager.append_message(KEY, "user", "cancelled"))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HANG_GUARD
            async with storage.engine.connect() as observer:
                # Autocommit: each look at pg_stat_activity is a new snapshot of it.
                await observer.execution_options(isolation_level="AUTOCOMMIT")
                while not (
                    await observer.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND query LIKE '%transcript_entries%'"
                        )
                    )
                ).scalar_one():
                    assert not task.done(), task
                    assert loop.time() < deadline, "the append never waited on the lock"
                    await asyncio.sleep(0.005)
            task.cancel()
            for _ in range(20):  # the cancellation waits for the statement
                await asyncio.sleep(0)
            assert not task.done()
            await lock.rollback()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert invalidated == []  # it finished: nothing interrupted, nothing to discard
        for n in range(3):  # every pooled connection is usable
            await manager.append_message(KEY, "user", f"after {n}")
    assert taken[0] == ("direct" if fast else "connection")
    contents = [e.content for e in await manager.get_transcript(KEY)]
    assert contents == ["before", "cancelled", "after 0", "after 1", "after 2"]


@pytest.mark.parametrize("error", [TimeoutError, asyncio.CancelledError])
async def test_a_timeout_in_the_statement_invalidates_the_connection_on_both_paths(
    storage: SessionStorage,
    manager: SessionManager,
    fast: bool,
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException],
) -> None:
    """The driver raising ``TimeoutError`` (asyncpg's ``command_timeout``) or a
    cancellation inside the statement: SQLAlchemy's rule (``util.is_exit_exception``) is
    that the connection's state is unknown, so it is invalidated, never handed out again;
    the pool's other connections are kept. Both paths alike."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    dialect: Any = storage.engine.sync_engine.dialect
    original = dialect.do_execute
    fail = True

    def timing_out(cursor: Any, statement: str, parameters: Any, context: Any = None) -> Any:
        nonlocal fail
        if fail and "transcript_" in statement and "INSERT" in statement:
            fail = False
            raise error("the test's driver timed out")
        return original(cursor, statement, parameters, context)

    monkeypatch.setattr(dialect, "do_execute", timing_out)
    invalidated: list[Any] = []
    with (
        paths(monkeypatch) as taken,
        listening(storage, "invalidate", lambda *args: invalidated.append(args)),
    ):
        with pytest.raises(error):
            await manager.append_message(KEY, "user", "timed out")
        assert len(invalidated) == 1
        await manager.append_message(KEY, "user", "after")
    assert taken == ["direct" if fast else "connection"] * 2
    assert [e.content for e in await manager.get_transcript(KEY)] == ["before", "after"]


@pytest.mark.postgres_only
async def test_a_command_timeout_invalidates_the_connection_on_both_paths(
    database: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg's ``command_timeout`` passing while the append waits on a row lock another
    connection holds: the connection is invalidated once on either path."""
    async with SessionStorage(database, connect_args={"command_timeout": 0.3}) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await manager.append_message(KEY, "user", "before")
        async with storage.engine.connect() as holder:
            lock = await holder.begin()
            await holder.execute(
                text("SELECT 1 FROM sessions WHERE session_key = :k FOR UPDATE"), {"k": KEY}
            )
            invalidated: list[Any] = []
            with (
                paths(monkeypatch) as taken,
                listening(storage, "invalidate", lambda *args: invalidated.append(args)),
            ):
                with pytest.raises(TimeoutError):
                    await manager.append_message(KEY, "user", "timed out")
                assert len(invalidated) == 1
                await lock.rollback()
                await manager.append_message(KEY, "user", "after")
        assert taken == ["direct" if fast else "connection"] * 2
        contents = [e.content for e in await manager.get_transcript(KEY)]
        assert contents == ["before", "after"]


@pytest.mark.postgres_only
async def test_an_interrupted_connection_is_not_reset_before_it_is_invalidated(
    storage: SessionStorage, manager: SessionManager, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The autocommit view's isolation level is reset after the statement only on a
    connection that is kept: one a timeout interrupted is invalidated, untouched."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    dialect: Any = storage.engine.sync_engine.dialect
    original, reset = dialect.do_execute, dialect.reset_isolation_level
    resets: list[Any] = []

    def timing_out(cursor: Any, statement: str, parameters: Any, context: Any = None) -> Any:
        if "transcript_" in statement and "INSERT" in statement:
            raise TimeoutError("the test's driver timed out")
        return original(cursor, statement, parameters, context)

    def resetting(dbapi_connection: Any) -> None:
        resets.append(dbapi_connection)
        reset(dbapi_connection)

    monkeypatch.setattr(dialect, "do_execute", timing_out)
    monkeypatch.setattr(dialect, "reset_isolation_level", resetting)
    with paths(monkeypatch) as taken, pytest.raises(TimeoutError):
        await manager.append_message(KEY, "user", "timed out")
    assert taken == ["direct" if fast else "connection"]
    assert resets == []


async def test_a_driver_error_opening_the_cursor_is_translated_on_both_paths(
    storage: SessionStorage, manager: SessionManager, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver refusing to open a cursor is wrapped and translated
    (``DatabaseError``) on either path, the driver's error the cause."""
    from sqlalchemy.pool.base import _ConnectionFairy

    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    dbapi: Any = storage.engine.sync_engine.dialect.loaded_dbapi
    original = _ConnectionFairy.cursor
    fail = True

    def refusing(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal fail
        if fail:
            fail = False
            raise dbapi.OperationalError("the test's driver refuses a cursor")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_ConnectionFairy, "cursor", refusing)
    with paths(monkeypatch) as taken:
        with pytest.raises(DatabaseError, match="the test's driver refuses a cursor"):
            await manager.append_message(KEY, "user", "refused")
        await manager.append_message(KEY, "user", "after")
    assert taken == ["direct" if fast else "connection"] * 2
    assert [e.content for e in await manager.get_transcript(KEY)] == ["before", "after"]
