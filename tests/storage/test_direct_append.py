"""The append's two paths (``db/direct_statement.py``): while nothing listens for
statements on the engine it runs on the pool's DBAPI connection; with a listener on a
statement event (attached before or after ``connect()``) it runs through SQLAlchemy's
``Connection``, so instrumentation and fault injection see it. Both end alike: the same
rows, the same errors, a connection never returned to the pool broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import create_async_engine

from opensquilla.session import SessionManager, SessionStorage, StaleEpochError
from opensquilla.session.db import uow as uow_module
from opensquilla.session.errors import (
    DatabaseError,
    DatabaseUnavailableError,
    InvalidInputError,
)
from opensquilla.session.models import INT64_MAX, TranscriptEntry
from tests.helpers import table_snapshot

KEY = "agent:main:direct"
HANG_GUARD = 60.0
STATEMENT_EVENTS = ["before_cursor_execute", "after_cursor_execute", "handle_error"]


@contextlib.contextmanager
def _paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The path each append took: "direct" or "connection"."""
    taken: list[str] = []
    direct, connection = uow_module.first_value, uow_module._run_on_connection

    def on_dbapi(*args: Any, **kwargs: Any) -> Any:
        taken.append("direct")
        return direct(*args, **kwargs)

    def on_connection(*args: Any, **kwargs: Any) -> Any:
        taken.append("connection")
        return connection(*args, **kwargs)

    monkeypatch.setattr(uow_module, "first_value", on_dbapi)
    monkeypatch.setattr(uow_module, "_run_on_connection", on_connection)
    yield taken


@contextlib.contextmanager
def _listening(storage: SessionStorage, name: str, fn: Any) -> Iterator[None]:
    event.listen(storage.engine.sync_engine, name, fn)
    try:
        yield
    finally:
        event.remove(storage.engine.sync_engine, name, fn)


def _entry(node: Any, content: str, *, session_id: str | None = None) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=session_id or node.session_id,
        session_key=KEY,
        role="user",
        content=content,
        created_at=node.created_at + 1,
    )


