"""Sync callers (issue 15 item 3): the synchronous facade, and a clear error when an async
storage is used from an event loop other than the one that connected it.

The facade runs in worker threads (``asyncio.to_thread``): it has its own loop thread and
must never be called from an event loop's thread that it would block.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    EventLoopMismatchError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from opensquilla.session.storage import StorageNotConnectedError
from opensquilla.session.sync import SyncSessionManager, SyncSessionStorage

THREADS = 8
APPENDS = 25


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and callable(inspect.getattr_static(cls, name))
    }


def test_the_sync_manager_mirrors_every_async_method_and_signature() -> None:
    assert _public_methods(SyncSessionManager) >= _public_methods(SessionManager)
    extra = _public_methods(SyncSessionManager) - _public_methods(SessionManager)
    assert extra == {"close"}
    for name in _public_methods(SessionManager):
        ours = inspect.signature(getattr(SyncSessionManager, name))
        theirs = inspect.signature(getattr(SessionManager, name))
        assert ours.parameters == theirs.parameters, name
    iterator = inspect.signature(SyncSessionManager.iter_canonical_transcript)
    assert str(iterator.return_annotation).startswith("Iterator")


def test_the_sync_storage_mirrors_the_async_storage_calls() -> None:
    lifecycle = {"connect", "connect_without_migrating", "close", "open", "from_engine"}
    wanted = _public_methods(SessionStorage) - lifecycle
    assert wanted <= _public_methods(SyncSessionStorage)
    for name in wanted:
        assert inspect.signature(getattr(SyncSessionStorage, name)).parameters == (
            inspect.signature(getattr(SessionStorage, name)).parameters
        ), name


def test_the_sync_storage_reads_the_storage_s_values_through_with_their_types() -> None:
    """The plain-value properties the facade declares (for type checkers) are read from the
    async storage as they are, and declared with the types the storage's properties return."""
    declared = inspect.get_annotations(SyncSessionStorage)
    assert set(declared) == {
        "target",
        "backend",
        "is_connected",
        "recovered_archives",
        "archive_store_tag",
    }
    for name, annotation in declared.items():
        returned = inspect.getattr_static(SessionStorage, name).fget.__annotations__["return"]
        assert annotation == returned, name
    with SyncSessionStorage() as storage:
        for name in declared:
            assert getattr(storage, name) == getattr(storage.async_storage, name), name


