"""An in-memory store survives cancellation.

A ``":memory:"`` database lives as long as the one connection that opened it. A
cancellation (a timeout, a cancelled task) used to make SQLAlchemy invalidate that
connection; the pool then opened a new, empty, unmigrated database and every session was
gone. Now the store keeps its one connection for its whole life: whatever an operation is
doing when it is cancelled, the data is all still there afterwards, the interrupted
operation is whole or undone (never half), and the store keeps working.

The cancellation points are forced, not hoped for: the operation runs as a task that is
cancelled when its k-th statement starts (the statement then still runs on the
connection's thread, after the task has stopped waiting for it) or after it finished, for
every k; the clock and UUIDs are frozen so that a reference run gives the "after" state.
A statement cancelled as it starts is held on the connection's thread (:class:`_Gate`)
until the task has taken the cancellation in: a statement that carries its transaction's
COMMIT (``db/sqlite_driver.py``) checks just before committing whether its caller was
cancelled, and on a busy machine the thread could otherwise reach that check first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import sqlite_driver
from opensquilla.session.models import SessionContextState
from tests.helpers import table_snapshot

SUBJECT = "agent:main:subject"
WITNESS = "agent:main:witness"
STALE = "agent:main:stale"
Snapshot = dict[str, list[tuple[Any, ...]]]


@contextlib.contextmanager
def _frozen(now_ns: int) -> Iterator[None]:
    """Clock stopped, UUIDs counted from 1: two runs write the same values."""
    counter = itertools.count(1)
    real_time_ns, real_uuid4 = time.time_ns, uuid.uuid4
    time.time_ns = lambda: now_ns  # type: ignore[assignment]
    uuid.uuid4 = lambda: uuid.UUID(int=next(counter), version=4)  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time_ns = real_time_ns  # type: ignore[assignment]
        uuid.uuid4 = real_uuid4  # type: ignore[assignment]


async def _populate(manager: SessionManager) -> None:
    await manager.create(WITNESS, label="must survive everything")
    for n in range(4):
        await manager.append_message(WITNESS, "user", f"witness {n}", token_count=5)
    node = await manager.create(SUBJECT)
    for n in range(10):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(SUBJECT, role, f"early {n}", token_count=100)
    assert (await manager.compact_with_result(SUBJECT, 1000, compaction_id="c1")).removed_count
    for n in range(3):
        await manager.append_message(SUBJECT, "user", f"late {n}", token_count=100)
    await manager.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=SUBJECT, state_kind="s")
    )
    await manager.create(STALE)
    await manager.append_message(STALE, "user", "old news", token_count=1)
    await manager.storage.update_session_fields(STALE, {"updated_at": 1_000})


Operation = Callable[[SessionManager], Awaitable[Any]]
OPERATIONS: dict[str, Operation] = {
    "get_transcript": lambda m: m.get_transcript(SUBJECT),
    "list_sessions": lambda m: m.storage.list_sessions(),
    "append": lambda m: m.append_message(SUBJECT, "user", "new", token_count=7),
    "update": lambda m: m.update(SUBJECT, label="renamed"),
    "reset": lambda m: m.reset(SUBJECT),
    "compact": lambda m: m.compact_with_result(SUBJECT, 400, compaction_id="c2"),
    "branch_full": lambda m: m.branch(SUBJECT, "agent:main:child", fork_transcript=True),
    "truncate": lambda m: m.truncate(SUBJECT, 1),
    "prune": lambda m: m.prune_stale(60_000),
}

# One statement in autocommit (the append, docs/semantics.md#fencing): once it is on the
# connection's thread it runs whole; there is no transaction left to undo.
ONE_AUTOCOMMIT_STATEMENT = {"append"}


@contextlib.asynccontextmanager
async def _memory_store() -> AsyncIterator[SessionManager]:
    async with SessionStorage(":memory:") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        yield manager


@contextlib.contextmanager
def _on_statement(storage: SessionStorage, name: str, fn: Callable[..., Any]) -> Iterator[None]:
    engine = storage.engine.sync_engine
    event.listen(engine, name, fn)
    try:
        yield
    finally:
        event.remove(engine, name, fn)


class _Gate:
    """Holds the next statement sent to the connection's thread (``sqlite_driver._run_one``)
    until :meth:`release`, and shows what it was sent with."""

    WAIT_S = 30.0  # a bound for a bug, never reached by a passing run

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.released = threading.Event()
        self.commit: list[bool] | None = None
        self._run_one = sqlite_driver._run_one

    def run_one(self, *args: Any) -> Any:  # on the connection's thread
        if self.armed:
            self.armed = False
            self.commit = args[4] if len(args) > 4 else None
            self.entered.set()
            assert self.released.wait(self.WAIT_S), "the gate was never released"
        return self._run_one(*args)

    async def release_once_cancelled(self, where: str) -> None:
        """Once the held statement is on the thread and its caller has taken the
        cancellation in (a COMMIT it carries is called off), let it run."""
        deadline = time.monotonic() + self.WAIT_S
        while not self.entered.is_set() or (self.commit is not None and self.commit[0]):
            assert time.monotonic() < deadline, f"{where}: the cancellation never arrived"
            await asyncio.sleep(0.001)
        self.released.set()


async def _reference(name: str, frozen_ns: int) -> tuple[Snapshot, Snapshot, int]:
    async with _memory_store() as manager:
        with _frozen(frozen_ns):
            await _populate(manager)
            before = await table_snapshot(manager.storage)
            statements = 0

            def count(*_: Any) -> None:
                nonlocal statements
                statements += 1

            with _on_statement(manager.storage, "before_cursor_execute", count):
                await OPERATIONS[name](manager)
        after = await table_snapshot(manager.storage)
    return before, after, statements


async def _cancelled_at(
    name: str,
    mode: str,
    k: int,
    frozen_ns: int,
    before: Snapshot,
    after: Snapshot,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    where = f"{name}: cancelled {mode} statement {k}"
    gate = _Gate()
    monkeypatch.setattr(sqlite_driver, "_run_one", gate.run_one)
    async with _memory_store() as manager:
        storage = manager.storage
        with _frozen(frozen_ns):
            await _populate(manager)
            assert await table_snapshot(storage) == before, f"{where}: populate differs"
            reached = asyncio.Event()
            seen = 0

            def hook(*args: Any) -> None:
                nonlocal seen
                seen += 1
                if seen == k:
                    # before_cursor_execute's last argument: a statement's executemany
                    # goes to the thread by another function than the gate's.
                    gate.armed = mode == "during" and not args[-1]
                    reached.set()

            event_name = "before_cursor_execute" if mode == "during" else "after_cursor_execute"
            with _on_statement(storage, event_name, hook):
                task = asyncio.create_task(OPERATIONS[name](manager))
                waiter = asyncio.create_task(reached.wait())
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                assert reached.is_set(), f"{where}: the point was never reached"
                task.cancel()
                if gate.armed or gate.entered.is_set():
                    await gate.release_once_cancelled(where)
                try:
                    await task
                    outcome = "finished"
                except asyncio.CancelledError:
                    outcome = "cancelled"

        state = await table_snapshot(storage)
        assert state["sessions"], f"{where}: every session is gone (a new, empty database)"
        assert state in (before, after), f"{where}: a half-applied change"
        if outcome == "finished":
            assert state == after, f"{where}: finished but not applied"
        # ... and it keeps working, on the same database.
        entry = await manager.append_message(WITNESS, "user", "still here")
        assert (await manager.get_transcript(WITNESS))[-1].id == entry.id
        assert len(await manager.get_transcript(WITNESS)) == 5
        return outcome if outcome == "finished" else ("whole" if state == after else "undone")


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_an_in_memory_store_keeps_its_data_through_a_cancellation_at_every_statement(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen_ns = time.time_ns()
    before, after, statements = await _reference(name, frozen_ns)
    assert statements > 0
    points = [("during", k) for k in range(1, statements + 1)]
    points += [("after", k) for k in range(1, statements + 1)]
    outcomes = [
        await _cancelled_at(name, mode, k, frozen_ns, before, after, monkeypatch)
        for mode, k in points
    ]
    if name in ONE_AUTOCOMMIT_STATEMENT:
        assert statements == 1 and "whole" in outcomes, (statements, outcomes)
    elif before != after:
        assert "undone" in outcomes, outcomes


async def test_the_reported_reproduction_a_tiny_timeout_on_a_read_loses_nothing() -> None:
    """``async with asyncio.timeout(0.001): await m.get_transcript(k)`` on ``:memory:``."""
    async with SessionStorage(":memory:") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(SUBJECT)
        for n in range(50):
            await manager.append_message(SUBJECT, "user", f"message {n}")
        timeouts = 0
        for attempt in range(200):
            try:
                async with asyncio.timeout(0.00002 * (attempt % 50)):
                    await manager.get_transcript(SUBJECT)
            except TimeoutError:
                timeouts += 1
        assert timeouts > 0
        assert len(await manager.get_transcript(SUBJECT)) == 50
        await manager.append_message(SUBJECT, "user", "and one more")
        assert len(await manager.get_transcript(SUBJECT)) == 51


async def test_two_in_memory_stores_are_still_separate_databases() -> None:
    async with SessionStorage(":memory:") as first, SessionStorage(":memory:") as second:
        await SessionManager(first).create(SUBJECT)
        assert await second.get_session(SUBJECT) is None
        await SessionManager(second).create(WITNESS)
        assert [n.session_key for n in await first.list_sessions()] == [SUBJECT]
        assert [n.session_key for n in await second.list_sessions()] == [WITNESS]


async def test_closing_an_in_memory_store_really_closes_its_connection() -> None:
    """The connection ignores the pool's close; the store's close() is what ends it (and
    its thread), so nothing leaks and a reopened store is a new, empty database."""
    before = set(threading.enumerate())
    storage = SessionStorage(":memory:")
    await storage.connect()
    await SessionManager(storage).create(SUBJECT)
    started = set(threading.enumerate()) - before
    assert started  # the connection's thread
    await storage.close()
    for thread in started:
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive()
    async with SessionStorage(":memory:") as reopened:
        assert await reopened.count_sessions() == 0
