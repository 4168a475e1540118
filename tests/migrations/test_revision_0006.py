"""Revision 0006: the ``session_archives`` table (docs/semantics.md#reset-archive).

The archive kept in the database, beside the five tables: created by the upgrade, dropped
by the downgrade, ignored by the drift check, recorded expand-only, and replayed safely
(a database whose version row was lost upgrades again without touching its archives)."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated

from .raw import fetch, run_sql, version_rows
from .test_legacy_adoption import _Backend

TABLE = "session_archives"
KEY = "agent:main:x"


async def _has_table(backend: _Backend, target: str) -> bool:
    if backend.is_postgres:
        rows = await fetch(backend, target, f"SELECT to_regclass('public.{TABLE}') IS NOT NULL")
        return bool(rows[0][0])
    rows = await fetch(
        backend, target, f"SELECT count(*) FROM sqlite_master WHERE name = '{TABLE}'"
    )
    return bool(rows[0][0])


async def _archive_once(target: str) -> int:
    async with SessionStorage(target, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.get_or_create(KEY)
        await manager.append_message(KEY, "user", "kept in the database")
        report = await manager.reset_with_report(KEY)
    assert report.archive_id is not None
    return report.archive_id


@pytest.mark.plain_layout
async def test_downgrade_drops_the_archive_table_and_upgrade_restores_it(
    backend: _Backend, database: str
) -> None:
    await _archive_once(database)
    assert await _has_table(backend, database)
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0006'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0005")
    assert not await _has_table(backend, database)
    assert await version_rows(backend, database) == ["0005"]

    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()
    async with SessionStorage(database) as storage:
        assert await storage.list_session_archives() == []
    assert await _archive_once(database) == 1  # a new table: ids start again


@pytest.mark.plain_layout
async def test_replaying_the_revision_keeps_the_archives(backend: _Backend, database: str) -> None:
    """Idempotent both ways: an upgrade finding the table leaves it (and its rows) alone,
    a downgrade finding none does nothing."""
    first = await _archive_once(database)
    async with unmigrated(database) as storage:
        await migrate.stamp(storage.engine, "0005")  # the version row lost, the table kept
        await migrate.upgrade(storage.engine, "head")
    async with SessionStorage(database) as storage:
        assert [a.id for a in await storage.list_session_archives()] == [first]

    await run_sql(backend, database, [f"DROP TABLE {TABLE}"])
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0005")
    assert await version_rows(backend, database) == ["0005"]
    assert not await _has_table(backend, database)
