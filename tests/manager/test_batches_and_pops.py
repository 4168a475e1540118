"""Issue 28, items 1 and 2 and the append side of 4: ``append_messages`` (one fenced
transaction, all or nothing, in order, bounded statements, never interleaved),
``pop_message`` and ``delete_entry`` (atomic, fenced to the current generation), and the
per-entry ``metadata`` on every append path. Both backends; races forced with another
connection holding the lock and statement events, never sleeps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import MessageInput, SessionManager, SessionStorage
from opensquilla.session.db import uow_writes
from opensquilla.session.db.repos import fenced_append, transcript_batches
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import TranscriptEntry
from tests.helpers import table_snapshot
from tests.storage.direct_paths import force_path

from .primitives_support import BATCH_INSERT, arrivals, holding, on_statement, statements

KEY = "agent:main:batch"
OTHER = "agent:main:other"
META = {"z": 1, "a": {"y": [1, 2.5, "x"], "b": None}, "m": "ü\u0000"}


def _messages(count: int, word: str = "m") -> list[MessageInput]:
    return [
        {"role": ("user", "assistant")[n % 2], "content": f"{word}{n}", "token_count": n + 1}
        for n in range(count)
    ]


async def _total_tokens(manager: SessionManager, key: str = KEY) -> int:
    node = await manager.get_session(key)
    assert node is not None
    return node.total_tokens


@pytest.fixture(params=[True, False], ids=["one_statement", "fallback"])
def one_statement(request: pytest.FixtureRequest, backend: Any, monkeypatch: Any) -> bool:
    """SQLite's paths: RETURNING (3.35+) and the forced fallback without it."""
    if not request.param:
        if backend.is_postgres:
            pytest.skip("PostgreSQL has one path")
        monkeypatch.setattr(fenced_append, "SQLITE_ONE_STATEMENT", False)
    return bool(request.param)


# -- metadata, every append path -----------------------------------------------------------


async def test_metadata_round_trips_exactly_on_every_append_path(
    manager: SessionManager, storage: SessionStorage, one_statement: bool
) -> None:
    node = await manager.create(KEY)
    plain = await manager.append_message(KEY, "user", "plain", metadata=META)
    [batched] = await manager.append_messages(
        KEY, [{"role": "tool", "content": "b", "metadata": META}]
    )
    await manager.append_message(KEY, "assistant", "draft", message_id="r1", metadata={"v": 1})
    replaced = await manager.append_message(
        KEY, "assistant", "final", message_id="r1", metadata=META
    )
    prepared, epoch = await manager.prepare_message(KEY, "system", "prep", metadata=META)
    await storage.append_transcript_entry(prepared, expected_epoch=epoch)
    own = TranscriptEntry(session_id=node.session_id, session_key=KEY, role="user", metadata=META)
    await storage.append_message_entry(own, expected_epoch=epoch, now=1)
    stored = await manager.get_transcript(KEY)
    assert [e.content for e in stored] == ["plain", "b", "final", "prep", None]
    for entry in stored:
        assert entry.metadata == META
        assert list(entry.metadata) == list(META)  # key order kept: JSON text, not jsonb
        assert list(entry.metadata["a"]) == ["y", "b"]
    assert replaced.id == stored[2].id and plain.metadata == batched.metadata == META


