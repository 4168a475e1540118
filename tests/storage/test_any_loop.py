"""Any event loop (issue 28, item 8; docs/sync.md#loops): a file or PostgreSQL storage
gives each event loop that calls it an engine (pool) of its own, made on the loop's first
call, disposed of when the loop ends (``asyncio.run``'s ``shutdown_asyncgens``) or, for a
loop closed without that, at the next new loop's call, and every one by ``close()``. The
schema is brought to head once. ``:memory:`` keeps its refusal
(tests/storage/test_sync_facade.py).

Each scenario runs in a worker thread (``asyncio.to_thread``): ``asyncio.run`` cannot run
on the test's own loop thread.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate

KEY = "agent:main:loops"
RUNS = 20


class Engines:
    """Every engine the storage makes, and which of them were disposed of."""

    def __init__(self, storage: SessionStorage) -> None:
        self.made: list[AsyncEngine] = []
        self.disposed: list[AsyncEngine] = []
        make = storage._new_engine

        def counted() -> AsyncEngine:
            engine = make()
            self.made.append(engine)
            event.listen(
                engine.sync_engine, "engine_disposed", lambda _: self.disposed.append(engine)
            )
            return engine

        storage._new_engine = counted  # type: ignore[method-assign]

    @property
    def open(self) -> int:
        return len({id(e) for e in self.made} - {id(e) for e in self.disposed})


def _quiet(capfd: pytest.CaptureFixture[str]) -> None:
    gc.collect()  # an unclosed connection's finaliser warns now, inside the test
    err = capfd.readouterr().err
    for sign in ("Traceback", "Event loop is closed", "unclosed", "was never", "destroyed"):
        assert sign not in err, err


def _twenty_runs(database: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    migrations: list[AsyncEngine] = []
    ensure_head = migrate.ensure_head

    async def counted_ensure_head(engine: AsyncEngine, *args: Any) -> bool:
        migrations.append(engine)
        return await ensure_head(engine, *args)

    monkeypatch.setattr(migrate, "ensure_head", counted_ensure_head)
    storage = SessionStorage(database)
    engines = Engines(storage)
    open_during: list[int] = []
    open_between: list[int] = []

    async def first() -> None:
        await storage.connect()
        await SessionManager(storage, inject_time_prefix=False).create(KEY)

    async def call(n: int) -> None:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.append_message(KEY, "user", f"message {n}")
        await manager.append_message(KEY, "assistant", f"reply {n}")
        assert len(await manager.get_transcript(KEY)) == 2 * (n + 1)
        assert len(await manager.list_sessions(key_prefix="agent:main:")) == 1
        open_during.append(storage.open_engines)

    asyncio.run(first())
    for n in range(RUNS):
        asyncio.run(call(n))
        open_between.append(storage.open_engines)

    async def close() -> None:
        await storage.close()

    asyncio.run(close())
    return {
        "made": len(engines.made),
        "open": engines.open,
        "migrations": len(migrations),
        "open_during": open_during,
        "open_between": open_between,
        "connected": storage.is_connected,
    }


@pytest.mark.filterwarnings("error::ResourceWarning", "error::RuntimeWarning")
async def test_twenty_asyncio_runs_against_one_storage(
    database: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``asyncio.run`` per call (a script, ``Runner.run_sync``-style code): every call
    works, each on an engine of its own loop, disposed of as that loop ends; the schema was
    brought to head once; ``close()`` leaves no engine open; no warning."""
    seen = await asyncio.to_thread(_twenty_runs, database, monkeypatch)
    assert seen["made"] == RUNS + 1  # connect()'s loop, then one per run
    assert seen["migrations"] == 1
    assert seen["open_during"] == [1] * RUNS  # the engine of the connect loop went with it
    assert seen["open_between"] == [0] * RUNS
    assert seen["open"] == 0 and not seen["connected"]
    _quiet(capfd)


