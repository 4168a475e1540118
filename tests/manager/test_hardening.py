"""Hardening beyond the contract: stale writers, refused changes that must change nothing,
failures injected inside multi-row transactions, and several engines racing on one database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import ProtectedFieldError, StaleGenerationError
from opensquilla.session.models import (
    SessionContextState,
    SessionIntent,
    SessionSummary,
    TranscriptEntry,
)
from opensquilla.session.storage import StaleEpochError
from opensquilla.session.support.clock import now_ms
from tests.helpers import table_snapshot

KEY = "agent:main:hard"
RESET = SessionIntent.RESET_SAME_KEY


@contextlib.contextmanager
def failing_statement(storage: SessionStorage, fragment: str) -> Iterator[list[str]]:
    """Raise ``RuntimeError`` from the first statement containing ``fragment``.

    Yields the statements that tripped, so a test can prove the fault point was reached.
    """
    engine = storage.engine.sync_engine
    needle = " ".join(fragment.upper().split())
    tripped: list[str] = []

    def before_cursor_execute(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if not tripped and needle in " ".join(statement.upper().split()):
            tripped.append(statement)
            raise RuntimeError(f"injected failure at {fragment}")

    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    try:
        yield tripped
    finally:
        event.remove(engine, "before_cursor_execute", before_cursor_execute)


@contextlib.asynccontextmanager
async def storages(target: str, count: int) -> AsyncIterator[list[SessionStorage]]:
    """``count`` independent storages (one engine each) on the same database."""
    opened: list[SessionStorage] = []
    try:
        for _ in range(count):
            store = SessionStorage(target)
            await store.connect()
            opened.append(store)
        yield opened
    finally:
        for store in opened:
            await store.close()


def _archive_documents(directory: Path) -> dict[str, Any]:
    """Every file in the archive directory, parsed (a fragment would fail to parse)."""
    if not directory.exists():
        return {}
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(directory.iterdir())}


async def _populated(manager: SessionManager, storage: SessionStorage) -> str:
    """A session with transcript, summary and a context state; returns its session id."""
    node = await manager.create(KEY)
    for index in range(3):
        await manager.append_message(KEY, "user", f"message {index}", token_count=2)
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="digest")
    )
    await manager.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=KEY, state_kind="s")
    )
    return node.session_id


# -- stale writers -------------------------------------------------------------------------


async def test_stale_node_cannot_undo_a_reset(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A whole-row write of a node read before the reset is refused, even after it learned
    the new epoch: the old session id never comes back."""
    await manager.create(KEY)
    stale = await storage.get_session(KEY)
    assert stale is not None
    renewed, _ = await manager.apply_intent(KEY, RESET)
    before = await table_snapshot(storage)

    stale.total_tokens = 999
    with pytest.raises(StaleEpochError) as caught:
        await storage.upsert_session(stale)
    assert isinstance(caught.value, StaleGenerationError)
    assert await table_snapshot(storage) == before

    stale.epoch = renewed.epoch
    with pytest.raises(StaleEpochError):
        await storage.upsert_session(stale)
    assert await table_snapshot(storage) == before
    row = await storage.get_session(KEY)
    assert row is not None and row.session_id == renewed.session_id


