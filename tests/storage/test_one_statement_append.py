"""The fenced append as one statement (docs/semantics.md#fencing, revision 0008).

On both backends an append is one statement run in autocommit: the fence (key, epoch,
session id), the session touch (``updated_at``; ``total_tokens + delta`` under the 64-bit
ceiling, ``total_tokens_fresh`` false) and the insert, all or nothing. On SQLite that
statement is the insert into the ``transcript_appends`` view, one call on the driver's
thread; an SQLite without RETURNING takes the three-statement path in a write transaction,
forced here by ``one_statement=False``. The semantics are pinned on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import linecache
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiosqlite
import pytest
from sqlalchemy import event, text

from opensquilla.session import SessionManager, SessionStorage, StaleEpochError
from opensquilla.session.db.repos import fenced_append
from opensquilla.session.errors import DatabaseUnavailableError, InvalidInputError
from opensquilla.session.models import INT64_MAX, TranscriptEntry
from tests.helpers import table_snapshot

KEY = "agent:main:onehop"
HANG_GUARD = 60.0


@pytest.fixture(
    params=[
        pytest.param(True, id="one-statement"),
        pytest.param(False, id="three-statements", marks=pytest.mark.sqlite_only),
    ]
)
def one_statement(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both SQLite paths; Postgres has the one statement only (its CTE needs no fallback)."""
    if not request.param:
        monkeypatch.setattr(fenced_append, "SQLITE_ONE_STATEMENT", False)
    return bool(request.param)


def _entry(node: Any, content: str, *, session_id: str | None = None) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=session_id or node.session_id,
        session_key=KEY,
        role="user",
        content=content,
        created_at=node.created_at + 1,
    )