def _in_a_thread_loop(work: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(work())


async def test_a_second_threads_loop_works_while_the_first_is_live(
    database: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The test's loop and a worker thread's loop write to one storage at the same time,
    each on its own engine; the worker's goes when its loop ends, the test's stays."""
    storage = SessionStorage(database)
    engines = Engines(storage)
    await storage.connect()
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(KEY)
    both = threading.Barrier(2)

    async def elsewhere() -> int:
        other = SessionManager(storage, inject_time_prefix=False)
        await other.append_message(KEY, "user", "from the thread 0")
        both.wait()
        for n in range(1, 20):
            await other.append_message(KEY, "user", f"from the thread {n}")
        return storage.open_engines

    async def here() -> None:
        await asyncio.to_thread(both.wait)
        for n in range(20):
            await manager.append_message(KEY, "user", f"from the test {n}")

    open_in_thread, _ = await asyncio.gather(
        asyncio.to_thread(_in_a_thread_loop, elsewhere), here()
    )
    assert open_in_thread == 2
    assert storage.open_engines == 1 and len(engines.made) == 2 and engines.open == 1
    contents = [str(e.content) for e in await manager.get_transcript(KEY)]
    assert sorted(contents) == sorted(
        [f"from the thread {n}" for n in range(20)] + [f"from the test {n}" for n in range(20)]
    )
    assert [c for c in contents if "thread" in c] == [f"from the thread {n}" for n in range(20)]
    await storage.close()
    assert engines.open == 0
    _quiet(capfd)


async def test_close_disposes_of_the_engine_of_a_live_loop_elsewhere(database: str) -> None:
    """A worker thread's loop is still running when the test's loop closes the storage:
    its engine is disposed of on that loop (``dispose_engine`` hands it over)."""
    storage = SessionStorage(database)
    engines = Engines(storage)
    await storage.connect()
    await SessionManager(storage).create(KEY)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        done = asyncio.run_coroutine_threadsafe(storage.get_session(KEY), loop)
        assert (await asyncio.wrap_future(done)) is not None
        assert storage.open_engines == 2
        await storage.close()
        assert engines.open == 0 and storage.open_engines == 0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


def _bare_loops(database: str) -> dict[str, Any]:
    """Loops closed with a bare ``loop.close()`` (no ``shutdown_asyncgens``): each one's
    engine is seen at the next new loop's call and disposed of then."""
    storage = SessionStorage(database)
    engines = Engines(storage)
    open_seen: list[int] = []

    def on_a_bare_loop(work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(work())
        finally:
            loop.close()

    async def first() -> None:
        await storage.connect()
        await SessionManager(storage).create(KEY)

    async def call() -> None:
        await SessionManager(storage).append_message(KEY, "user", "hello")
        open_seen.append(storage.open_engines)

    on_a_bare_loop(first)
    for _ in range(5):
        on_a_bare_loop(call)

    async def close() -> None:
        await storage.close()

    asyncio.run(close())
    return {"made": len(engines.made), "open": engines.open, "open_seen": open_seen}


# asyncpg's connections of a loop closed bare cannot be closed any more: they are let go
# of, and asyncpg warns "unclosed connection" when they are collected (docs/sync.md#loops).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
async def test_engines_of_loops_closed_bare_are_disposed_at_the_next_call(database: str) -> None:
    seen = await asyncio.to_thread(_bare_loops, database)
    gc.collect()  # here, under this test's filter
    assert seen["made"] == 6
    assert seen["open_seen"] == [1] * 5  # the dead loop's engine went as the new one came
    assert seen["open"] == 0


async def test_an_engine_per_loop_keeps_the_storage_engine_of_this_loop(
    storage: SessionStorage,
) -> None:
    """``storage.engine`` is the calling loop's (what the architecture tests' checkout
    counter hooks); another loop's is another engine over the same database."""
    mine = storage.engine

    async def theirs() -> AsyncEngine:
        return storage.engine

    other = await asyncio.to_thread(asyncio.run, theirs())
    assert storage.engine is mine and other is not mine
    assert other.url == mine.url