def _many_threads(database: str) -> dict[str, Any]:
    """Eight threads append to four sessions at once through one sync manager."""
    barrier = threading.Barrier(THREADS)
    failures: list[BaseException] = []
    with SyncSessionManager(SyncSessionStorage(database), inject_time_prefix=False) as manager:
        keys = [f"agent:main:sync-{n}" for n in range(THREADS // 2)]
        for key in keys:
            manager.create(key)

        def work(worker: int) -> None:
            try:
                barrier.wait()
                key = keys[worker % len(keys)]
                for n in range(APPENDS):
                    manager.append_message(key, "user", f"w{worker}-{n}", token_count=1)
            except BaseException as exc:  # reported below, not lost in the thread
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result = {
            "failures": failures,
            "counts": {key: manager.count_transcript_entries(key) for key in keys},
            "contents": {
                key: [e.content for e in manager.iter_canonical_transcript(key, page_size=7)]
                for key in keys
            },
            "tokens": {key: manager.get_session(key).total_tokens for key in keys},  # type: ignore[union-attr]
        }
        manager.storage.close()
    return result


async def test_many_threads_append_through_the_sync_manager(database: str) -> None:
    result = await asyncio.to_thread(_many_threads, database)
    assert result["failures"] == []
    per_key = APPENDS * 2  # two workers per key
    assert set(result["counts"].values()) == {per_key}
    assert set(result["tokens"].values()) == {per_key}
    for key, contents in result["contents"].items():
        index = int(key.rsplit("-", 1)[1])
        for worker in (index, index + THREADS // 2):
            mine = [c for c in contents if c.startswith(f"w{worker}-")]
            assert mine == [f"w{worker}-{n}" for n in range(APPENDS)]  # each thread's order kept


def _errors(database: str) -> list[type[BaseException]]:
    raised: list[type[BaseException]] = []
    storage = SyncSessionStorage(database)
    manager = SyncSessionManager(storage, inject_time_prefix=False)
    manager.create("agent:main:dup")
    for call in (
        lambda: manager.create("agent:main:dup"),
        lambda: manager.resume("agent:main:missing"),
        lambda: manager.append_message("agent:main:missing", "user", "x"),
    ):
        try:
            call()
        except Exception as exc:
            raised.append(type(exc))
    manager.close()  # the storage was given: still open
    assert storage.is_connected
    storage.close()
    storage.close()  # idempotent
    try:
        manager.get_session("agent:main:dup")
    except Exception as exc:
        raised.append(type(exc))
    return raised


async def test_errors_are_raised_with_their_own_types(database: str) -> None:
    raised = await asyncio.to_thread(_errors, database)
    assert raised == [
        SessionExistsError,
        SessionNotFoundError,
        SessionNotFoundError,
        StorageNotConnectedError,
    ]


def _loop_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "opensquilla-session-loop"}


def test_a_refused_setting_starts_no_thread() -> None:
    before = _loop_threads()
    with pytest.raises(SessionStoreError, match="pool_size"):
        SyncSessionStorage(":memory:", pool_size=3)
    assert _loop_threads() == before


def test_a_target_given_to_the_manager_is_owned_and_closed() -> None:
    with SyncSessionManager(":memory:", inject_time_prefix=False) as manager:
        manager.create("agent:main:owned")
        assert [n.session_key for n in manager.list_sessions()] == ["agent:main:owned"]
        assert manager.get_cached_epoch("agent:main:owned") == 0
        assert manager.reserve_assistant_message("t1", "a1", "agent:main:owned") is not None
        walk = manager.iter_canonical_transcript("agent:main:owned")
        assert list(walk) == []
    assert not manager.storage.is_connected


def _two_runs(database: str) -> list[str]:
    """``asyncio.run()`` per request with one shared async ``:memory:`` storage (one pinned
    connection, so one loop): the second run gets our error, and ``close()`` from a third
    loop works. A file or PostgreSQL storage serves every loop (tests/storage/test_any_loop.py)."""
    storage = SessionStorage(database)
    seen: list[str] = []

    async def first() -> None:
        await storage.connect()
        await SessionManager(storage).create("agent:main:loops")

    async def second() -> None:
        try:
            await SessionManager(storage).get_session("agent:main:loops")
        except EventLoopMismatchError as exc:
            seen.append(str(exc))

    async def third() -> None:
        await storage.close()
        seen.append(f"closed: {storage.is_connected}")

    asyncio.run(first())
    asyncio.run(second())
    asyncio.run(third())
    return seen


async def test_asyncio_run_twice_with_one_memory_storage_is_a_clear_error(
    capfd: pytest.CaptureFixture[str],
) -> None:
    seen = await asyncio.to_thread(_two_runs, ":memory:")
    assert len(seen) == 2
    assert "connected on another event loop" in seen[0]
    assert "':memory:'" in seen[0] and "a pool per event loop" in seen[0]
    assert "SyncSessionManager" in seen[0]
    assert seen[1] == "closed: False"
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "Event loop is closed" not in captured.err


async def test_close_from_another_running_loop_closes_on_the_owner(database: str) -> None:
    """The loop that connected still runs (this test's): close() from another thread's
    loop hands the disposal to it."""
    storage = SessionStorage(database)
    await storage.connect()
    await SessionManager(storage).create("agent:main:owner")
    await asyncio.to_thread(asyncio.run, storage.close())
    assert not storage.is_connected
    async with SessionStorage(database) as again:  # the database is fine afterwards
        assert await again.get_session("agent:main:owner") is not None


def test_a_sync_call_from_the_loop_thread_is_refused() -> None:
    """A callback running on the store's loop that calls the sync facade would wait for
    itself forever: refused with a clear error instead."""
    with SyncSessionManager(":memory:", inject_time_prefix=False) as manager:
        manager.create("agent:main:cb")
        seen: list[str] = []

        async def call_back_in() -> None:
            try:
                manager.get_session("agent:main:cb")
            except RuntimeError as exc:
                seen.append(str(exc))

        manager.storage._loop_thread.run(call_back_in)
        assert seen and "loop thread" in seen[0]


def _close_during_a_call() -> list[str]:
    """A call still running in one thread when another closes the storage: the caller is
    told (``CancelledError``), nobody hangs, and later calls are refused."""
    in_flight = threading.Event()
    never = asyncio.Event()  # bound to the store's loop on first wait

    async def notify(_size: int) -> None:
        in_flight.set()
        await never.wait()

    outcome: list[str] = []
    storage = SyncSessionStorage(":memory:")
    manager = SyncSessionManager(storage, notify, inject_time_prefix=False)
    manager.create("agent:main:closing")

    def append() -> None:
        try:
            manager.append_message("agent:main:closing", "user", "x")
        except BaseException as exc:
            outcome.append(type(exc).__name__)

    worker = threading.Thread(target=append)
    worker.start()
    assert in_flight.wait(timeout=60)
    storage.close()
    worker.join()
    try:
        manager.get_session("agent:main:closing")
    except StorageNotConnectedError:
        outcome.append("refused after close")
    return outcome


async def test_close_cancels_calls_still_running() -> None:
    assert await asyncio.to_thread(_close_during_a_call) == [
        "CancelledError",
        "refused after close",
    ]