async def test_metadata_must_be_a_json_object(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(storage)
    bads: list[Any] = [[1], "text", {1: "x"}, {"nan": float("nan")}, {"s": {1, 2}}]
    for bad in bads:
        with pytest.raises(InvalidInputError):
            await manager.append_message(KEY, "user", "x", metadata=bad)
        with pytest.raises(InvalidInputError, match=r"messages\[1\]"):
            await manager.append_messages(
                KEY, [{"role": "user", "content": "ok"}, {"role": "user", "metadata": bad}]
            )
    assert await table_snapshot(storage) == before


# -- append_messages ------------------------------------------------------------------------


async def test_a_batch_is_written_in_order_with_its_ids_and_tokens(
    manager: SessionManager, one_statement: bool
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before", token_count=100)
    entries = await manager.append_messages(KEY, _messages(5))
    stored = await manager.get_transcript(KEY)
    assert [e.content for e in stored] == ["before", "m0", "m1", "m2", "m3", "m4"]
    assert [e.id for e in stored[1:]] == [e.id for e in entries]
    assert [e.created_at for e in stored[1:]] == [e.created_at for e in entries]
    assert all(e.id is not None for e in entries) and len({e.id for e in entries}) == 5
    assert await _total_tokens(manager) == 100 + 1 + 2 + 3 + 4 + 5


async def test_the_token_rule_applies_per_entry(manager: SessionManager) -> None:
    """An entry with ``turn_usage`` adds nothing; the others add their count."""
    await manager.create(KEY)
    await manager.append_messages(
        KEY,
        [
            {"role": "user", "content": "q", "token_count": 7},
            {"role": "assistant", "content": "a", "token_count": 9, "turn_usage": {"o": 9}},
        ],
    )
    assert await _total_tokens(manager) == 7


async def test_an_empty_batch_writes_nothing_and_reads_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(storage)
    with statements(storage) as seen:
        assert await manager.append_messages(KEY, []) == []
        assert await manager.append_messages("agent:main:absent", []) == []
    assert seen == [] and await table_snapshot(storage) == before


async def test_user_content_is_time_stamped_and_memory_sync_fires_once(
    storage: SessionStorage,
) -> None:
    sizes: list[int] = []
    manager = SessionManager(storage, memory_sync_notify=sizes.append)
    await manager.create(KEY)
    entries = await manager.append_messages(
        KEY, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    )
    assert entries[0].content is not None and entries[0].content.endswith("\nhi")
    assert entries[1].content == "yo"
    assert sizes == [len(entries[0].content.encode()) + 2]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"role": "user", "content": 5}, "content"),
        ({"role": "", "content": "x"}, "role"),
        ({"content": "x"}, "role"),
        ({"role": "user", "token_count": -1}, "token_count"),
        ({"role": "user", "turn_usage": {"o": 1}}, "turn_usage"),
        ({"role": "tool", "reasoning_content": "why"}, "reasoning_content"),
        ({"role": "user", "tool_calls": "nope"}, "tool_calls"),
        ({"role": "user", "colour": "red"}, "colour"),
        ("not a mapping", "mapping"),
    ],
)
async def test_a_bad_message_in_the_middle_writes_nothing(
    manager: SessionManager, storage: SessionStorage, bad: Any, field: str
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(storage)
    batch: list[Any] = [*_messages(2), bad, *_messages(2)]
    with pytest.raises(InvalidInputError, match=rf"messages\[2\].*{field}") as caught:
        await manager.append_messages(KEY, batch)
    assert "nothing was written" in str(caught.value)
    assert await table_snapshot(storage) == before


async def test_a_batch_that_is_not_a_list_is_refused(manager: SessionManager) -> None:
    await manager.create(KEY)
    for bad in ({"role": "user"}, "user", None, 5):
        with pytest.raises(InvalidInputError, match="messages must be a list"):
            await manager.append_messages(KEY, bad)  # type: ignore[arg-type]


async def test_message_ids_name_new_entries_only(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "live", message_id="taken")
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match=r"messages\[1\]: message_id is already"):
        await manager.append_messages(
            KEY, [{"role": "user", "message_id": "new"}, {"role": "user", "message_id": "taken"}]
        )
    with pytest.raises(InvalidInputError, match="same message_id"):
        await manager.append_messages(
            KEY, [{"role": "user", "message_id": "a"}, {"role": "user", "message_id": "a"}]
        )
    assert await table_snapshot(storage) == before
    [entry] = await manager.append_messages(KEY, [{"role": "user", "message_id": "fresh"}])
    assert entry.message_id == "fresh"


async def test_a_failure_inside_the_transaction_leaves_nothing(
    manager: SessionManager, storage: SessionStorage, one_statement: bool
) -> None:
    """The batch's INSERT fails as it is sent: on SQLite the transaction it begins (the
    three-statement path: its fenced touch already ran) is rolled back; on PostgreSQL the
    one statement never ran. (A later chunk failing inside the transaction: the chunk test
    below.)"""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept", token_count=1)
    before = await table_snapshot(storage)

    def fail() -> None:
        raise RuntimeError("injected")

    with (
        on_statement(storage, BATCH_INSERT, fail, when="before"),
        pytest.raises(RuntimeError, match="injected"),
    ):
        await manager.append_messages(KEY, _messages(10))
    assert await table_snapshot(storage) == before


