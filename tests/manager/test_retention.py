"""Retention: pruning stale sessions and capping the number of sessions, with cascades."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
)
from opensquilla.session.usecases import retention


async def _session(
    manager: SessionManager,
    storage: SessionStorage,
    key: str,
    *,
    updated_at: int,
    created_at: int | None = None,
) -> SessionNode:
    """A session with every kind of owned row, and the given clocks."""
    node = await manager.create(key)
    await manager.append_message(key, "user", f"said in {key}")
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=key, summary_text="summary")
    )
    await manager.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=key, state_kind="s")
    )
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(
            [
                CompactedTranscriptEntry(
                    session_id=node.session_id,
                    session_key=key,
                    original_entry_id=1,
                    role="user",
                    content="archived",
                    created_at=10,
                )
            ],
        )
    stored = await storage.get_session(key)
    assert stored is not None
    stored.updated_at = updated_at
    if created_at is not None:
        stored.created_at = created_at
    await storage.upsert_session(stored)
    return stored


async def _assert_gone(manager: SessionManager, storage: SessionStorage, node: SessionNode) -> None:
    assert await storage.get_session(node.session_key) is None
    assert await storage.count_transcript_entries(node.session_id) == 0
    assert await storage.get_compacted_transcript_entries(node.session_id) == []
    assert await storage.get_all_summaries(node.session_id) == []
    assert await manager.get_context_states(node.session_key, valid_only=False) == []


async def _assert_intact(
    manager: SessionManager, storage: SessionStorage, node: SessionNode
) -> None:
    stored = await storage.get_session(node.session_key)
    assert stored is not None and stored.session_id == node.session_id
    assert await storage.count_transcript_entries(node.session_id) == 1
    assert len(await storage.get_compacted_transcript_entries(node.session_id)) == 1
    assert len(await storage.get_all_summaries(node.session_id)) == 1
    assert len(await manager.get_context_states(node.session_key)) == 1


# -- prune_stale ---------------------------------------------------------------------------


async def test_prune_removes_a_long_idle_session(manager: SessionManager) -> None:
    node = await manager.create("agent:main:idle")
    node.updated_at = 1
    await manager.storage.upsert_session(node)

    assert await manager.prune_stale(max_age_ms=1_000) == 1
    assert await manager.get_session("agent:main:idle") is None


async def test_prune_cutoff_is_strict(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only rows updated strictly before now - max_age go; the boundary row stays."""
    older = await _session(manager, storage, "agent:main:older", updated_at=8_999)
    boundary = await _session(manager, storage, "agent:main:boundary", updated_at=9_000)
    newer = await _session(manager, storage, "agent:main:newer", updated_at=9_001)
    monkeypatch.setattr(retention, "now_ms", lambda: 10_000)

    assert await manager.prune_stale(max_age_ms=1_000) == 1

    await _assert_gone(manager, storage, older)
    await _assert_intact(manager, storage, boundary)
    await _assert_intact(manager, storage, newer)


async def test_prune_keeps_recent_sessions(manager: SessionManager) -> None:
    for index in range(3):
        await manager.create(f"agent:main:fresh{index}")

    assert await manager.prune_stale(max_age_ms=60_000) == 0
    assert await manager.storage.count_sessions() == 3


