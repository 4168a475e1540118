"""Counters never leave their type (issue 11, item 14).

Two appends of ``token_count=2**62`` turned SQLite's ``total_tokens`` into a REAL (SQLite
converts an overflowing integer sum silently), after which exporting the store failed;
Postgres raised a generic "bigint out of range". Every counter the store increments
(``total_tokens``, ``epoch``, ``compaction_count``, ``spawn_depth`` of a child) refuses an
increment past its column's type with ``InvalidInputError``, atomically, on both backends.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos import fenced_append
from opensquilla.session.errors import InvalidInputError, StaleEpochError
from opensquilla.session.models import INT32_MAX, INT64_MAX, TranscriptEntry
from opensquilla.session.transfer import export_sessions

from .test_bad_input_errors import refused

KEY = "agent:main:counters"


async def _stored_total(storage: SessionStorage, key: str) -> object:
    """``total_tokens`` as the database holds it (its Python type tells INTEGER from REAL)."""
    async with storage.engine.connect() as conn:
        query = sa.text("SELECT total_tokens FROM sessions WHERE session_key = :key")
        return (await conn.execute(query, {"key": key})).scalar_one()


async def test_an_append_that_would_overflow_total_tokens_is_refused_and_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "first", token_count=2**62)

    error = await refused(
        storage,
        lambda: manager.append_message(KEY, "user", "second", token_count=2**62),
        names="total_tokens",
    )
    assert str(2**62) in str(error)

    total = await _stored_total(storage, KEY)
    assert type(total) is int and total == 2**62
    assert [e.content for e in await manager.get_transcript(KEY)] == ["first"]
    exported = io.BytesIO()
    summary = await export_sessions(storage, exported)  # a REAL total made this fail
    assert summary.sessions == 1


async def test_total_tokens_may_reach_exactly_its_maximum_and_no_further(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "a", token_count=INT64_MAX - 5)
    await manager.append_message(KEY, "user", "b", token_count=5)
    assert await _stored_total(storage, KEY) == INT64_MAX
    await refused(
        storage, lambda: manager.append_message(KEY, "user", "c", token_count=1), names="total"
    )
    # Appends that add nothing to the counter still go through.
    await manager.append_message(KEY, "user", "d")
    await manager.append_message(KEY, "assistant", "e", token_count=9, turn_usage={"in": 9})
    assert [e.content for e in await manager.get_transcript(KEY)] == ["a", "b", "d", "e"]
    assert await _stored_total(storage, KEY) == INT64_MAX


async def test_a_stale_generation_is_still_reported_as_stale_not_as_overflow(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The overflow guard shares the fence's WHERE clause; only a fence that matched the
    generation but had no room is an overflow."""
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "a", token_count=INT64_MAX)
    entry = TranscriptEntry(session_id=node.session_id, session_key=KEY, role="user")
    with pytest.raises(StaleEpochError):
        await storage.append_message_entry(entry, expected_epoch=7, now=1, token_delta=1)
    with pytest.raises(InvalidInputError, match="total_tokens"):
        await storage.append_message_entry(entry, expected_epoch=0, now=1, token_delta=1)

    # A manager whose cached generation went stale re-reads it and appends normally.
    other = SessionManager(storage, inject_time_prefix=False)
    await other.get_session(KEY)
    await manager.reset(KEY)
    appended = await other.append_message(KEY, "user", "after reset", token_count=3)
    assert appended.session_id != node.session_id
    assert await _stored_total(storage, KEY) == 3


async def test_the_normal_append_still_runs_no_extra_statement(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The guard is a condition in the fenced UPDATE: one statement on Postgres and on
    SQLite (the view of revision 0008), UPDATE and INSERT on an SQLite without RETURNING."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm the generation cache", token_count=1)
    statements: list[str] = []

    def record(*args: object) -> None:
        statements.append(str(args[2]).split()[0].upper())

    event.listen(storage.engine.sync_engine, "before_cursor_execute", record)
    try:
        await manager.append_message(KEY, "user", "counted", token_count=5)
    finally:
        event.remove(storage.engine.sync_engine, "before_cursor_execute", record)
    if storage.backend == "postgresql":
        expected = ["WITH"]
    else:
        expected = ["INSERT"] if fenced_append.SQLITE_ONE_STATEMENT else ["UPDATE", "INSERT"]
    assert statements == expected


