"""SQLite: a batch's last INSERT and its COMMIT run in one thread hop (``sqlite_driver``'s
``commit_with_next``), and a caller cancelled while that statement runs does not commit:
the thread checks just before its COMMIT, and the unit of work rolls the batch back. A
batch of one chunk is one statement (the INSERT into the append view, the fenced touch
inside it), so its BEGIN, that statement and its COMMIT make one hop; a longer batch's
chunks go first, and its last INSERT takes the COMMIT along."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import sqlite_driver
from opensquilla.session.db.repos import transcript_batches
from tests.helpers import table_snapshot

KEY = "agent:main:commit-hop"
BATCH: list[Any] = [{"role": "user", "content": f"m{n}", "token_count": 1} for n in range(3)]

pytestmark = pytest.mark.sqlite_only


def _hops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, bool]]:
    """Each statement's hop to the driver's thread: the statement's table, whether the hop
    began the transaction and whether it committed it."""
    hops: list[tuple[str, bool, bool]] = []
    run_one = sqlite_driver._run_one

    def watched(conn: Any, operation: str, parameters: Any, begin: Any, commit: Any) -> Any:
        words = operation.split()
        hops.append((" ".join(words[:3]), begin is not None, commit is not None))
        outcome = run_one(conn, operation, parameters, begin, commit)
        if commit is not None:
            assert not conn.in_transaction  # committed in this call
        return outcome

    monkeypatch.setattr(sqlite_driver, "_run_one", watched)
    return hops


async def test_a_batch_of_one_chunk_is_one_hop(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # the generation cached
    hops = _hops(monkeypatch)
    entries = await manager.append_messages(KEY, BATCH)
    assert hops == [("INSERT INTO transcript_appends", True, True)]
    stored = await manager.get_transcript(KEY)
    assert [e.content for e in stored] == ["warm", "m0", "m1", "m2"]
    assert [e.id for e in entries] == [e.id for e in stored[1:]]
    assert [e.created_at for e in entries] == [e.created_at for e in stored[1:]]
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 3


async def test_a_longer_batch_commits_with_its_last_insert(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript_batches, "CHUNK_ROWS", 2)
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")
    hops = _hops(monkeypatch)
    await manager.append_messages(KEY, BATCH)
    assert hops == [
        ("UPDATE sessions SET", True, False),
        ("INSERT INTO transcript_entries", False, False),
        ("INSERT INTO transcript_entries", False, True),
    ]
    assert [e.content for e in await manager.get_transcript(KEY)] == ["warm", "m0", "m1", "m2"]


@pytest.mark.parametrize("chunk_rows", [None, 2], ids=["one-chunk", "chunks"])
async def test_a_batch_cancelled_while_its_last_insert_runs_leaves_nothing(
    manager: SessionManager,
    storage: SessionStorage,
    monkeypatch: pytest.MonkeyPatch,
    chunk_rows: int | None,
) -> None:
    """One chunk: the batch's one hop on a pool connection (``uow.append_view_batch``), its
    COMMIT called off through its token and the statement rolled back, the connection kept
    (not invalidated). Chunks: the write transaction's last INSERT, through a
    ``Connection``, the unit of work rolling back."""
    if chunk_rows is not None:
        monkeypatch.setattr(transcript_batches, "CHUNK_ROWS", chunk_rows)
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    invalidated: list[Any] = []
    event.listen(storage.engine.sync_engine.pool, "invalidate", lambda *a: invalidated.append(a))
    before = await table_snapshot(storage)
    loop = asyncio.get_running_loop()
    task: asyncio.Task[Any] | None = None
    run_one = sqlite_driver._run_one

    def cancelled_meanwhile(
        conn: Any, operation: str, parameters: Any, begin: Any, commit: Any
    ) -> Any:
        if commit is not None:
            # On the driver's thread, with the INSERT's hop under way: the caller is
            # cancelled, and the loop marks the hop's COMMIT off before this goes on.
            assert task is not None
            loop.call_soon_threadsafe(task.cancel)
            deadline = time.monotonic() + 30
            while commit[0] and time.monotonic() < deadline:
                time.sleep(0.001)
            assert not commit[0]
            assert threading.current_thread() is not threading.main_thread()
        return run_one(conn, operation, parameters, begin, commit)

    monkeypatch.setattr(sqlite_driver, "_run_one", cancelled_meanwhile)
    task = asyncio.ensure_future(manager.append_messages(KEY, BATCH))
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(sqlite_driver, "_run_one", run_one)
    assert await table_snapshot(storage) == before
    await manager.append_messages(KEY, BATCH)  # the connection is fine afterwards
    assert [e.content for e in await manager.get_transcript(KEY)] == ["kept", "m0", "m1", "m2"]
    if chunk_rows is None:
        assert invalidated == []