async def test_a_batch_past_the_token_ceiling_is_refused_whole(
    manager: SessionManager, storage: SessionStorage, one_statement: bool
) -> None:
    await manager.create(KEY)
    node = await storage.get_session(KEY)
    assert node is not None
    node.total_tokens = 2**63 - 10
    await storage.upsert_session(node)
    before = await table_snapshot(storage)
    batch: list[MessageInput] = [
        {"role": "user", "token_count": 6},
        {"role": "user", "token_count": 6},
    ]
    with pytest.raises(InvalidInputError, match="total_tokens"):
        await manager.append_messages(KEY, batch)
    with pytest.raises(InvalidInputError, match="add up to"):
        await manager.append_messages(KEY, [{"role": "user", "token_count": 2**63 - 1}] * 2)
    assert await table_snapshot(storage) == before


@pytest.mark.parametrize("size", [1, 10, 100])
async def test_the_statement_count_does_not_grow_with_the_batch(
    manager: SessionManager, storage: SessionStorage, size: int, backend: Any
) -> None:
    await manager.create(KEY)
    await manager.append_messages(KEY, _messages(1))  # warm: the generation cache
    with statements(storage) as seen:
        await manager.append_messages(KEY, _messages(size))
    work = [s for s in seen if not s.startswith(("BEGIN", "COMMIT"))]
    # PostgreSQL: the fenced touch feeds the INSERT as a CTE; SQLite: the INSERT into the
    # append view, whose trigger touches (the three-statement path: test_chunks below).
    assert len(work) == 1, seen
    assert await manager.count_transcript_entries(KEY) == size + 1