async def test_current_node_write_back_still_works(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The generation check must not block the legitimate read-modify-write."""
    await manager.create(KEY)
    await manager.apply_intent(KEY, RESET)
    current = await storage.get_session(KEY)
    assert current is not None

    current.total_tokens = 55
    await storage.upsert_session(current)

    row = await storage.get_session(KEY)
    assert row is not None and row.total_tokens == 55


async def test_stale_append_changes_neither_transcript_nor_counters(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The fenced append and its session touch are one unit: a refused append leaves the
    token total and updated_at of the new generation alone."""
    old = await manager.create(KEY)
    await manager.apply_intent(KEY, RESET)
    before = await table_snapshot(storage)

    with pytest.raises(StaleEpochError):
        await storage.append_message_entry(
            TranscriptEntry(session_id=old.session_id, session_key=KEY, role="user", content="x"),
            expected_epoch=old.epoch,
            now=now_ms(),
            token_delta=50,
        )

    assert await table_snapshot(storage) == before


async def test_update_cannot_restore_an_old_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    old = await manager.create(KEY)
    await manager.apply_intent(KEY, RESET)
    before = await table_snapshot(storage)

    with pytest.raises(ProtectedFieldError):
        await manager.update(KEY, session_id=old.session_id, epoch=0)
    with pytest.raises(ProtectedFieldError):
        await manager.update(KEY, epoch=0)

    assert await table_snapshot(storage) == before


async def test_failing_memory_sync_does_not_lose_the_message(storage: SessionStorage) -> None:
    """The notification is advisory: the append is already committed."""

    def broken(size: int) -> None:
        raise OSError("memory service down")

    manager = SessionManager(storage, broken, inject_time_prefix=False)
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", "persisted anyway", token_count=3)

    assert [e.id for e in await manager.get_transcript(KEY)] == [entry.id]
    node = await storage.get_session(KEY)
    assert node is not None and node.total_tokens == 3


# -- refusals that must change nothing -----------------------------------------------------


@pytest.mark.parametrize(
    ("fork", "budget"),
    [(False, None), (True, None), (True, 1), ("prefix", None)],
    ids=["plain", "full-fork", "over-budget", "prefix-fork"],
)
async def test_branch_onto_a_live_key_changes_nothing(
    manager: SessionManager, storage: SessionStorage, fork: bool | str, budget: int | None
) -> None:
    await _populated(manager, storage)
    cut = (await manager.get_transcript(KEY))[-1].message_id
    await manager.create("agent:main:taken")
    await manager.append_message("agent:main:taken", "user", "belongs to the taken key")
    before = await table_snapshot(storage)

    with pytest.raises(ValueError):
        await manager.branch(
            KEY,
            "agent:main:taken",
            fork_transcript=bool(fork),
            max_fork_tokens=budget,
            fork_before_message_id=cut if fork == "prefix" else None,
        )

    assert await table_snapshot(storage) == before


# -- failures inside one transaction -------------------------------------------------------


async def test_crash_inside_reset_rolls_everything_back(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    """A failure between the identity rotation and the deletes leaves every table as it
    was, and the caller sees the original exception.

    The archive is staged under a temporary name inside the transaction and published only
    after the commit, so a reset that rolls back leaves no archive file behind at all.
    """
    old_id = await _populated(manager, storage)
    before = await table_snapshot(storage)

    with (
        failing_statement(storage, "DELETE FROM transcript_entries") as tripped,
        pytest.raises(RuntimeError, match="injected failure") as caught,
    ):
        await manager.apply_intent(KEY, RESET)

    assert tripped, "the reset never reached the transcript delete"
    assert type(caught.value) is RuntimeError
    assert await table_snapshot(storage) == before
    row = await storage.get_session(KEY)
    assert row is not None and row.session_id == old_id and row.epoch == 0
    leftovers = sorted(p.name for p in _archive_dir.iterdir()) if _archive_dir.exists() else []
    assert leftovers == []

    # The store is usable afterwards and the retried reset goes through, archived once.
    applied, rotated = await manager.apply_intent(KEY, RESET)
    assert rotated is True and applied.session_id != old_id
    assert await storage.count_transcript_entries(old_id) == 0
    (document,) = _archive_documents(_archive_dir).values()
    assert document["session_id"] == old_id


async def test_crash_inside_full_fork_leaves_no_child(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _populated(manager, storage)
    before = await table_snapshot(storage)

    with (
        failing_statement(storage, "INSERT INTO session_summaries") as tripped,
        pytest.raises(RuntimeError, match="injected failure"),
    ):
        await manager.branch(KEY, "agent:main:child", fork_transcript=True)

    assert tripped
    assert await table_snapshot(storage) == before
    assert await manager.get_session("agent:main:child") is None


async def test_crash_inside_truncate_keeps_the_transcript(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _populated(manager, storage)
    before = await table_snapshot(storage)

    with (
        failing_statement(storage, "DELETE FROM compacted_transcript_entries") as tripped,
        pytest.raises(RuntimeError, match="injected failure"),
    ):
        await manager.truncate(KEY, 1)

    assert tripped
    assert await table_snapshot(storage) == before


async def test_crash_inside_cap_deletes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _populated(manager, storage)
    await manager.create("agent:main:second")
    before = await table_snapshot(storage)

    with (
        failing_statement(storage, "DELETE FROM session_context_states") as tripped,
        pytest.raises(RuntimeError, match="injected failure"),
    ):
        await manager.cap_entries(1)

    assert tripped
    assert await table_snapshot(storage) == before


async def test_crash_inside_append_leaves_counters_alone(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The transcript insert and the token/updated_at touch commit together or not at all."""
    await _populated(manager, storage)
    before = await table_snapshot(storage)

    with (
        failing_statement(storage, "INSERT INTO transcript_") as tripped,
        pytest.raises(RuntimeError, match="injected failure"),
    ):
        await manager.append_message(KEY, "user", "never stored", token_count=40)

    assert tripped
    assert await table_snapshot(storage) == before


# -- several engines on one database -------------------------------------------------------


async def test_concurrent_get_or_create_has_one_winner(database: str) -> None:
    """Eight workers racing for one key: one row, one creator, no errors."""
    async with storages(database, 8) as stores:
        managers = [SessionManager(s, inject_time_prefix=False) for s in stores]

        results = await asyncio.gather(*(m.get_or_create(KEY) for m in managers))

        assert sum(created for _, created in results) == 1
        assert len({node.session_id for node, _ in results}) == 1
        assert await stores[0].count_sessions() == 1
        row = await stores[0].get_session(KEY)
        assert row is not None and row.session_id == results[0][0].session_id


async def test_concurrent_appends_lose_nothing(database: str) -> None:
    """Four engines x 25 appends: every message exactly once, each writer's own order kept,
    and the token total is the exact sum (no lost increments)."""
    writers, per_writer = 4, 25
    async with storages(database, writers) as stores:
        managers = [SessionManager(s, inject_time_prefix=False) for s in stores]
        await managers[0].create(KEY)

        async def write(index: int) -> None:
            for n in range(per_writer):
                await managers[index].append_message(
                    KEY, "user", f"w{index}-{n:02d}", token_count=index + 1
                )

        await asyncio.gather(*(write(i) for i in range(writers)))

        entries = await managers[0].get_transcript(KEY)
        contents = [e.content or "" for e in entries]
        assert len(contents) == writers * per_writer
        assert len(set(contents)) == len(contents)
        assert len({e.id for e in entries}) == len(entries)
        for index in range(writers):
            own = [c for c in contents if c.startswith(f"w{index}-")]
            assert own == [f"w{index}-{n:02d}" for n in range(per_writer)]
        row = await stores[0].get_session(KEY)
        assert row is not None
        assert row.total_tokens == per_writer * sum(range(1, writers + 1))


async def test_concurrent_resets_all_apply(database: str) -> None:
    """Resets racing on one key serialise: each one rotates, the epoch counts all of them."""
    async with storages(database, 3) as stores:
        managers = [SessionManager(s, inject_time_prefix=False) for s in stores]
        await managers[0].create(KEY)

        async def reset_twice(manager: SessionManager) -> list[str]:
            ids = []
            for _ in range(2):
                node, rotated = await manager.apply_intent(KEY, RESET)
                assert rotated is True
                ids.append(node.session_id)
            return ids

        results = await asyncio.gather(*(reset_twice(m) for m in managers))

        row = await stores[0].get_session(KEY)
        assert row is not None
        assert row.epoch == 6
        every_id = [i for ids in results for i in ids]
        assert len(set(every_id)) == 6
        assert row.session_id in every_id


async def test_appends_racing_a_reset_are_never_orphaned(database: str, _archive_dir: Path) -> None:
    """Each message lands in the old generation (and is archived), in the new one, or is
    refused as stale; none is silently attached to a dead generation."""
    total = 30
    async with storages(database, 2) as (writer_store, resetter_store):
        writer = SessionManager(writer_store, inject_time_prefix=False)
        resetter = SessionManager(resetter_store, inject_time_prefix=False)
        old = await writer.create(KEY)
        started = asyncio.Event()
        refused: list[str] = []

        async def write() -> None:
            for n in range(total):
                text = f"m{n:02d}"
                try:
                    await writer.append_message(KEY, "user", text)
                except StaleEpochError:
                    refused.append(text)
                if n == 5:
                    started.set()

        async def reset() -> None:
            await started.wait()
            await resetter.apply_intent(KEY, RESET)

        await asyncio.gather(write(), reset())

        row = await writer_store.get_session(KEY)
        assert row is not None and row.session_id != old.session_id
        assert await writer_store.count_transcript_entries(old.session_id) == 0
        live = [e.content for e in await writer.get_transcript(KEY)]
        (document,) = _archive_documents(_archive_dir).values()
        archived = [e["content"] for e in document["transcript_entries"]]
        assert len(archived) >= 6
        assert sorted(archived + live + refused) == [f"m{n:02d}" for n in range(total)]
