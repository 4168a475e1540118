"""One store per DSN for the framework integrations (``integrations/_shared.py``).

A framework builds session objects freely and rarely closes them; a DSN's sessions must
therefore hold one store (one pool per event loop), not one each, and the last release
closes it. A store the caller gives is used, connected if needed, and never closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations import _shared
from opensquilla.session.integrations._shared import StorageLease, require_framework

KEY = "agent:main:lease"


@pytest.fixture(autouse=True)
def _no_leftover_shared() -> Any:
    """Every test starts and ends with no shared store open (a leak fails the test)."""
    assert _shared.shared_storage_count() == 0
    yield
    assert _shared.shared_storage_count() == 0


async def test_leases_of_one_dsn_share_one_connected_store(database: str) -> None:
    leases = [StorageLease(database) for _ in range(100)]
    stores = {id(await lease.storage()) for lease in leases}
    assert len(stores) == 1
    assert _shared.shared_storage_count() == 1
    storage = await leases[0].storage()
    assert storage.is_connected and storage.open_engines == 1
    for lease in leases[:-1]:
        await lease.release()
    assert storage.is_connected  # one lease still holds it
    await leases[-1].release()
    assert not storage.is_connected


async def test_concurrent_first_calls_connect_the_shared_store_once(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    entered = asyncio.Event()
    release = asyncio.Event()
    connect = SessionStorage.connect

    async def slow_connect(self: SessionStorage) -> None:
        nonlocal calls
        calls += 1
        entered.set()
        await release.wait()  # every other caller arrives while this one connects
        await connect(self)

    monkeypatch.setattr(SessionStorage, "connect", slow_connect)
    leases = [StorageLease(database) for _ in range(5)]
    tasks = [asyncio.create_task(lease.storage()) for lease in leases]
    await entered.wait()
    await asyncio.sleep(0)  # the other four are now waiting on the lock
    release.set()
    stores = await asyncio.gather(*tasks)
    assert calls == 1 and len({id(s) for s in stores}) == 1
    for lease in leases:
        await lease.release()


async def test_a_released_lease_refuses_and_a_second_release_does_nothing(database: str) -> None:
    lease = StorageLease(database)
    await lease.storage()
    await lease.release()
    await lease.release()
    with pytest.raises(RuntimeError, match="closed"):
        await lease.storage()


async def test_a_new_lease_after_the_last_release_opens_a_new_store(database: str) -> None:
    first = StorageLease(database)
    manager = SessionManager(await first.storage(), inject_time_prefix=False)
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    await first.release()
    second = StorageLease(database)
    storage = await second.storage()
    entries = await SessionManager(storage, inject_time_prefix=False).get_transcript(KEY)
    assert [e.content for e in entries] == ["kept"]
    await second.release()


async def test_a_given_store_is_connected_if_needed_and_never_closed(database: str) -> None:
    storage = SessionStorage(database)
    lease = StorageLease(storage)
    assert not lease.owned
    assert await lease.storage() is storage and storage.is_connected
    await lease.release()
    assert storage.is_connected
    assert _shared.shared_storage_count() == 0  # a given store is never registered
    await storage.close()


async def test_memory_is_private_to_each_lease() -> None:
    one, two = StorageLease(":memory:"), StorageLease(":memory:")
    first, second = await one.storage(), await two.storage()
    assert first is not second and _shared.shared_storage_count() == 0
    await SessionManager(first).create(KEY)
    assert await SessionManager(second).get_session(KEY) is None
    await one.release()
    await two.release()
    assert not first.is_connected and not second.is_connected


def test_the_shared_store_serves_every_event_loop(database: str) -> None:
    """``Runner.run_sync`` makes a loop per call: each gets an engine of the one store."""
    lease = StorageLease(database)

    async def turn(text: str) -> int:
        manager = SessionManager(await lease.storage(), inject_time_prefix=False)
        if await manager.get_session(KEY) is None:
            await manager.create(KEY)
        await manager.append_message(KEY, "user", text)
        return len(await manager.get_transcript(KEY))

    assert [asyncio.run(turn(f"turn {i}")) for i in range(3)] == [1, 2, 3]
    asyncio.run(lease.release())
    assert _shared.shared_storage_count() == 0


@pytest.mark.parametrize("target", [None, 5, "", b"sessions.db"])
def test_a_target_that_is_neither_a_store_nor_a_dsn_is_refused(target: Any) -> None:
    with pytest.raises(TypeError, match="SessionStorage or a DSN string"):
        StorageLease(target)


def test_a_missing_framework_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'opensquilla-session\[some-extra\]'"):
        require_framework("no_such_framework_pkg", extra="some-extra", framework="Some SDK")
    require_framework("asyncio", extra="x", framework="X")  # present: nothing raised
