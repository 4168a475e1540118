"""Revision 0005: the ``compaction_leases`` table (docs/semantics.md#compaction-lease).

Coordination state beside the five tables: created by the upgrade, dropped by the
downgrade, ignored by the drift check, recorded expand-only."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated

from .raw import fetch, version_rows
from .test_legacy_adoption import _Backend

TABLE = "compaction_leases"


async def _has_table(backend: _Backend, target: str) -> bool:
    if backend.is_postgres:
        rows = await fetch(backend, target, f"SELECT to_regclass('public.{TABLE}') IS NOT NULL")
        return bool(rows[0][0])
    rows = await fetch(
        backend, target, f"SELECT count(*) FROM sqlite_master WHERE name = '{TABLE}'"
    )
    return bool(rows[0][0])


@pytest.mark.plain_layout
async def test_downgrade_drops_the_lease_table_and_upgrade_restores_it(
    backend: _Backend, database: str
) -> None:
    async with SessionStorage(database) as storage:
        assert await storage.acquire_compaction_lease("agent:main:x", "sid", "f", "h", 1000)
    assert await _has_table(backend, database)
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0005'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0004")
    assert not await _has_table(backend, database)
    assert await version_rows(backend, database) == ["0004"]

    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()
    async with SessionStorage(database) as storage:
        assert await storage.read_compaction_lease("agent:main:x") is None
        assert await storage.acquire_compaction_lease("agent:main:x", "sid", "f", "h", 1000)