@pytest.fixture(params=[True, False], ids=["direct", "connection"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both paths: the direct one as it is, the Connection one forced."""
    monkeypatch.setattr(uow_module, "FAST_APPEND", request.param)
    return bool(request.param)


async def test_without_listeners_the_append_runs_on_the_dbapi_connection(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await manager.create(KEY)
    with _paths(monkeypatch) as taken:
        first = await manager.append_message(KEY, "user", "one", token_count=3)
        second = await manager.append_message(KEY, "assistant", "two")
    assert taken == ["direct", "direct"]
    assert first.id is not None and second.id is not None and second.id > first.id
    stored = await manager.get_transcript(KEY)
    assert [(e.id, e.role, e.content, e.token_count) for e in stored] == [
        (first.id, "user", "one", 3),
        (second.id, "assistant", "two", None),
    ]
    row = await storage.get_session(KEY)
    assert row is not None and row.total_tokens == 3 and not row.total_tokens_fresh
    assert row.updated_at >= node.updated_at


@pytest.mark.parametrize("name", STATEMENT_EVENTS)
async def test_a_listener_attached_after_connect_sends_the_append_through_the_connection(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # connected, statement compiled
    seen: list[Any] = []
    with _paths(monkeypatch) as taken:
        with _listening(storage, name, lambda *args: seen.append(args)):
            await manager.append_message(KEY, "user", "watched")
        await manager.append_message(KEY, "user", "unwatched again")
    assert taken == ["connection", "direct"]
    if name != "handle_error":
        assert len(seen) == 1  # the one statement, seen by the listener
    assert [e.content for e in await manager.get_transcript(KEY)] == [
        "warm",
        "watched",
        "unwatched again",
    ]


@pytest.mark.parametrize("name", STATEMENT_EVENTS)
async def test_a_listener_on_an_application_engine_before_connect_is_honoured(
    database: str, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    engine = create_async_engine(_async_url(database))
    event.listen(engine.sync_engine, name, lambda *args: None)
    try:
        async with SessionStorage(engine) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            await manager.create(KEY)
            with _paths(monkeypatch) as taken:
                await manager.append_message(KEY, "user", "watched")
        assert taken == ["connection"]
    finally:
        await engine.dispose()


def _async_url(database: str) -> str:
    if database.startswith("postgresql://"):
        return database.replace("postgresql://", "postgresql+asyncpg://", 1)
    if "://" in database:
        return database
    return f"sqlite+aiosqlite:///{database}"


async def test_statement_logging_sends_the_append_through_the_connection(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``echo=True``: the Connection path, which logs the statement."""
    async with SessionStorage(database, echo=True) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        with _paths(monkeypatch) as taken:
            await manager.append_message(KEY, "user", "logged")
    assert taken == ["connection"]


async def test_a_failing_statement_reaches_handle_error_and_fails_alike(
    backend: Any, storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database refusing the row (a test trigger): ``handle_error`` listeners see it
    (the Connection path), and the error is the same ``DatabaseError`` on both paths."""
    node = await manager.create(KEY)
    async with storage.engine.begin() as conn:
        for statement in _refusing_trigger(storage.engine.dialect.name):
            await conn.execute(text(statement))
    errors: list[Any] = []
    raised: dict[str, BaseException] = {}
    with _paths(monkeypatch) as taken:
        for path in ("direct", "connection"):
            listener = contextlib.nullcontext()
            if path == "connection":
                listener = _listening(storage, "handle_error", errors.append)  # type: ignore[assignment]
            before = await table_snapshot(storage)
            with listener, pytest.raises(DatabaseError) as caught:
                await storage.append_message_entry(
                    _entry(node, "refused"), expected_epoch=0, now=node.updated_at + 1
                )
            assert await table_snapshot(storage) == before
            raised[path] = caught.value
    assert taken == ["direct", "connection"]
    assert len(errors) == 1
    assert type(raised["direct"]) is type(raised["connection"])
    assert str(raised["direct"]) == str(raised["connection"])
    assert "refused by the test" in str(raised["direct"])


def _refusing_trigger(dialect: str) -> list[str]:
    if dialect == "sqlite":
        return [
            "CREATE TRIGGER test_refuse BEFORE INSERT ON transcript_entries "
            "WHEN NEW.content = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ]
    return [
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.content = 'refused' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
        "RETURN NEW; END $$",
        "CREATE TRIGGER test_refuse BEFORE INSERT ON transcript_entries "
        "FOR EACH ROW EXECUTE FUNCTION test_refuse()",
    ]


async def _outcome(call: Any) -> tuple[type[BaseException], str] | None:
    try:
        await call
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("case", ["stale epoch", "other generation", "missing session"])
async def test_refusals_are_the_same_on_both_paths(
    storage: SessionStorage, manager: SessionManager, case: str
) -> None:
    outcomes = []
    for fast in (True, False):
        key = f"{KEY}:{'direct' if fast else 'connection'}"
        node = await manager.create(key)
        epoch, session_id = node.epoch, node.session_id
        if case == "stale epoch":
            epoch += 1
        elif case == "other generation":
            session_id = (await manager.create(f"{key}:other")).session_id
        else:
            assert await manager.delete(key)
        entry = _entry(node, "refused", session_id=session_id)
        entry.session_key = key
        before = await table_snapshot(storage)
        uow_module.FAST_APPEND = fast
        try:
            outcome = await _outcome(
                storage.append_message_entry(
                    entry, expected_epoch=epoch, now=node.updated_at + 1, token_delta=2
                )
            )
        finally:
            uow_module.FAST_APPEND = True
        assert await table_snapshot(storage) == before
        assert outcome is not None
        message = outcome[1].replace(key, "KEY").replace(session_id, "SID")
        outcomes.append((outcome[0], message.replace(node.session_id, "NODE")))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is StaleEpochError
    assert (
        outcomes[0][1]
        == {
            "stale epoch": "Epoch mismatch for KEY: expected 1, got 0",
            "other generation": "Generation mismatch for KEY: expected SID, got NODE",
            "missing session": "Epoch mismatch for KEY: expected 0, got None",
        }[case]
    )


async def test_an_overflowing_delta_is_refused_alike_on_both_paths(
    storage: SessionStorage, manager: SessionManager, fast: bool
) -> None:
    node = await manager.create(KEY)
    await storage.append_message_entry(
        _entry(node, "big"), expected_epoch=0, now=node.updated_at, token_delta=INT64_MAX - 5
    )
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match=r"would take total_tokens of .* past"):
        await storage.append_message_entry(
            _entry(node, "too big"), expected_epoch=0, now=node.updated_at + 1, token_delta=6
        )
    assert await table_snapshot(storage) == before


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
    with _paths(monkeypatch) as taken, _listening(storage, "do_connect", refuse):
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
        _paths(monkeypatch) as taken,
        _listening(storage, "invalidate", lambda *args: invalidated.append(args)),
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
        with _paths(monkeypatch) as taken:
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
            _paths(monkeypatch) as taken,
            _listening(storage, "invalidate", lambda *args: invalidated.append(args)),
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