@contextlib.contextmanager
def _statements(storage: SessionStorage) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(storage.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(storage.engine.sync_engine, "before_cursor_execute", record)


async def test_an_append_is_one_statement_and_sqlite_runs_it_in_one_thread_hop(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # SQLite looks the view up once
    calls: list[tuple[str, Any]] = []
    original = aiosqlite.Connection._execute

    async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((getattr(fn, "__name__", repr(fn)), args))
        return await original(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    with _statements(storage) as seen:
        entry = await manager.append_message(KEY, "user", "one hop", token_count=7)
    assert len(seen) == 1
    if storage.engine.dialect.name == "postgresql":
        assert seen[0].startswith("WITH fence AS (UPDATE sessions")
        return
    assert seen[0].startswith("INSERT INTO transcript_appends")
    # One call on the aiosqlite thread: no BEGIN sent with it, no COMMIT or ROLLBACK after.
    assert [name for name, _ in calls] == ["_run_one"]
    (_conn, operation, _params, begin, commit) = calls[0][1]
    assert operation.startswith("INSERT INTO transcript_appends") and begin is None
    assert commit is None  # autocommit: no COMMIT folded into the hop either
    [_, stored] = await manager.get_transcript(KEY)
    assert stored.id == entry.id and stored.content == "one hop"


@pytest.mark.sqlite_only
async def test_the_forced_fallback_appends_in_a_write_transaction(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fenced_append, "SQLITE_ONE_STATEMENT", False)
    await manager.create(KEY)
    with _statements(storage) as seen:
        entry = await manager.append_message(KEY, "user", "three", token_count=2)
    # The fence, the order floor (issue 28: a defaulted created_at, read under the write
    # lock), the insert.
    assert [s.split()[0] + " " + s.split()[1] for s in seen] == [
        "UPDATE sessions",
        "SELECT (SELECT",
        "INSERT INTO",
    ]
    assert "ORDER BY transcript_entries.created_at DESC LIMIT 1" in seen[1]
    assert "transcript_entries" in seen[2]
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 2
    assert [e.id for e in await manager.get_transcript(KEY)] == [entry.id]


@pytest.mark.parametrize("stale", ["epoch", "session_id", "deleted", "recreated"])
async def test_a_refused_fence_writes_nothing(
    storage: SessionStorage, manager: SessionManager, one_statement: bool, stale: str
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "before", token_count=3)
    epoch, session_id = node.epoch, node.session_id
    if stale == "epoch":
        epoch += 1
    elif stale == "session_id":
        session_id = (await manager.create("agent:main:other")).session_id
    else:
        assert await manager.delete(KEY)
        if stale == "recreated":  # same key, a new generation at epoch 0 again
            assert (await manager.create(KEY)).epoch == epoch == 0
    before = await table_snapshot(storage)
    with pytest.raises(StaleEpochError):
        await storage.append_message_entry(
            _entry(node, "refused", session_id=session_id),
            expected_epoch=epoch,
            now=node.updated_at + 10_000,
            token_delta=5,
        )
    assert await table_snapshot(storage) == before


async def test_the_touch_counts_tokens_and_marks_them_stale(
    storage: SessionStorage, manager: SessionManager, one_statement: bool
) -> None:
    node = await manager.create(KEY)
    async with storage.engine.begin() as conn:
        await conn.execute(
            text("UPDATE sessions SET total_tokens = 10, total_tokens_fresh = :t"), {"t": True}
        )
    now = node.updated_at + 5_000
    quiet = await storage.append_message_entry(_entry(node, "no tokens"), expected_epoch=0, now=now)
    row = await storage.get_session(KEY)
    assert row is not None
    assert (row.updated_at, row.total_tokens, row.total_tokens_fresh) == (now, 10, True)

    counted = await storage.append_message_entry(
        _entry(node, "tokens"), expected_epoch=0, now=now + 1, token_delta=32
    )
    row = await storage.get_session(KEY)
    assert row is not None
    assert (row.updated_at, row.total_tokens, row.total_tokens_fresh) == (now + 1, 42, False)
    assert quiet.id is not None and counted.id is not None and counted.id > quiet.id
    assert [e.id for e in await manager.get_transcript(KEY)] == [quiet.id, counted.id]


async def test_an_overflowing_delta_is_refused_and_writes_nothing(
    storage: SessionStorage, manager: SessionManager, one_statement: bool
) -> None:
    node = await manager.create(KEY)
    await storage.append_message_entry(
        _entry(node, "big"), expected_epoch=0, now=node.updated_at, token_delta=INT64_MAX - 5
    )
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match="past"):
        await storage.append_message_entry(
            _entry(node, "too big"), expected_epoch=0, now=node.updated_at + 1, token_delta=6
        )
    assert await table_snapshot(storage) == before
    last = await storage.append_message_entry(
        _entry(node, "fits"), expected_epoch=0, now=node.updated_at + 2, token_delta=5
    )
    row = await storage.get_session(KEY)
    assert row is not None and row.total_tokens == INT64_MAX
    assert (await manager.get_transcript(KEY))[-1].id == last.id


@pytest.mark.sqlite_only
async def test_a_failure_inside_the_statement_undoes_the_touch(
    storage: SessionStorage, manager: SessionManager
) -> None:
    """SQLite: the trigger's UPDATE has run when its INSERT fails; the statement is undone
    as a whole (the older store's tables refuse the row here through a test trigger)."""
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept", token_count=1)
    async with storage.engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TRIGGER test_refuse BEFORE INSERT ON transcript_entries "
                "WHEN NEW.content = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        )
    before = await table_snapshot(storage)
    with pytest.raises(Exception, match="refused"):
        await storage.append_message_entry(
            _entry(node, "refused"), expected_epoch=0, now=node.updated_at + 9, token_delta=4
        )
    assert await table_snapshot(storage) == before


async def test_ids_returned_under_concurrent_appends_from_two_engines_are_the_rows(
    database: str, one_statement: bool
) -> None:
    """Two engines on one database, appending at once: every returned id is its own row's,
    nothing lost or doubled, the counter exact."""
    per_writer = 40
    async with SessionStorage(database) as first, SessionStorage(database) as second:
        managers = [SessionManager(s, inject_time_prefix=False) for s in (first, second)]
        await managers[0].create(KEY)
        go = asyncio.Event()

        async def write(index: int) -> dict[str, int | None]:
            await go.wait()
            done: dict[str, int | None] = {}
            for n in range(per_writer):
                content = f"w{index}-{n:02d}"
                entry = await managers[index].append_message(
                    KEY, "user", content, token_count=index + 1
                )
                done[content] = entry.id
            return done

        tasks = [asyncio.create_task(write(i)) for i in range(2)]
        go.set()
        returned = {c: i for done in await asyncio.gather(*tasks) for c, i in done.items()}
        rows = await managers[0].get_transcript(KEY)
        assert {e.content: e.id for e in rows} == returned
        assert len(rows) == 2 * per_writer
        node = await first.get_session(KEY)
        assert node is not None and node.total_tokens == per_writer * (1 + 2)


@contextlib.asynccontextmanager
async def _holding_the_write_lock(path: str) -> AsyncIterator[sqlite3.Connection]:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def _driver_thread_inside_the_statement() -> bool:
    """Whether some thread is inside the lean adapter's call, executing the statement."""
    for frame in sys._current_frames().values():
        walked: Any = frame
        while walked is not None:
            if walked.f_code.co_name == "_run_one" and "cursor.execute" in _line(walked):
                return True
            walked = walked.f_back
    return False


def _line(frame: Any) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


@pytest.mark.sqlite_only
async def test_an_autocommit_append_waits_for_another_writer_and_loses_nothing(
    database: str, storage: SessionStorage, manager: SessionManager
) -> None:
    """SQLite: while another connection holds the write lock (and has changed the session
    row), the append waits inside its statement (the busy timeout), then runs on the
    committed row: no "database is locked", no lost update."""
    node = await manager.create(KEY)
    async with _holding_the_write_lock(database) as other:
        other.execute(
            "UPDATE sessions SET total_tokens = total_tokens + 100 WHERE session_key = ?", (KEY,)
        )
        append = asyncio.create_task(
            storage.append_message_entry(
                _entry(node, "waited"), expected_epoch=0, now=node.updated_at + 1, token_delta=5
            )
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANG_GUARD
        while not _driver_thread_inside_the_statement():  # observed, not hoped on
            assert not append.done(), append
            assert loop.time() < deadline, "the append never reached its statement"
            await asyncio.sleep(0.001)
        assert not append.done()  # blocked on the lock, inside the statement
        other.execute("COMMIT")
        entry = await asyncio.wait_for(append, HANG_GUARD)
    row = await storage.get_session(KEY)
    assert row is not None and row.total_tokens == 105
    assert [e.id for e in await manager.get_transcript(KEY)] == [entry.id]


async def test_a_refused_connection_is_database_unavailable_and_writes_nothing(
    storage: SessionStorage, one_statement: bool
) -> None:
    """When the pool cannot open a connection (the server gone, the file unreachable: an
    ``OSError`` from the driver), the append raises ``DatabaseUnavailableError`` naming it,
    on either path, and the next append after the database is back succeeds."""
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before")
    before = await table_snapshot(storage)
    refusing = True

    def refuse(*args: Any) -> None:
        if refusing:
            raise ConnectionRefusedError("the test refuses every new connection")

    event.listen(storage.engine.sync_engine, "do_connect", refuse)
    try:
        await storage.engine.dispose()  # the next checkout must open a new connection
        with pytest.raises(DatabaseUnavailableError, match="cannot connect to the database"):
            await manager.append_message(KEY, "user", "refused")
        refusing = False
        assert await table_snapshot(storage) == before
        await manager.append_message(KEY, "user", "after")
    finally:
        event.remove(storage.engine.sync_engine, "do_connect", refuse)
    contents = [entry.content for entry in await manager.get_transcript(KEY)]
    assert contents == ["before", "after"]
