"""Revision 0007: the archive's counts kept by the database (docs/semantics.md#pages).

The upgrade fills ``canonical_archive_counts`` from the archive as it finds it (rows written
below 0007 without any trigger, both legacy fixtures), the downgrade removes exactly the
table, its triggers and the function, the revision is recorded expand-only and a replay
recomputes the counts. What keeps them exact afterwards is in
tests/manager/test_archive_counts.py."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated
from tests.helpers import (
    ARCHIVE_COUNTS,
    ARCHIVE_GROUPS,
    assert_archive_counts_exact,
    sorted_groups,
)

from .raw import fetch, raw_state, run_sql, version_rows
from .test_legacy_adoption import _Backend
from .test_legacy_fixtures import FIXTURES, LEGACY_DIR

TABLE = "canonical_archive_counts"
KEY = "agent:main:x"


async def _compacted(storage: SessionStorage, key: str = KEY) -> str:
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(key)
    for n in range(5):
        await manager.append_message(key, "user", f"m{n}")
    kept = [{"role": "user", "content": "m4"}]
    assert await manager.persist_compaction_result(key, "summary", kept)
    node = await manager.get_session(key)
    assert node is not None
    return node.session_id


async def _exact(backend: _Backend, target: str) -> list[tuple[Any, ...]]:
    """The counts equal a fresh ``GROUP BY`` of the archive (raw driver); the counts."""
    counted = sorted_groups(await fetch(backend, target, ARCHIVE_COUNTS))
    assert counted == sorted_groups(await fetch(backend, target, ARCHIVE_GROUPS))
    return counted


def _schema(state: dict[str, Any]) -> dict[str, Any]:
    """A raw state without its rows (and SQLite's id counters)."""
    return {k: v for k, v in state.items() if k not in ("rows", "sqlite_sequence")}


def _ours(state: dict[str, Any]) -> set[str]:
    """The names in a raw state that revision 0007 owns."""
    names = {entry[1] for entry in state.get("objects", [])}  # SQLite: (type, name, ...)
    for kind in ("indexes", "triggers", "columns"):  # PostgreSQL: the name first
        names.update(entry[0] for entry in state.get(kind, []))
    names.update(state.get("functions", []))
    return {name for name in names if "canonical_archive_counts" in name}


@pytest.mark.plain_layout
async def test_upgrade_backfills_and_downgrade_removes_exactly_what_it_added(
    backend: _Backend, database: str
) -> None:
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0007'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]
    async with SessionStorage(database) as storage:
        session_id = await _compacted(storage)
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0006")
    assert await version_rows(backend, database) == ["0006"]
    below = await raw_state(backend, database)
    assert _ours(below) == set()

    # Archive writes below 0007 (no triggers): rows of no compaction, unlinked rows, another
    # session, a deletion and a row moved to another compaction.
    archived = (
        "INSERT INTO compacted_transcript_entries (session_id, session_key, compaction_id, "
        "original_entry_id, message_id, role, created_at, archived_at) VALUES "
    )
    await run_sql(
        backend,
        database,
        [
            archived + f"('{session_id}', '{KEY}', NULL, NULL, 'n1', 'user', 1, 1)",
            archived + "('other', 'agent:main:other', 'c9', 5, 'n2', 'user', 1, 1)",
            archived + "('other', 'agent:main:other', 'c9', NULL, 'n3', 'user', 2, 1)",
            "DELETE FROM compacted_transcript_entries WHERE id = "
            f"(SELECT min(id) FROM compacted_transcript_entries WHERE session_id = '{session_id}')",
            "UPDATE compacted_transcript_entries SET compaction_id = 'moved' WHERE id = "
            f"(SELECT max(id) FROM compacted_transcript_entries WHERE session_id = '{session_id}' "
            "AND compaction_id IS NOT NULL)",
        ],
    )
    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()
    counted = await _exact(backend, database)
    assert ("other", "c9", 2, 1) in counted and (session_id, None, 1, 1) in counted
    assert (session_id, "moved", 1, 0) in counted
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        assert not await manager.is_canonical_transcript_complete(KEY)
        # The triggers work from the upgrade on.
        await manager.reset(KEY)
        await _compacted(storage, "agent:main:after")
        await assert_archive_counts_exact(storage)

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0006")
    assert _schema(await raw_state(backend, database)) == _schema(below)


@pytest.mark.plain_layout
async def test_replaying_the_revision_recomputes_the_counts(
    backend: _Backend, database: str
) -> None:
    """A database whose version row was lost replays 0007: the table is kept, the triggers
    are made again (once each), the counts recomputed; a downgrade finding nothing passes."""
    async with SessionStorage(database) as storage:
        await _compacted(storage)
    expected = await _exact(backend, database)
    assert expected
    await run_sql(backend, database, [f"UPDATE {TABLE} SET archived = 99"])  # made wrong
    async with unmigrated(database) as storage:
        await migrate.stamp(storage.engine, "0006")
        await migrate.upgrade(storage.engine, "head")
    assert await _exact(backend, database) == expected
    assert len(_ours(await raw_state(backend, database))) == (9 if backend.is_postgres else 6)

    async with unmigrated(database) as storage:  # the later revisions' downgrades first
        await migrate.downgrade(storage.engine, "0007")
    await run_sql(backend, database, [f"DROP TABLE {TABLE}"])
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0006")
    assert await version_rows(backend, database) == ["0006"]
    assert _ours(await raw_state(backend, database)) == set()


@pytest.mark.parametrize("name", FIXTURES)
async def test_legacy_files_are_counted_on_adoption(name: str, tmp_path: Path) -> None:
    """Both files the older store wrote: the counts match their archive after adoption,
    every generation reads as the rows say, and the older store's own writes into the
    adopted file (plain SQL through stdlib ``sqlite3``) keep them exact."""
    copy = tmp_path / name
    shutil.copyfile(LEGACY_DIR / name, copy)
    async with SessionStorage(str(copy)) as storage:
        counted = await assert_archive_counts_exact(storage)
        assert sum(archived for _, _, archived, _ in counted) > 0
    with contextlib.closing(sqlite3.connect(copy)) as db, db:
        (session_id, key) = db.execute(
            "SELECT session_id, session_key FROM compacted_transcript_entries LIMIT 1"
        ).fetchone()
        db.execute(
            "INSERT INTO compacted_transcript_entries (session_id, session_key, compaction_id, "
            "original_entry_id, message_id, role, created_at, archived_at) "
            "VALUES (?, ?, 'legacy-late', NULL, 'late', 'user', 1, 1)",
            (session_id, key),
        )
        db.execute(
            "DELETE FROM compacted_transcript_entries WHERE id = (SELECT min(id) FROM "
            "compacted_transcript_entries WHERE session_id = ? AND compaction_id IS NOT NULL "
            "AND compaction_id <> 'legacy-late')",
            (session_id,),
        )
    async with SessionStorage(str(copy)) as storage:
        counted = await assert_archive_counts_exact(storage)
        assert (session_id, "legacy-late", 1, 1) in counted
        assert not await storage.is_canonical_transcript_complete(session_id)
