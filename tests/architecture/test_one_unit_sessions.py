"""Issue 27, sessions: every public manager and storage call of the session domain
(lifecycle, listing, reset, branch, retention, reset archives, stats) opens exactly one unit
of work when warmed (the generation cache already holding the key), or the documented
number: a get-or-create that creates reads first (2), a reset through ``apply_intent`` reads
the row first (2), the file-backed archive calls touch no database (0).

A call's units of work are its pool checkouts (``conftest.CheckoutCounter``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.models import SessionIntent, SessionListCursor, SessionNode

from .conftest import CheckoutCounter

KEY = "agent:main:one-unit"
CHILD = "agent:main:one-unit-child"
OTHER = "agent:main:one-unit-other"


@dataclass
class World:
    manager: SessionManager
    storage: SessionStorage
    node: SessionNode
    message_id: str
    archive_id: int


Call = Callable[[World], Awaitable[Any]]


async def _world(manager: SessionManager, storage: SessionStorage) -> World:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "one")
    await manager.append_message(KEY, "assistant", "two")
    entries = await manager.get_transcript(KEY)
    async with storage.uow.write() as tx:  # a database archive row for the archive reads
        archive_id = await tx.archives.add(
            session_key=KEY,
            session_id=node.session_id,
            epoch=0,
            reason="reset",
            created_at=1,
            document="{}",
        )
    await manager.get_session(KEY)  # warm: the cache holds the key
    return World(manager, storage, node, entries[-1].message_id, archive_id)


# name -> (call, units of work)
MANAGER_CALLS: dict[str, tuple[Call, int]] = {
    "create": (lambda w: w.manager.create(OTHER), 1),
    "get_session": (lambda w: w.manager.get_session(KEY), 1),
    "get_or_create (existing)": (lambda w: w.manager.get_or_create(KEY), 1),
    "get_or_create (new: read, then create)": (lambda w: w.manager.get_or_create(OTHER), 2),
    "apply_intent (continue)": (
        lambda w: w.manager.apply_intent(KEY, SessionIntent.CONTINUE),
        1,
    ),
    "apply_intent (reset: read, then reset)": (
        lambda w: w.manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY),
        2,
    ),
    "list_sessions": (lambda w: w.manager.list_sessions(agent_id="main", spawned_by=KEY), 1),
    "list_sessions_page": (lambda w: w.manager.list_sessions_page(limit=1), 1),
    "count_sessions": (lambda w: w.manager.count_sessions(), 1),
    "delete": (lambda w: w.manager.delete(KEY), 1),
    "reset": (lambda w: w.manager.reset(KEY), 1),
    "reset_with_report": (lambda w: w.manager.reset_with_report(KEY), 1),
    "resume": (lambda w: w.manager.resume(KEY), 1),
    "update": (lambda w: w.manager.update(KEY, label="x", spawned_by=OTHER), 1),
    "finish": (lambda w: w.manager.finish(KEY), 1),
    "archive": (lambda w: w.manager.archive(KEY), 1),
    "record_usage": (lambda w: w.manager.record_usage(KEY, input_tokens=3, output_tokens=1), 1),
    "record_usage (cold: the read in its transaction)": (
        lambda w: SessionManager(w.storage).record_usage(
            KEY, cost_usd=0.5, cost_source="provider_billed"
        ),
        1,
    ),
    "branch": (lambda w: w.manager.branch(KEY, CHILD), 1),
    "branch (full fork)": (lambda w: w.manager.branch(KEY, CHILD, fork_transcript=True), 1),
    "branch (prefix fork)": (
        lambda w: w.manager.branch(
            KEY, CHILD, fork_transcript=True, fork_before_message_id=w.message_id
        ),
        1,
    ),
    "prune_stale": (lambda w: w.manager.prune_stale(10**9), 1),
    "cap_entries": (lambda w: w.manager.cap_entries(0), 1),
    "preview_reset": (lambda w: w.manager.preview_reset(KEY), 1),
    "preview_prune_stale": (lambda w: w.manager.preview_prune_stale(0), 1),
    "preview_cap_entries": (lambda w: w.manager.preview_cap_entries(0), 1),
    "stats": (lambda w: w.manager.stats(), 1),
    "archive_report (files only)": (lambda w: w.manager.archive_report(), 0),
    "capture_session_archive": (lambda w: w.manager.capture_session_archive(w.node), 1),
    "write_session_archive (a file)": (
        lambda w: w.manager.write_session_archive(w.node, [], []),
        0,
    ),
    "list_session_archives": (lambda w: w.manager.list_session_archives(KEY), 1),
    "read_session_archive": (lambda w: w.manager.read_session_archive(w.archive_id), 1),
}

STORAGE_CALLS: dict[str, tuple[Call, int]] = {
    "upsert_session": (lambda w: w.storage.upsert_session(w.node), 1),
    "upsert_session (generation-checked)": (
        lambda w: w.storage.upsert_session(w.node, expected_session_id=w.node.session_id),
        1,
    ),
    "create_session": (lambda w: w.storage.create_session(SessionNode(session_key=OTHER)), 1),
    "get_session": (lambda w: w.storage.get_session(KEY), 1),
    "list_sessions": (lambda w: w.storage.list_sessions(parent_session_key=KEY), 1),
    "list_sessions_page": (
        lambda w: w.storage.list_sessions_page(
            limit=1, cursor=SessionListCursor(2**40, 2**40, KEY), agent_id="main"
        ),
        1,
    ),
    "count_sessions": (lambda w: w.storage.count_sessions(), 1),
    "delete_session": (lambda w: w.storage.delete_session(KEY), 1),
    "get_epoch": (lambda w: w.storage.get_epoch(KEY), 1),
    "increment_epoch": (lambda w: w.storage.increment_epoch(KEY), 1),
    "update_session_fields": (lambda w: w.storage.update_session_fields(KEY, {"label": "y"}), 1),
    "finish_session": (lambda w: w.storage.finish_session(KEY, "done", 5), 1),
    "list_session_archives": (lambda w: w.storage.list_session_archives(limit=3), 1),
    "read_session_archive": (lambda w: w.storage.read_session_archive(w.archive_id), 1),
}

# The public calls of this domain: each must have a case above.
MANAGER_DOMAIN = {
    "create",
    "get_session",
    "get_or_create",
    "apply_intent",
    "list_sessions",
    "list_sessions_page",
    "count_sessions",
    "delete",
    "reset",
    "reset_with_report",
    "resume",
    "update",
    "finish",
    "archive",
    "record_usage",
    "branch",
    "prune_stale",
    "cap_entries",
    "preview_reset",
    "preview_prune_stale",
    "preview_cap_entries",
    "stats",
    "archive_report",
    "capture_session_archive",
    "write_session_archive",
    "list_session_archives",
    "read_session_archive",
}
STORAGE_DOMAIN = {
    "upsert_session",
    "create_session",
    "get_session",
    "list_sessions",
    "list_sessions_page",
    "count_sessions",
    "delete_session",
    "get_epoch",
    "increment_epoch",
    "update_session_fields",
    "finish_session",
    "list_session_archives",
    "read_session_archive",
}


def _method(case: str) -> str:
    return case.split(" (")[0]


def test_every_call_of_the_domain_has_a_case() -> None:
    assert {_method(case) for case in MANAGER_CALLS} == MANAGER_DOMAIN
    assert {_method(case) for case in STORAGE_CALLS} == STORAGE_DOMAIN
    for name in MANAGER_DOMAIN:
        assert callable(getattr(SessionManager, name))
    for name in STORAGE_DOMAIN:
        assert callable(getattr(SessionStorage, name))


async def _units(world: World, checkouts: CheckoutCounter, call: Call) -> int:
    with checkouts.counting():
        await call(world)
    return checkouts.count


CASES = {f"manager.{case}": MANAGER_CALLS[case] for case in MANAGER_CALLS} | {
    f"storage.{case}": STORAGE_CALLS[case] for case in STORAGE_CALLS
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_call_opens_its_units_of_work(
    case: str, manager: SessionManager, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    call, units = CASES[case]
    world = await _world(manager, storage)
    assert await _units(world, checkouts, call) == units


async def test_a_database_archive_write_opens_one_unit_of_work(database: str) -> None:
    """With ``archive_store="database"`` the archive is one row, written in one unit."""
    async with SessionStorage(database, archive_store="database") as other:
        manager = SessionManager(other)
        world = await _world(manager, other)
        counter = CheckoutCounter(other)
        with counter.counting():
            await manager.write_session_archive(world.node, [], [])  # nothing to keep: 0
        assert counter.count == 0
        entries = await manager.get_transcript(KEY)
        with counter.counting():
            await manager.write_session_archive(world.node, entries, [])
        assert counter.count == 1
