"""Revision 0010: every key of a session's rows leads with ``session_key`` on PostgreSQL
(docs/scaling.md#keys-and-statements); the archive's counts carry the key on both backends.

The upgrade keeps every row (orphan child rows, whose session row is gone, included), leaves
no staged index behind, rebuilds an invalid leftover of a failed concurrent build, and is a
no-op when replayed; the downgrade gives back exactly revision 0009's schema."""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.db.schema_compare import POSTGRES_PRIMARY_KEYS, POSTGRES_UNIQUE_INDEXES
from opensquilla.session.usecases.overview import unmigrated
from tests.helpers import ARCHIVE_GROUPS, sorted_groups

from .raw import fetch, raw_state, run_sql, version_rows
from .test_legacy_adoption import _Backend

# Plain databases only: tests(postgres-partitioned) deselects them (tests/conftest.py).
pytestmark = pytest.mark.plain_layout

KEY = "agent:main:keys"
ORPHAN_KEY = "agent:main:orphan"
KEYED_COUNTS = (
    "SELECT session_key, session_id, compaction_id, archived, unlinked "
    "FROM canonical_archive_counts"
)
PRIMARY_KEYS = (
    "SELECT c.conrelid::regclass::text, array_to_string(array(SELECT a.attname FROM "
    "unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a ON "
    "a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n), ',') "
    "FROM pg_constraint c WHERE c.contype = 'p' AND c.connamespace = 'public'::regnamespace"
)
STAGED = "SELECT relname FROM pg_class WHERE relname LIKE '%\\_next'"


async def _populated(storage: SessionStorage) -> str:
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(KEY)
    for n in range(5):
        await manager.append_message(KEY, "user", f"m{n}")
    kept = [{"role": "user", "content": "m4"}]
    assert await manager.persist_compaction_result(KEY, "summary", kept)
    node = await manager.get_session(KEY)
    assert node is not None
    return node.session_id


def _schema(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in ("rows", "sqlite_sequence")}


async def _row_counts(backend: _Backend, target: str) -> dict[str, int]:
    tables = (
        "sessions",
        "transcript_entries",
        "compacted_transcript_entries",
        "session_summaries",
        "session_archives",
    )
    counts = {}
    for table in tables:
        ((count,),) = await fetch(backend, target, f"SELECT count(*) FROM {table}")
        counts[table] = int(count)
    return counts


async def _keyed_counts_exact(backend: _Backend, target: str) -> list[tuple[Any, ...]]:
    """The keyed counts, each group's key that of its archived rows; the rows."""
    keyed = await fetch(backend, target, KEYED_COUNTS)
    groups = sorted_groups(await fetch(backend, target, ARCHIVE_GROUPS))
    assert sorted_groups(row[1:] for row in keyed) == groups
    keys = await fetch(
        backend,
        target,
        "SELECT DISTINCT session_id, session_key FROM compacted_transcript_entries",
    )
    owner = dict(keys)
    assert all(owner[row[1]] == row[0] for row in keyed)
    return [tuple(row) for row in keyed]


async def test_upgrade_keeps_every_row_and_downgrade_gives_back_0009(
    backend: _Backend, database: str
) -> None:
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0010'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]
    async with SessionStorage(database) as storage:
        await _populated(storage)
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0009")
    below = await raw_state(backend, database)
    # Orphan child rows (their session row gone, as a legacy database may hold): kept.
    await run_sql(
        backend,
        database,
        [
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
            f"created_at) VALUES ('orphan-sid', '{ORPHAN_KEY}', 'o1', 'user', 1)",
            "INSERT INTO compacted_transcript_entries (session_id, session_key, compaction_id, "
            "original_entry_id, message_id, role, created_at, archived_at) VALUES "
            f"('orphan-sid', '{ORPHAN_KEY}', 'c1', 7, 'o0', 'user', 1, 1)",
        ],
    )
    before = await _row_counts(backend, database)
    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()
    assert await _row_counts(backend, database) == before
    counted = await _keyed_counts_exact(backend, database)
    assert (ORPHAN_KEY, "orphan-sid", "c1", 1, 0) in counted
    if backend.is_postgres:
        keys = dict(await fetch(backend, database, PRIMARY_KEYS))
        for table, key in POSTGRES_PRIMARY_KEYS.items():
            assert keys[table] == ",".join(key), table
        assert await fetch(backend, database, STAGED) == []
    async with SessionStorage(database) as storage:  # the triggers count by key from here on
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.reset(KEY)
        await manager.delete(KEY)
    await _keyed_counts_exact(backend, database)

    await run_sql(
        backend,
        database,
        [
            "DELETE FROM transcript_entries WHERE session_key = 'agent:main:orphan'",
            "DELETE FROM compacted_transcript_entries WHERE session_key = 'agent:main:orphan'",
            "DELETE FROM session_archives",
            "DELETE FROM sessions",
        ],
    )
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0009")
    assert await version_rows(backend, database) == ["0009"]
    after = _schema(await raw_state(backend, database))
    assert after == _schema(below)


async def test_replay_changes_nothing_and_an_invalid_leftover_is_rebuilt(
    backend: _Backend, database: str
) -> None:
    """A database at head whose version row says 0009 replays 0010: the keys found in place
    are kept (the counts recomputed, the same). On PostgreSQL a staged index that a failed
    concurrent build left invalid is dropped and built again."""
    async with SessionStorage(database) as storage:
        await _populated(storage)
    expected = await _keyed_counts_exact(backend, database)
    at_head = _schema(await raw_state(backend, database))
    async with unmigrated(database) as storage:
        await migrate.stamp(storage.engine, "0009")
        await migrate.upgrade(storage.engine, "head")
    assert sorted(await _keyed_counts_exact(backend, database)) == sorted(expected)
    assert _schema(await raw_state(backend, database)) == at_head
    if not backend.is_postgres:
        return

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0009")
    # A failed CREATE UNIQUE INDEX CONCURRENTLY: its index left behind, marked invalid.
    await run_sql(
        backend,
        database,
        [
            "CREATE UNIQUE INDEX transcript_entries_pkey_next ON transcript_entries (id)",
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
            "'transcript_entries_pkey_next'::regclass",
        ],
    )
    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()
    assert await fetch(backend, database, STAGED) == []
    assert _schema(await raw_state(backend, database)) == at_head


async def test_the_drift_check_names_a_key_without_session_key(
    backend: _Backend, database: str
) -> None:
    """The keys PostgreSQL has beyond the metadata are checked: a key put back to ``id``
    alone, or the summaries' unique index without the key, is drift."""
    if not backend.is_postgres:
        async with SessionStorage(database) as storage:  # nothing beyond the metadata
            assert (await migrate.check(storage.engine)).drift == ()
        return
    (index,) = POSTGRES_UNIQUE_INDEXES
    await run_sql(
        backend,
        database,
        [
            "ALTER TABLE session_archives DROP CONSTRAINT pk_session_archives, "
            "ADD CONSTRAINT pk_session_archives PRIMARY KEY (id)",
            f"DROP INDEX {index}",
            f"CREATE UNIQUE INDEX {index} ON session_summaries (session_id, compaction_index)",
        ],
    )
    async with unmigrated(database) as storage:
        drift = (await migrate.check(storage.engine)).drift
    assert set(drift) == {
        "primary_key session_archives (id) != (session_key, id)",
        f"unique_index {index} (session_id, compaction_index) != "
        "(session_key, md5(session_id), compaction_index)",
    }