async def test_prune_removes_states_of_earlier_generations(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A reset leaves the old generation's states behind (invalidated); deleting the key
    must take them too."""
    node = await manager.create("agent:main:reset-then-idle")
    await manager.save_context_state(
        SessionContextState(
            session_id=node.session_id, session_key=node.session_key, state_kind="s"
        )
    )
    renewed, _ = await manager.apply_intent(node.session_key, "reset_same_key")
    renewed.updated_at = 5
    await storage.upsert_session(renewed)

    assert await retention.prune_stale(storage.uow, 10) == 1
    assert await manager.get_context_states(node.session_key, valid_only=False) == []


async def test_prune_works_across_batches(manager: SessionManager, storage: SessionStorage) -> None:
    stale = [
        await _session(manager, storage, f"agent:main:stale{i}", updated_at=100 + i)
        for i in range(5)
    ]
    fresh = [
        await _session(manager, storage, f"agent:main:fresh{i}", updated_at=5_000 + i)
        for i in range(2)
    ]

    assert await retention.prune_stale(storage.uow, 1_000, batch_size=2) == 5

    for node in stale:
        await _assert_gone(manager, storage, node)
    for node in fresh:
        await _assert_intact(manager, storage, node)


async def test_prune_with_nothing_stale_returns_zero(storage: SessionStorage) -> None:
    assert await retention.prune_stale(storage.uow, 1_000, batch_size=2) == 0


async def test_prune_refuses_a_negative_age(manager: SessionManager) -> None:
    await manager.create("agent:main:kept")

    with pytest.raises(ValueError):
        await manager.prune_stale(max_age_ms=-1)

    assert await manager.storage.count_sessions() == 1


# -- cap_entries ---------------------------------------------------------------------------


async def test_cap_deletes_down_to_the_limit(manager: SessionManager) -> None:
    for index in range(10):
        await manager.create(f"agent:main:direct:u{index}")

    assert await manager.cap_entries(max_entries=5) == 5
    assert await manager.storage.count_sessions() == 5


CapCall = Callable[[SessionManager, SessionStorage, int], Awaitable[int]]


async def _cap_via_manager(manager: SessionManager, storage: SessionStorage, limit: int) -> int:
    return await manager.cap_entries(limit)


async def _cap_in_small_batches(
    manager: SessionManager, storage: SessionStorage, limit: int
) -> int:
    return await retention.cap_sessions(storage.uow, limit, batch_size=2)


@pytest.mark.parametrize("cap", [_cap_via_manager, _cap_in_small_batches], ids=["one", "batches"])
async def test_cap_keeps_the_newest_in_a_deterministic_order(
    manager: SessionManager, storage: SessionStorage, cap: CapCall
) -> None:
    """Oldest updated_at goes first; ties fall to created_at, then to the key (so "b",
    created later, outlives "a" and "y" although its key sorts before "d" and "y")."""
    gone = [
        await _session(manager, storage, "agent:main:c", updated_at=50, created_at=90),
        await _session(manager, storage, "agent:main:y", updated_at=100, created_at=10),
        await _session(manager, storage, "agent:main:a", updated_at=100, created_at=20),
    ]
    kept = [
        await _session(manager, storage, "agent:main:d", updated_at=100, created_at=20),
        await _session(manager, storage, "agent:main:b", updated_at=100, created_at=30),
        await _session(manager, storage, "agent:main:e", updated_at=200, created_at=1),
    ]

    assert await cap(manager, storage, 3) == 3

    for node in gone:
        await _assert_gone(manager, storage, node)
    for node in kept:
        await _assert_intact(manager, storage, node)


async def test_cap_cascades_to_owned_rows(manager: SessionManager, storage: SessionStorage) -> None:
    nodes = [
        await _session(manager, storage, f"agent:main:direct:u{i}", updated_at=1_000 + i)
        for i in range(3)
    ]

    assert await manager.cap_entries(max_entries=1) == 2

    for node in nodes[:2]:
        await _assert_gone(manager, storage, node)
    await _assert_intact(manager, storage, nodes[2])


async def test_cap_at_or_under_the_limit_deletes_nothing(manager: SessionManager) -> None:
    for index in range(3):
        await manager.create(f"agent:main:s{index}")

    for limit in (3, 4, 500):
        assert await manager.cap_entries(limit) == 0
    assert await manager.storage.count_sessions() == 3


async def test_cap_of_zero_empties_the_store(
    manager: SessionManager, storage: SessionStorage
) -> None:
    nodes = [
        await _session(manager, storage, f"agent:main:z{i}", updated_at=10 + i) for i in range(3)
    ]

    assert await retention.cap_sessions(storage.uow, 0, batch_size=2) == 3

    for node in nodes:
        await _assert_gone(manager, storage, node)


async def test_cap_refuses_a_negative_limit(manager: SessionManager) -> None:
    await manager.create("agent:main:kept")

    with pytest.raises(ValueError):
        await manager.cap_entries(-1)

    assert await manager.storage.count_sessions() == 1
