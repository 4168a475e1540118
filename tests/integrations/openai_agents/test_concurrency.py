"""Concurrent ``add_items`` (several tasks, forced to wait together; two processes, one
with its clock stepped back) and a cancellation inside the batch, on both backends: a batch
is never interleaved with another, never lost, never half written."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionStorage
from opensquilla.session.integrations.openai_agents import OpenSquillaSession
from opensquilla.session.models import messages
from opensquilla.session.support import clock
from tests.manager.primitives_support import BATCH_INSERT, WAIT_GUARD, holding, on_statement

from .sdk_writer import OFFSET_ENV, turn

REPO_ROOT = Path(__file__).resolve().parents[3]
TASKS = 4


def _turns_of(items: list[Any]) -> list[str]:
    """The turn names of ``items`` (``name-n`` of ``name-n-i``), checking each turn is
    whole and in order where it stands."""
    contents = [item["content"] for item in items]
    assert len(contents) % 4 == 0, contents
    names = []
    for start in range(0, len(contents), 4):
        name = contents[start].rsplit("-", 1)[0]
        assert contents[start : start + 4] == [f"{name}-{i}" for i in range(4)], contents
        names.append(name)
    return names


async def test_concurrent_add_items_from_several_tasks_never_interleave(database: str) -> None:
    """Four tasks, each with a session on a store of its own (four pools, as four workers),
    start an ``add_items`` while another connection holds the lock (PostgreSQL: the session
    row; SQLite: the write lock); all four are waiting when it is released. (Tasks sharing
    one store are serialised by its write slot before they reach the database.)"""
    storages = [SessionStorage(database) for _ in range(TASKS)]
    seen: list[str] = []

    def arrived(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if BATCH_INSERT in statement:
            seen.append(statement)

    try:
        sessions = [OpenSquillaSession("busy", s) for s in storages]
        await sessions[0].add_items(turn("first", 0))  # type: ignore[arg-type]
        for session in sessions:  # warm each one's generation cache: the add is one write
            await session.get_items(limit=1)
            await (await session.manager()).count_transcript_entries(session.session_key)
        for storage in storages:
            event.listen(storage.engine.sync_engine, "before_cursor_execute", arrived)
        async with holding(database, sessions[0].session_key) as held:
            tasks = [
                asyncio.ensure_future(s.add_items(turn(f"t{n}", 0)))  # type: ignore[arg-type]
                for n, s in enumerate(sessions)
            ]
            if held.target.startswith("postgresql"):
                await held.wait_for_waiters(TASKS)
            else:
                async with asyncio.timeout(WAIT_GUARD):
                    while len(seen) < TASKS:  # noqa: ASYNC110 (the statements are the event)
                        await asyncio.sleep(0.01)
            assert not any(t.done() for t in tasks)  # all of them are waiting together
            await held.release()
            await asyncio.gather(*tasks)
        names = _turns_of(await sessions[0].get_items())
    finally:
        for storage in storages:
            if storage.is_connected:
                event.remove(storage.engine.sync_engine, "before_cursor_execute", arrived)
            await storage.close()
    assert names[0] == "first-0"
    assert sorted(names[1:]) == [f"t{n}-0" for n in range(TASKS)]


async def test_two_processes_one_stepped_back_lose_nothing_and_keep_the_order(
    database: str,
) -> None:
    """This process adds a turn; then it and a writer process whose clock is 5 s behind
    add 3 turns each at once (the writer starts on this process's word, once connected).
    Every turn is whole, each process's turns in its order, and none sorts before the
    first turn (the store's order floor), so a pop takes the newest."""
    async with OpenSquillaSession("shared", database) as session:
        await session.add_items(turn("here", 0))  # type: ignore[arg-type]
        writer = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integrations.openai_agents.sdk_writer",
            database,
            "shared",
            "b",
            "3",
            cwd=REPO_ROOT,
            env={**os.environ, OFFSET_ENV: "-5000"},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert writer.stdin is not None and writer.stdout is not None
        async with asyncio.timeout(120):
            assert await writer.stdout.readline() == b"ready\n"
            writer.stdin.write(b"go\n")
            await writer.stdin.drain()
            for number in range(3):
                await session.add_items(turn("a", number))  # type: ignore[arg-type]
            _, err = await writer.communicate()
        assert writer.returncode == 0, err.decode()
        items = await session.get_items()
        names = _turns_of(items)
        assert names[0] == "here-0"
        assert [n for n in names if n.startswith("a-")] == ["a-0", "a-1", "a-2"]
        assert [n for n in names if n.startswith("b-")] == ["b-0", "b-1", "b-2"]
        assert len(names) == 7
        assert await session.pop_item() == items[-1]


@pytest.mark.sqlite_only
async def test_a_cancellation_inside_the_batch_leaves_nothing_sqlite(
    storage: SessionStorage,
) -> None:
    """SQLite: cancelled as the batch's statement is sent (its fenced touch inside): run
    inside the transaction, not committed, rolled back."""
    session = OpenSquillaSession("cancel", storage)
    await session.add_items(turn("kept", 0))  # type: ignore[arg-type]
    task: asyncio.Task[Any] | None = None

    def cancel() -> None:
        assert task is not None
        task.cancel()

    with on_statement(storage, BATCH_INSERT, cancel, when="before"):
        task = asyncio.ensure_future(session.add_items(turn("lost", 0)))  # type: ignore[arg-type]
        with pytest.raises(asyncio.CancelledError):
            await task
    assert _turns_of(await session.get_items()) == ["kept-0"]


@pytest.mark.postgres_only
async def test_a_cancellation_inside_the_batch_leaves_nothing_postgres(
    storage: SessionStorage, database: str
) -> None:
    """PostgreSQL: cancelled while its statement waits for the session row."""
    session = OpenSquillaSession("cancel", storage)
    await session.add_items(turn("kept", 0))  # type: ignore[arg-type]
    async with holding(database, session.session_key) as held:
        task = asyncio.ensure_future(session.add_items(turn("lost", 0)))  # type: ignore[arg-type]
        await held.wait_for_waiters(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert _turns_of(await session.get_items()) == ["kept-0"]


async def test_a_clock_step_back_keeps_the_order(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process's clock steps 5 s back between two turns: the later turn still reads
    last and is popped first."""
    session = OpenSquillaSession("clock", storage)
    await session.add_items(turn("before", 0))  # type: ignore[arg-type]
    real = clock.now_ms
    monkeypatch.setattr(messages, "now_ms", lambda: real() - 5_000)
    await session.add_items(turn("after", 0))  # type: ignore[arg-type]
    items = await session.get_items()
    assert _turns_of(items) == ["before-0", "after-0"]
    assert await session.pop_item() == items[-1]