async def test_an_epoch_at_its_maximum_is_not_incremented(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await storage.upsert_session(node.model_copy(update={"epoch": INT64_MAX}))
    await refused(storage, lambda: storage.increment_epoch(KEY), names="epoch")
    assert await storage.get_epoch(KEY) == INT64_MAX


async def test_a_reset_at_the_maximum_epoch_is_refused_and_keeps_everything(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "kept", token_count=1)
    await storage.upsert_session(
        (await manager.get_session(KEY)).model_copy(update={"epoch": INT64_MAX})  # type: ignore[union-attr]
    )
    await refused(storage, lambda: manager.reset(KEY))
    stored = await manager.get_session(KEY)
    assert stored is not None
    assert (stored.session_id, stored.epoch) == (node.session_id, INT64_MAX)
    assert [e.content for e in await manager.get_transcript(KEY)] == ["kept"]
    assert list(_archive_dir.glob("*.json")) == []  # nothing was archived either


async def _with_history(manager: SessionManager) -> None:
    await manager.create(KEY)
    for n in range(8):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(KEY, role, f"message {n} " * 30, token_count=500)


async def test_a_compaction_at_the_maximum_compaction_count_is_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``compaction_count`` is a 32-bit column: SQLite would store 2**31, Postgres refuse."""
    await _with_history(manager)
    node = await manager.get_session(KEY)
    assert node is not None
    await storage.upsert_session(node.model_copy(update={"compaction_count": INT32_MAX}))
    await refused(storage, lambda: manager.compact_with_result(KEY, 2000), names="compaction_count")
    kept = [{"role": "assistant", "content": "message 7 " * 30}]
    await refused(
        storage,
        lambda: manager.persist_compaction_result(KEY, "summary", kept),
        names="compaction_count",
    )
    await storage.upsert_session(node.model_copy(update={"compaction_count": INT32_MAX - 1}))
    assert (await manager.compact_with_result(KEY, 2000)).removed_count > 0
    assert (await manager.get_session(KEY)).compaction_count == INT32_MAX  # type: ignore[union-attr]


async def test_a_branch_beyond_the_maximum_spawn_depth_is_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "x", token_count=1)
    await storage.upsert_session(node.model_copy(update={"spawn_depth": INT32_MAX}))
    await refused(
        storage,
        lambda: manager.branch(KEY, "agent:main:child", fork_transcript=True),
        names="spawn_depth",
    )


async def test_token_counts_summing_beyond_64_bits_neither_block_a_fork_nor_a_compaction(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Counts reported with usage are not added to ``total_tokens``, so a transcript can
    hold counts whose sum exceeds 64 bits. SQLite's ``sum()`` raised "integer overflow"
    for the fork budget (Postgres sums as ``numeric``), and the compaction summary's
    ``tokens_before`` could not be stored."""
    await manager.create(KEY)
    for n in range(4):
        role = "user" if n % 2 == 0 else "assistant"
        # turn_usage is the assistant's (issue 28: refused for a user message); the
        # user rows count through their token_count alone... which would overflow the
        # session's total, so they carry their usage in metadata and count nothing.
        usage = {"tokens": 2**62}
        await manager.append_message(
            KEY,
            role,
            f"m{n}",
            token_count=2**62 if role == "assistant" else None,
            turn_usage=usage if role == "assistant" else None,
            metadata=None if role == "assistant" else usage,
        )
    child = await manager.branch(KEY, "agent:main:child", fork_transcript=True, max_fork_tokens=10)
    assert child.forked_from_parent is False
    child = await manager.branch(KEY, "agent:main:child2", fork_transcript=True)
    assert child.forked_from_parent is True
    result = await manager.compact_with_result(KEY, 2**62)
    assert result.removed_count > 0
    (summary,) = await manager.get_summaries(KEY)
    assert summary.tokens_before == INT64_MAX  # saturated, not refused
