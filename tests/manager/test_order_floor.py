"""Issue 28, item 3: an order no clock can reverse. A defaulted ``created_at`` (the caller
gave none) is never earlier than the newest live entry of its generation, enforced inside
the append's statement (SQLite: the view's ``order_floor``; PostgreSQL: ``GREATEST`` in
the CTE, rerun when the session row changed while it waited); an explicit one is kept.
Both backends; a writer in another process with its clock stepped back."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos import fenced_append
from opensquilla.session.models import TranscriptEntry, messages
from opensquilla.session.support import clock

from .primitives_support import arrivals, holding

KEY = "agent:main:clock"
STEP_MS = 5_000
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stepped_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's clock, as the append reads it, 5 s behind."""
    real = clock.now_ms
    monkeypatch.setattr(messages, "now_ms", lambda: real() - STEP_MS)
    yield


@pytest.fixture(params=[True, False], ids=["one_statement", "fallback"])
def path(request: pytest.FixtureRequest, backend: object, monkeypatch: pytest.MonkeyPatch) -> bool:
    if not request.param:
        if getattr(backend, "is_postgres", False):
            pytest.skip("PostgreSQL has one path")
        monkeypatch.setattr(fenced_append, "SQLITE_ONE_STATEMENT", False)
    return bool(request.param)


async def _contents(manager: SessionManager) -> list[str | None]:
    return [e.content for e in await manager.get_transcript(KEY)]


async def test_an_append_after_a_clock_step_back_sorts_last_and_is_popped(
    manager: SessionManager, storage: SessionStorage, path: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    first = await manager.append_message(KEY, "user", "before the step")
    real = clock.now_ms
    monkeypatch.setattr(messages, "now_ms", lambda: real() - STEP_MS)
    stepped = await manager.append_message(KEY, "user", "after the step")
    assert stepped.created_at >= first.created_at  # the entry returned carries it as stored
    assert await _contents(manager) == ["before the step", "after the step"]
    [batched, also] = await manager.append_messages(
        KEY, [{"role": "user", "content": "batch 1"}, {"role": "assistant", "content": "batch 2"}]
    )
    assert batched.created_at == also.created_at >= stepped.created_at
    prepared, epoch = await manager.prepare_message(KEY, "user", "prepared")
    await storage.append_transcript_entry(prepared, expected_epoch=epoch)
    assert prepared.created_at >= also.created_at
    node = await manager.get_session(KEY)
    assert node is not None
    own = TranscriptEntry(session_id=node.session_id, session_key=KEY, role="user", content="own")
    own.__dict__["created_at"] -= STEP_MS  # still defaulted: the caller gave none
    await storage.append_message_entry(own, expected_epoch=node.epoch, now=1)
    assert await _contents(manager) == [
        "before the step",
        "after the step",
        "batch 1",
        "batch 2",
        "prepared",
        "own",
    ]
    stored = await manager.get_transcript(KEY)
    assert [e.created_at for e in stored] == sorted(e.created_at for e in stored)
    assert [(e.id, e.created_at) for e in stored[1:2]] == [(stepped.id, stepped.created_at)]
    popped = await manager.pop_message(KEY)
    assert popped is not None and popped.content == "own"


async def test_an_upsert_by_message_id_inserting_after_a_step_sorts_last(
    manager: SessionManager, stepped_back: None
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "first")  # stepped too: the floor is it
    node = await manager.get_session(KEY)
    assert node is not None
    later = await manager.append_message(KEY, "assistant", "reply", message_id="r1")
    assert await _contents(manager) == ["first", "reply"]
    again = await manager.append_message(KEY, "assistant", "final", message_id="r1")
    assert (again.id, again.created_at) == (later.id, later.created_at)


async def test_an_explicit_created_at_is_kept_as_given(
    manager: SessionManager, storage: SessionStorage, path: bool
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "now")
    early = TranscriptEntry(
        session_id=node.session_id, session_key=KEY, role="user", content="early", created_at=1_000
    )
    await storage.append_transcript_entry(early, expected_epoch=node.epoch)
    assert early.created_at == 1_000
    also = TranscriptEntry(
        session_id=node.session_id, session_key=KEY, role="user", content="also", created_at=2_000
    )
    await storage.append_message_entry(also, expected_epoch=node.epoch, now=1)
    assert also.created_at == 2_000
    assert await _contents(manager) == ["early", "also", "now"]


async def test_a_stepped_writer_waiting_for_the_lock_sorts_after_what_committed_meanwhile(
    manager: SessionManager, storage: SessionStorage, database: str, stepped_back: None
) -> None:
    """The append starts while another connection holds the lock and writes an entry
    stamped with the real clock; after that commits, the stepped append's statement (whose
    snapshot, on PostgreSQL, did not see it) still sorts after it."""
    node = await manager.create(KEY)
    await manager.count_transcript_entries(KEY)  # warm: one statement, no read first
    real_now = clock.now_ms()
    async with holding(database, KEY) as held:
        insert = (
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
            "content, created_at, schema_version) VALUES ({}, {}, 'meanwhile', 'user', "
            "'meanwhile', {}, 1)"
        )
        touch = "UPDATE sessions SET updated_at = {} WHERE session_key = {}"
        with arrivals(storage, "transcript") as arrived:
            task = asyncio.ensure_future(manager.append_message(KEY, "user", "stepped"))
            async with asyncio.timeout(60):
                await arrived.wait()
            if held.target.startswith("postgresql"):
                await held.wait_for_waiters(1)
                await held.conn.execute(
                    insert.format("$1", "$2", "$3"), node.session_id, KEY, real_now
                )
                await held.conn.execute(touch.format("$1", "$2"), real_now, KEY)
                await held.conn.execute("COMMIT")
                await held.conn.close()
            else:
                held.conn.execute(insert.format("?", "?", "?"), (node.session_id, KEY, real_now))
                held.conn.execute(touch.format("?", "?"), (real_now, KEY))
                held.conn.execute("COMMIT")
                held.conn.close()
            held.released = True
            stepped = await task
    assert stepped.created_at >= real_now
    assert await _contents(manager) == ["meanwhile", "stepped"]


@pytest.mark.parametrize("offset", [-STEP_MS, STEP_MS])
async def test_a_writer_process_with_its_clock_stepped_keeps_the_order(
    manager: SessionManager, database: str, offset: int
) -> None:
    """This process appends, then a writer process whose clock is 5 s behind (or ahead),
    then this one again: reads, and pops, follow the order of the writes."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "here 1")
    env = {**os.environ, "OPENSQUILLA_TEST_CLOCK_OFFSET_MS": str(offset)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.manager.clock_writer",
        database,
        KEY,
        "there 1",
        "there 2",
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    if offset < 0:
        assert lines[-1]["clock"] < clock.now_ms() + offset + 2_000  # the step was real
    await manager.append_message(KEY, "user", "here 2")
    expected = ["here 1", "there 1", "there 2", "batch there 1", "batch there 2", "here 2"]
    assert await _contents(manager) == expected
    stored = await manager.get_transcript(KEY)
    assert [e.created_at for e in stored] == sorted(e.created_at for e in stored)
    assert [e["id"] for e in lines[:-1]] == [e.id for e in stored[1:-1]]
    popped = [await manager.pop_message(KEY) for _ in range(len(expected))]
    assert [p.content for p in popped if p] == expected[::-1]
