"""Revision 0004: the FTS5 indexes' pending data is bounded at 64 KiB on SQLite.

The setting lives in each index's ``*_config`` table, so every connection (the older
store's too) applies it; on PostgreSQL the revision changes nothing. Downgrade takes the
rows out again."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated

from .raw import raw_state, version_rows
from .test_legacy_adoption import _Backend

INDEXES = ("transcript_fts", "compacted_transcript_fts")


def _settings(target: str) -> dict[str, dict[str, Any]]:
    """Each FTS index's settings besides FTS5's own format ``version`` row."""
    with contextlib.closing(sqlite3.connect(target)) as db:
        return {
            index: dict(db.execute(f"SELECT k, v FROM {index}_config WHERE k <> 'version'"))
            for index in INDEXES
        }


def _without_fts_internals(state: dict[str, Any]) -> dict[str, Any]:
    """A raw state without the rows FTS5 keeps for itself (its structure record counts
    every configuration change)."""
    rows = {name: r for name, r in state["rows"].items() if not name.endswith("_data")}
    return {**state, "rows": rows}


async def test_head_bounds_the_pending_data_of_both_indexes(
    backend: _Backend, database: str
) -> None:
    assert await version_rows(backend, database) == list(migrate.head_revisions())
    if backend.is_postgres:
        return  # nothing to bound: see the round trip below
    assert _settings(database) == {index: {"hashsize": 65536} for index in INDEXES}


@pytest.mark.plain_layout
async def test_downgrade_to_0003_restores_the_0003_schema_and_rows(
    backend: _Backend, database: str
) -> None:
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:bound")
        await manager.append_message("agent:main:bound", "user", "kept across the round trip")
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0003")
    at_0003 = await raw_state(backend, database)
    assert await version_rows(backend, database) == ["0003"]
    if not backend.is_postgres:
        assert _settings(database) == {index: {} for index in INDEXES}

    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        await migrate.downgrade(storage.engine, "0003")
    assert _without_fts_internals(await raw_state(backend, database)) == _without_fts_internals(
        at_0003
    )

    async with SessionStorage(database) as storage:  # back at head, still searchable
        [hit] = await storage.search_transcript("round")
        assert hit["session_key"] == "agent:main:bound"
