"""Revision 0008: the ``transcript_appends`` view and its trigger on SQLite (the one-statement
append, docs/semantics.md#fencing); nothing on PostgreSQL.

Only objects are added (the older store's tables and triggers keep their DDL), the view
lists exactly the columns the append inserts, the revision is recorded expand-only, and the
downgrade removes exactly the view and the trigger."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.db.repos import fenced_append
from opensquilla.session.usecases.overview import unmigrated
from tests.helpers import unmigrated_storage

from .raw import fetch, raw_state, run_sql, version_rows
from .test_legacy_adoption import _Backend

VIEW, TRIGGER = "transcript_appends", "transcript_appends_insert"


def _objects(target: str) -> set[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(target)) as db:
        return {
            (kind, name)
            for kind, name in db.execute(
                "SELECT type, name FROM sqlite_master WHERE name LIKE 'transcript_appends%'"
            )
        }


def _columns(target: str, name: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(target)) as db:
        return [row[1] for row in db.execute(f"PRAGMA table_info({name})")]


async def test_head_has_the_view_and_its_trigger_on_sqlite_only(
    backend: _Backend, database: str
) -> None:
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0008'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]
    if backend.is_postgres:
        rows = await fetch(backend, database, f"SELECT to_regclass('public.{VIEW}')")
        assert rows[0][0] is None
        return
    assert _objects(database) == {("view", VIEW), ("trigger", TRIGGER)}
    entry_columns = [c for c in _columns(database, "transcript_entries") if c != "id"]
    assert entry_columns == [c.name for c in fenced_append.INSERT_COLUMNS]
    assert _columns(database, VIEW) == entry_columns + list(fenced_append.FENCE_COLUMNS)
    assert [c.name for c in fenced_append.APPENDS_VIEW.columns] == _columns(database, VIEW)


@pytest.mark.plain_layout
async def test_downgrade_to_0007_removes_exactly_the_view_and_trigger(
    backend: _Backend, database: str
) -> None:
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:v")
        await manager.append_message("agent:main:v", "user", "kept", token_count=3)
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0007")
    at_0007 = await raw_state(backend, database)
    assert await version_rows(backend, database) == ["0007"]
    if not backend.is_postgres:
        assert _objects(database) == set()

    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
        assert status.at_head and status.drift == ()
        await migrate.downgrade(storage.engine, "0007")
    assert await raw_state(backend, database) == at_0007

    async with SessionStorage(database) as storage:  # back at head, appending through it
        manager = SessionManager(storage, inject_time_prefix=False)
        entry = await manager.append_message("agent:main:v", "user", "again", token_count=4)
        assert [e.id for e in await manager.get_transcript("agent:main:v")][-1] == entry.id
        node = await manager.get_session("agent:main:v")
        assert node is not None and node.total_tokens == 7


async def test_replaying_the_revision_changes_nothing(backend: _Backend, database: str) -> None:
    """A database whose version row says 0007 while the objects are there (a lost version
    row) upgrades again without error and without a second copy."""
    before: dict[str, Any] = await raw_state(backend, database)
    async with unmigrated(database) as storage:
        await migrate.stamp(storage.engine, "0007")
        await migrate.upgrade(storage.engine, "head")
    assert await raw_state(backend, database) == before


async def test_a_store_on_a_database_without_the_view_appends_in_three_statements(
    backend: _Backend, database: str
) -> None:
    """A store opened without migrating, on a database without the view (its objects
    dropped, as at 0007; later revisions' columns kept, which the store writes): the append
    looks for the view, finds none, and appends in one write transaction (same fence, same
    counters)."""
    if not backend.is_postgres:
        await run_sql(backend, database, [f"DROP TRIGGER {TRIGGER}", f"DROP VIEW {VIEW}"])
    async with unmigrated_storage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        node = await manager.create("agent:main:old")
        seen: list[str] = []
        event.listen(
            storage.engine.sync_engine,
            "before_cursor_execute",
            lambda _c, _k, statement, *_: seen.append(statement),
        )
        entry = await manager.append_message("agent:main:old", "user", "three", token_count=6)
        again = await manager.append_message("agent:main:old", "user", "more", token_count=1)
        if not backend.is_postgres:
            appends = [s.split()[0] for s in seen if "INTO transcript_" in s or "UPDATE" in s]
            assert appends == ["UPDATE", "INSERT"] * 2
        rows = await manager.get_transcript("agent:main:old")
        assert [e.id for e in rows] == [entry.id, again.id]
        after = await manager.get_session("agent:main:old")
        assert after is not None and after.total_tokens == 7 and after.epoch == node.epoch