async def test_a_reset_between_the_read_and_the_write_moves_the_batch_to_the_new_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The manager's cached generation is stale (another manager reset the session): the
    fence refuses the batch, which is written again, whole, to the current generation."""
    old = await manager.create(KEY)
    await manager.append_message(KEY, "user", "cached")
    other = SessionManager(storage, inject_time_prefix=False)
    await other.reset(KEY)
    entries = await manager.append_messages(KEY, _messages(3))
    node = await manager.get_session(KEY)
    assert node is not None and node.session_id != old.session_id
    assert {e.session_id for e in entries} == {node.session_id}
    assert [e.content for e in await manager.get_transcript(KEY)] == ["m0", "m1", "m2"]
    assert await storage.get_transcript(old.session_id) == []


@pytest.mark.sqlite_only
async def test_a_batch_cancelled_inside_its_transaction_leaves_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """SQLite: cancelled as its statement is sent (the INSERT into the append view, the
    fenced touch inside it): the thread runs it inside the transaction and, the
    cancellation seen, does not commit; rolled back. (Cancelled while the statement runs
    on the thread: tests/storage/test_batch_commit_hop.py.)"""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    before = await table_snapshot(storage)
    task: asyncio.Task[Any] | None = None

    def cancel() -> None:
        assert task is not None
        task.cancel()

    with on_statement(storage, BATCH_INSERT, cancel, when="before"):
        task = asyncio.ensure_future(manager.append_messages(KEY, _messages(10)))
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await table_snapshot(storage) == before


@pytest.mark.postgres_only
@pytest.mark.parametrize("fast", [True, False], ids=["direct", "connection"])
async def test_a_batch_cancelled_while_it_waits_for_the_row_leaves_nothing(
    manager: SessionManager,
    storage: SessionStorage,
    database: str,
    fast: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL: the batch's statement waits for the session row another transaction
    holds; cancelled there, it is cancelled on the server and rolled back, on both paths
    (the pool connection's: the cancellation passed on to the statement, the connection
    thrown away once asyncpg's cancel request is done, nothing left unretrieved)."""
    force_path(monkeypatch, fast)
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept")
    before = await table_snapshot(storage)
    direct: list[int] = []
    original = uow_writes.all_rows

    def counted(*args: Any, **kwargs: Any) -> Any:
        direct.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(uow_writes, "all_rows", counted)
    async with holding(database, KEY) as held:
        task = asyncio.ensure_future(manager.append_messages(KEY, _messages(10)))
        await held.wait_for_waiters(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert direct == ([1] if fast else [])
    assert await table_snapshot(storage) == before
    assert [e.content for e in await manager.get_transcript(KEY)] == ["kept"]
    await manager.append_messages(KEY, _messages(2))  # the pool hands out a good one
    assert "never retrieved" not in caplog.text


async def _two_storages(database: str) -> tuple[SessionStorage, SessionStorage]:
    first, second = SessionStorage(database), SessionStorage(database)
    await first.connect()
    await second.connect()
    return first, second


async def test_two_concurrent_batches_never_interleave(
    manager: SessionManager, database: str
) -> None:
    """Two storages (two pools, as two processes) start a batch each while another
    connection holds the lock; both are waiting when it is released."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "first")
    first, second = await _two_storages(database)
    try:
        managers = [SessionManager(s, inject_time_prefix=False) for s in (first, second)]
        for m in managers:  # warm: the generation cache, so the batch is one write
            await m.count_transcript_entries(KEY)
            await m.append_messages(KEY, [{"role": "system", "content": "warm"}])
        async with holding(database, KEY) as held:
            with arrivals(first, BATCH_INSERT) as a, arrivals(second, BATCH_INSERT) as b:
                tasks = [
                    asyncio.ensure_future(m.append_messages(KEY, _messages(20, word)))
                    for m, word in zip(managers, ("a", "b"), strict=True)
                ]
                async with asyncio.timeout(60):
                    await a.wait()
                    await b.wait()
                if held.target.startswith("postgresql"):
                    await held.wait_for_waiters(2)
                await held.release()
                written = await asyncio.gather(*tasks)
    finally:
        await first.close()
        await second.close()
    stored = [e for e in await manager.get_transcript(KEY) if e.role != "system"]
    words = [e.content[0] for e in stored[1:] if e.content]
    assert words in (["a"] * 20 + ["b"] * 20, ["b"] * 20 + ["a"] * 20), words
    for batch in written:
        ids = [e.id or 0 for e in batch]
        assert ids == sorted(ids)
    assert await _total_tokens(manager) == 2 * sum(range(1, 21))


# -- pop_message and delete_entry -------------------------------------------------------------


async def test_pop_takes_the_newest_and_none_when_empty(
    manager: SessionManager, storage: SessionStorage, one_statement: bool
) -> None:
    assert await manager.pop_message("agent:main:absent") is None
    await manager.create(KEY)
    assert await manager.pop_message(KEY) is None
    entries = await manager.append_messages(KEY, _messages(3))
    tokens = await _total_tokens(manager)
    popped = await manager.pop_message(KEY)
    assert popped is not None
    assert (popped.id, popped.content, popped.metadata) == (entries[2].id, "m2", None)
    assert popped == entries[2]
    assert [e.content for e in await manager.get_transcript(KEY)] == ["m0", "m1"]
    assert await _total_tokens(manager) == tokens  # counters count usage, not rows
    assert [(await manager.pop_message(KEY) or entries[0]).content for _ in range(2)] == [
        "m1",
        "m0",
    ]
    assert await manager.pop_message(KEY) is None


async def test_pop_orders_by_created_at_then_id(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    for content, at in (("late", 5_000), ("early", 1_000), ("late-too", 5_000)):
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id,
                session_key=KEY,
                role="user",
                content=content,
                created_at=at,
            )
        )
    popped = [await manager.pop_message(KEY) for _ in range(3)]
    assert [p.content for p in popped if p] == ["late-too", "late", "early"]


async def test_pop_never_touches_another_generation_or_the_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    old = await manager.create(KEY)
    await manager.append_message(KEY, "user", "old generation")
    await manager.create(OTHER)
    await manager.append_message(OTHER, "user", "other session")
    await manager.reset(KEY)
    assert await manager.pop_message(KEY) is None
    assert [e.content for e in await manager.get_transcript(OTHER)] == ["other session"]
    assert await storage.get_transcript(old.session_id) == []


async def test_popped_and_deleted_entries_leave_the_search_index(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_messages(
        KEY, [{"role": "user", "content": "platypus one"}, {"role": "user", "content": "wombat"}]
    )
    [keep] = await manager.append_messages(KEY, [{"role": "user", "content": "echidna"}])
    assert (await manager.search("echidna", session_key=KEY)).messages
    await manager.pop_message(KEY)
    assert (await manager.search("echidna", session_key=KEY)).messages == []
    first = (await manager.get_transcript(KEY))[0]
    assert await manager.delete_entry(KEY, first.id or 0)
    assert (await manager.search("platypus", session_key=KEY)).messages == []
    assert (await manager.search("wombat", session_key=KEY)).messages
    assert keep.id is not None


async def test_delete_entry_by_row_id_within_the_current_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.create(OTHER)
    [mine] = await manager.append_messages(KEY, [{"role": "user", "content": "mine"}])
    [theirs] = await manager.append_messages(OTHER, [{"role": "user", "content": "theirs"}])
    before = await table_snapshot(storage)
    assert await manager.delete_entry(KEY, theirs.id or 0) is False
    assert await manager.delete_entry(KEY, 2**63 - 1) is False
    assert await manager.delete_entry("agent:main:absent", mine.id or 0) is False
    assert await table_snapshot(storage) == before
    tokens = await _total_tokens(manager)
    assert await manager.delete_entry(KEY, mine.id or 0) is True
    assert await manager.delete_entry(KEY, mine.id or 0) is False
    assert await manager.get_transcript(KEY) == []
    assert await _total_tokens(manager) == tokens
    # An entry of an older generation is not the current generation's.
    [old] = await manager.append_messages(KEY, [{"role": "user", "content": "old"}])
    await manager.reset(KEY)
    assert await manager.delete_entry(KEY, old.id or 0) is False
    for bad in (True, 1.5, "1", None, 2**64):
        with pytest.raises(InvalidInputError, match="entry_id"):
            await manager.delete_entry(KEY, bad)  # type: ignore[arg-type]


async def test_two_concurrent_pops_never_return_the_same_entry(
    manager: SessionManager, database: str
) -> None:
    """Two storages pop while another connection holds the lock; both wait, then race for
    the newest entry: each gets its own, the two newest."""
    await manager.create(KEY)
    entries = await manager.append_messages(KEY, _messages(6))
    first, second = await _two_storages(database)
    try:
        managers = [SessionManager(s, inject_time_prefix=False) for s in (first, second)]
        for m in managers:
            await m.count_transcript_entries(KEY)
        for _ in range(2):
            async with holding(database, KEY) as held:
                with arrivals(first, "DELETE FROM") as a, arrivals(second, "DELETE FROM") as b:
                    tasks = [asyncio.ensure_future(m.pop_message(KEY)) for m in managers]
                    async with asyncio.timeout(60):
                        await a.wait()
                        await b.wait()
                    if held.target.startswith("postgresql"):
                        await held.wait_for_waiters(2)
                    await held.release()
                    popped = await asyncio.gather(*tasks)
            assert all(p is not None for p in popped)
            ids = {p.id for p in popped if p is not None}
            newest = {e.id for e in entries[-2:]}
            assert ids == newest, (ids, newest)
            entries = entries[:-2]
    finally:
        await first.close()
        await second.close()
    assert [e.content for e in await manager.get_transcript(KEY)] == ["m0", "m1"]


async def test_a_batch_longer_than_a_chunk_is_one_transaction_of_chunks(
    manager: SessionManager,
    storage: SessionStorage,
    one_statement: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ``CHUNK_ROWS`` rows a batch takes one more INSERT per chunk, in the same
    transaction, in order, one timestamp; a failure in a later chunk leaves nothing."""
    monkeypatch.setattr(transcript_batches, "CHUNK_ROWS", 3)
    await manager.create(KEY)
    await manager.append_messages(KEY, _messages(1))
    with statements(storage) as seen:
        entries = await manager.append_messages(KEY, _messages(10, "c"))
    inserts = [s for s in seen if "INSERT INTO transcript_entries" in s]
    assert len(inserts) == 4, seen
    stored = await manager.get_transcript(KEY)
    assert [e.content for e in stored[1:]] == [f"c{n}" for n in range(10)]
    assert [e.id for e in stored[1:]] == [e.id for e in entries]
    assert len({e.created_at for e in entries}) == 1
    before = await table_snapshot(storage)
    calls = 0

    def fail_third() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("injected")

    engine = storage.engine.sync_engine

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "INSERT INTO transcript_entries" in statement:
            fail_third()

    event.listen(engine, "after_cursor_execute", after)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            await manager.append_messages(KEY, _messages(10, "d"))
    finally:
        event.remove(engine, "after_cursor_execute", after)
    assert await table_snapshot(storage) == before
