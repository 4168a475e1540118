"""Scoped state (issue 28, item 5): ``get_scope_state`` / ``update_scope_state`` for the
``app`` and ``user`` scopes, in a table of their own, with the session state's revision
rule; no session involved, and nothing of it in listings, stats, retention or export."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import ScopeState, SessionManager, StaleStateError
from opensquilla.session.db.repos.states import scope_states
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.sync import SyncSessionManager
from opensquilla.session.transfer import export_to_file


async def _scope_rows(manager: SessionManager) -> list[tuple[Any, ...]]:
    async with manager.storage.engine.connect() as conn:
        query = sa.select(scope_states).order_by(scope_states.c.scope, scope_states.c.scope_id)
        return [tuple(row) for row in await conn.execute(query)]


async def test_scope_state_works_without_any_session(manager: SessionManager) -> None:
    assert await manager.get_scope_state("app", "my-app") == ScopeState(
        scope="app", scope_id="my-app", state={}, revision=0, updated_at=None
    )
    assert await manager.update_scope_state("app", "my-app", {"theme": "dark", "n": 1}) == 1
    assert await manager.update_scope_state("app", "my-app", {"n": 2}, 1, remove=["theme"]) == 2
    assert await manager.update_scope_state("user", "my-app", {"other": True}) == 1
    app = await manager.get_scope_state("app", "my-app")
    assert (app.state, app.revision) == ({"n": 2}, 2) and app.updated_at is not None
    user = await manager.get_scope_state("user", "my-app")
    assert (user.state, user.revision) == ({"other": True}, 1)
    # Scope ids are taken as given: no key canonicalisation, case and spaces kept.
    await manager.update_scope_state("user", " App:Main:U ", {"k": "v"})
    assert (await manager.get_scope_state("user", "app:main:u")).revision == 0
    assert (await manager.get_scope_state("user", " App:Main:U ")).state == {"k": "v"}
    assert await manager.list_sessions() == []


async def test_a_scope_compare_and_set_refuses_a_moved_revision(manager: SessionManager) -> None:
    await manager.update_scope_state("user", "u1", {"a": 1}, expected_revision=0)
    before = await _scope_rows(manager)
    with pytest.raises(StaleStateError) as raised:
        await manager.update_scope_state("user", "u1", {"a": 2}, expected_revision=0)
    assert raised.value.target == "user scope 'u1'"
    assert (raised.value.expected_revision, raised.value.actual_revision) == (0, 1)
    with pytest.raises(StaleStateError):  # a scope never written is at 0
        await manager.update_scope_state("app", "never", {"a": 2}, expected_revision=1)
    assert await _scope_rows(manager) == before


async def test_two_concurrent_scope_compare_and_sets_exactly_one_wins(
    manager: SessionManager,
) -> None:
    results = await asyncio.gather(
        *(manager.update_scope_state("app", "race", {"n": n}, 0) for n in range(4)),
        return_exceptions=True,
    )
    assert sorted(map(str, (type(r).__name__ for r in results))) == [
        "StaleStateError",
        "StaleStateError",
        "StaleStateError",
        "int",
    ]
    assert (await manager.get_scope_state("app", "race")).revision == 1


@pytest.mark.parametrize(
    ("scope", "scope_id", "message"),
    [
        ("session", "x", "scope must be one of 'app', 'user'"),
        ("APP", "x", "scope must be one of"),
        (None, "x", "scope must be one of"),
        (1, "x", "scope must be one of"),
        ("app", "", "scope_id"),
        ("app", "a\x00b", "scope_id"),
        ("app", "\ud800", "scope_id"),
        ("app", 7, "scope_id"),
        ("app", None, "scope_id"),
        ("app", "x" * 513, "scope_id"),
    ],
)
async def test_bad_scopes_are_refused_with_nothing_written(
    manager: SessionManager, scope: Any, scope_id: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await manager.update_scope_state(scope, scope_id, {"a": 1})
    with pytest.raises(InvalidInputError, match=message):
        await manager.get_scope_state(scope, scope_id)
    assert await _scope_rows(manager) == []


async def test_bad_changes_are_refused_for_a_scope_too(manager: SessionManager) -> None:
    hostile: list[Any] = [{1: 2}, {"a": float("inf")}, "not a dict", {"a": object()}]
    for changes in hostile:
        with pytest.raises(InvalidInputError):
            await manager.update_scope_state("app", "x", changes)
    assert await _scope_rows(manager) == []


async def test_listings_stats_retention_and_export_never_see_scopes(
    manager: SessionManager, tmp_path: Path
) -> None:
    await manager.update_scope_state("app", "agent:main:looks-like-a-key", {"a": 1})
    await manager.update_scope_state("user", "u1", {"b": 2})
    assert await manager.list_sessions() == []
    assert (await manager.list_sessions_page(limit=10)).sessions == []
    assert await manager.count_sessions() == 0
    stats = await manager.stats()
    assert stats.counts.sessions == 0
    assert await manager.prune_stale(0) == 0
    assert await manager.cap_entries(0) == 0
    assert (await manager.preview_prune_stale(0)).sessions == ()
    path = tmp_path / "export.jsonl"
    summary = await export_to_file(manager.storage, path)
    assert summary.sessions == 0
    assert "u1" not in path.read_text(encoding="utf-8")
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == [
        "header",
        "footer",
    ]
    # Still there after the retention calls.
    assert len(await _scope_rows(manager)) == 2


def test_the_sync_facade_has_the_state_calls(database: str) -> None:
    # The facade's methods are generated from the async ones (not visible to mypy).
    sessions: Any
    with SyncSessionManager(database, inject_time_prefix=False) as sessions:
        sessions.create("agent:main:sync")
        assert sessions.update_state("agent:main:sync", {"a": 1}) == 1
        assert sessions.get_state("agent:main:sync").state == {"a": 1}
        assert sessions.update_scope_state("app", "sync", {"b": 2}, 0) == 1
        assert sessions.get_scope_state("app", "sync").revision == 1
        with pytest.raises(StaleStateError):
            sessions.update_state("agent:main:sync", {}, expected_revision=0)
