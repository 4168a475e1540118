"""SQLite: a batch of one chunk as one write transaction of one hop on a pool connection
(``uow.append_view_batch``, ``direct_units.rows_in_one_hop``) while nothing listens
for statements, and through a ``Connection`` (the same statement, its COMMIT in the same
hop) once a listener is attached, even after the store connected. Both give the same rows;
a driver error leaves nothing and the connection usable (a cancellation:
tests/storage/test_batch_commit_hop.py; a refused fence and an overflow:
tests/manager/test_batches_and_pops.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import sqlite_driver, uow_writes
from opensquilla.session.errors import DatabaseError
from tests.helpers import table_snapshot
from tests.storage.direct_paths import listening

KEY = "agent:main:one-hop"
BATCH: list[Any] = [{"role": "user", "content": f"m{n}", "token_count": 2} for n in range(4)]

pytestmark = pytest.mark.sqlite_only


def _one_hops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each batch run in one hop on a pool connection: the rows it returned."""
    taken: list[int] = []
    original = uow_writes.rows_in_one_hop

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = original(*args, **kwargs)
        taken.append(len(rows))
        return rows

    monkeypatch.setattr(uow_writes, "rows_in_one_hop", counted)
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
