"""Engine lifecycle and object identity (DESIGN §2, §4).

Connecting is idempotent, closing is idempotent, a closed store fails loudly instead of
reopening behind the caller's back, and returned models never alias database state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import SessionStorage
from opensquilla.session.errors import SessionStoreError
from opensquilla.session.models import SessionNode
from opensquilla.session.storage import StorageNotConnectedError

from . import add_entry, add_state, add_summary, new_session

KEY = "agent:main:main"


async def test_connect_twice_is_harmless(database: str) -> None:
    storage = SessionStorage(database)
    await storage.connect()
    try:
        engine = storage.engine
        await new_session(storage, KEY)
        await storage.connect()
        assert storage.engine is engine  # no second engine, no lost state
        assert await storage.get_session(KEY) is not None
    finally:
        await storage.close()


async def test_close_is_idempotent_and_reconnect_sees_the_data(database: str) -> None:
    storage = SessionStorage(database)
    await storage.close()  # never connected: nothing to do
    await storage.connect()
    await new_session(storage, KEY)
    await storage.close()
    await storage.close()
    assert not storage.is_connected
    await storage.connect()
    try:
        assert await storage.get_session(KEY) is not None
    finally:
        await storage.close()


UNCONNECTED_USES: list[Callable[[SessionStorage], Awaitable[object]]] = [
    lambda s: s.get_session(KEY),
    lambda s: s.upsert_session(SessionNode(session_key=KEY)),
    lambda s: s.list_sessions(),
    lambda s: s.count_sessions(),
    lambda s: s.get_transcript("sid"),
    lambda s: s.get_context_states(KEY),
]


async def test_a_closed_storage_refuses_to_work(database: str) -> None:
    """No silent reconnect: using a store before connect() or after close() is a bug."""
    storage = SessionStorage(database)
    for use in UNCONNECTED_USES:
        with pytest.raises(StorageNotConnectedError):
            await use(storage)  # before connect()
    with pytest.raises(StorageNotConnectedError):
        _ = storage.engine
    await storage.connect()
    await storage.close()
    for use in UNCONNECTED_USES:
        with pytest.raises(StorageNotConnectedError) as info:
            await use(storage)  # after close()
        assert isinstance(info.value, RuntimeError)
        assert isinstance(info.value, SessionStoreError)
        assert str(info.value) == "Storage not connected. Call connect() first."
    with pytest.raises(StorageNotConnectedError):
        _ = storage.engine
    assert not storage.is_connected


async def test_async_with_connects_and_closes(database: str) -> None:
    async with SessionStorage(database) as storage:
        assert storage.is_connected
        await new_session(storage, KEY)
    assert not storage.is_connected
    with pytest.raises(StorageNotConnectedError):
        await storage.get_session(KEY)


async def test_async_with_closes_on_error(database: str) -> None:
    """The caller's exception passes through unchanged, and the engine is still disposed."""

    class Boom(Exception):
        pass

    storage = SessionStorage(database)
    with pytest.raises(Boom):
        async with storage:
            raise Boom
    assert not storage.is_connected


async def test_open_constructs_and_connects(database: str) -> None:
    storage = await SessionStorage.open(database)
    try:
        assert storage.is_connected
        assert await storage.count_sessions() == 0
    finally:
        await storage.close()


async def test_engine_is_public_and_instrumentable(storage: SessionStorage) -> None:
    """Instrumentation hooks on ``storage.engine`` see the statements the store runs."""
    assert isinstance(storage.engine, AsyncEngine)
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(storage.engine.sync_engine, "before_cursor_execute", record)
    try:
        await new_session(storage, KEY)
        await storage.get_session(KEY)
    finally:
        event.remove(storage.engine.sync_engine, "before_cursor_execute", record)
    upper = [s.upper() for s in seen]
    assert any(s.lstrip().startswith("INSERT INTO SESSIONS") for s in upper)
    assert any(s.lstrip().startswith("SELECT") and "FROM SESSIONS" in s for s in upper)
    count = len(seen)
    await storage.get_session(KEY)
    assert len(seen) == count  # removed listeners stay removed


async def test_two_storages_share_one_database(database: str) -> None:
    """Several workers open the same database; each sees the others' commits."""
    async with SessionStorage(database) as writer, SessionStorage(database) as reader:
        node = await new_session(writer, KEY)
        await add_entry(writer, node, "from the writer")
        seen = await reader.get_session(KEY)
        assert seen is not None and seen.session_id == node.session_id
        assert [e.content for e in await reader.get_transcript(node.session_id)] == [
            "from the writer"
        ]
        assert await reader.increment_epoch(KEY) == 1
        assert await writer.get_epoch(KEY) == 1


async def test_memory_databases_are_private() -> None:
    """Each ``:memory:`` storage is its own database (SQLite, whatever the backend)."""
    async with SessionStorage(":memory:") as one, SessionStorage(":memory:") as two:
        await new_session(one, KEY)
        assert await one.count_sessions() == 1
        assert await two.count_sessions() == 0


# -- returned models are detached --------------------------------------------------------


async def test_mutating_a_returned_node_does_not_change_the_next_read(
    storage: SessionStorage,
) -> None:
    await new_session(storage, KEY, label="stored", delivery_context={"a": [1]})
    first = await storage.get_session(KEY)
    assert first is not None
    first.label = "mutated"
    assert first.delivery_context is not None
    first.delivery_context["a"].append(2)
    second = await storage.get_session(KEY)
    assert second is not None
    assert second is not first
    assert (second.label, second.delivery_context) == ("stored", {"a": [1]})
    [listed] = await storage.list_sessions()
    assert listed.label == "stored"


async def test_mutating_a_written_node_afterwards_changes_nothing(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, label="written")
    node.label = "changed in memory only"
    stored = await storage.get_session(KEY)
    assert stored is not None and stored.label == "written"


async def test_returned_rows_of_other_tables_are_detached(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    await add_entry(storage, node, "text", tool_calls=[{"id": "1"}])
    await add_summary(storage, node, "gist", summary_payload={"k": "v"})
    await add_state(storage, node, payload={"p": 1})

    [entry] = await storage.get_transcript(node.session_id)
    entry.content = "changed"
    assert entry.tool_calls is not None
    entry.tool_calls[0]["id"] = "2"
    [summary] = await storage.get_all_summaries(node.session_id)
    summary.summary_text = "changed"
    [state] = await storage.get_context_states(KEY)
    state.payload["p"] = 2

    [entry_again] = await storage.get_transcript(node.session_id)
    assert (entry_again.content, entry_again.tool_calls) == ("text", [{"id": "1"}])
    [summary_again] = await storage.get_all_summaries(node.session_id)
    assert summary_again.summary_text == "gist"
    [state_again] = await storage.get_context_states(KEY)
    assert state_again.payload == {"p": 1}
