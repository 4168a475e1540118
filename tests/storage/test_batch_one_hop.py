"""SQLite: a batch of one chunk as one write transaction of one hop on a pool connection
(``uow.append_view_batch``, ``direct_statement.rows_in_one_hop``) while nothing listens
for statements, and through a ``Connection`` (the same statement, its COMMIT in the same
hop) once a listener is attached, even after the store connected. Both give the same rows;
a driver error, a refused fence and a cancellation leave nothing, and the connection goes
back to the pool usable (or, after a cancellation met the statement, rolled back)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import sqlite_driver
from opensquilla.session.db import uow as uow_module
from opensquilla.session.errors import DatabaseError
from tests.helpers import table_snapshot
from tests.storage.direct_paths import listening

KEY = "agent:main:one-hop"
BATCH: list[Any] = [{"role": "user", "content": f"m{n}", "token_count": 2} for n in range(4)]

pytestmark = pytest.mark.sqlite_only


def _one_hops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each batch run in one hop on a pool connection: the rows it returned."""
    taken: list[int] = []
    original = uow_module.rows_in_one_hop

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = original(*args, **kwargs)
        taken.append(len(rows))
        return rows

    monkeypatch.setattr(uow_module, "rows_in_one_hop", counted)
    return taken


async def _written(manager: SessionManager) -> list[tuple[Any, ...]]:
    return [(e.content, e.token_count) for e in await manager.get_transcript(KEY)]


async def test_both_paths_write_the_same_batch(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")
    taken = _one_hops(monkeypatch)
    direct = await manager.append_messages(KEY, BATCH)
    seen: list[str] = []
    with listening(storage, "before_cursor_execute", lambda *a: seen.append(a[2])):
        watched = await manager.append_messages(KEY, BATCH)
    assert taken == [4]  # the second batch, watched, took the Connection path
    assert any(s.startswith("INSERT INTO transcript_appends") for s in seen)
    stored = await manager.get_transcript(KEY)
    assert [e.id for e in stored[1:]] == [e.id for e in direct + watched]
    assert [e.created_at for e in stored[1:]] == [e.created_at for e in direct + watched]
    assert len({e.created_at for e in direct}) == 1
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 16


async def test_a_driver_error_leaves_nothing_and_the_connection_usable(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    taken = _one_hops(monkeypatch)
    before = await table_snapshot(storage)
    run_one = sqlite_driver._run_one

    def failing(conn: Any, operation: str, parameters: Any, begin: Any, commit: Any) -> Any:
        if operation.startswith("INSERT INTO transcript_appends"):
            conn.execute(begin)  # the transaction began, as the hop begins it
            raise sqlite3.OperationalError("injected: disk I/O error")
        return run_one(conn, operation, parameters, begin, commit)

    monkeypatch.setattr(sqlite_driver, "_run_one", failing)
    with pytest.raises(DatabaseError, match="injected"):
        await manager.append_messages(KEY, BATCH)
    monkeypatch.setattr(sqlite_driver, "_run_one", run_one)
    assert await table_snapshot(storage) == before
    await manager.append_messages(KEY, BATCH)
    assert taken == [4]  # the failed one raised before it returned
    assert [c for c, _ in await _written(manager)] == ["kept", "m0", "m1", "m2", "m3"]


async def test_a_cancellation_before_the_commit_leaves_nothing_on_a_usable_connection(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is cancelled while the hop runs on the driver's thread, before its
    COMMIT: the COMMIT is called off, the statement rolled back, and the connection
    goes back to the pool valid (no invalidation: the next batch reuses it)."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    taken = _one_hops(monkeypatch)
    before = await table_snapshot(storage)
    loop = asyncio.get_running_loop()
    task: asyncio.Task[Any] | None = None
    run_one = sqlite_driver._run_one
    invalidated: list[Any] = []

    def cancelled_meanwhile(
        conn: Any, operation: str, parameters: Any, begin: Any, commit: Any
    ) -> Any:
        if commit is not None:
            assert task is not None
            loop.call_soon_threadsafe(task.cancel)
            deadline = time.monotonic() + 30
            while commit[0] and time.monotonic() < deadline:
                time.sleep(0.001)
            assert not commit[0]  # called off before the thread's COMMIT
            assert threading.current_thread() is not threading.main_thread()
        return run_one(conn, operation, parameters, begin, commit)

    monkeypatch.setattr(sqlite_driver, "_run_one", cancelled_meanwhile)
    pool = storage.engine.sync_engine.pool
    event.listen(pool, "invalidate", lambda *a: invalidated.append(a))
    task = asyncio.ensure_future(manager.append_messages(KEY, BATCH))
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(sqlite_driver, "_run_one", run_one)
    assert await table_snapshot(storage) == before
    await manager.append_messages(KEY, BATCH)
    assert invalidated == []
    assert taken == [4, 4]  # both ran in one hop; the first one's rows were not committed
    assert [c for c, _ in await _written(manager)] == ["kept", "m0", "m1", "m2", "m3"]
