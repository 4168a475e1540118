"""Revision 0011: ``idx_transcript_session_key_cursor`` on ``transcript_entries (session_key,
session_id, created_at, id)``, expand-only.

The upgrade over a populated database at 0010 builds the index (PostgreSQL: concurrently;
on a partitioned database the parent's ``ON ONLY`` and each partition's built and attached)
and changes no row; the downgrade gives back exactly revision 0010's schema; a replay
changes nothing; on PostgreSQL the leftovers of an interrupted build (an invalid index, a
partition's index not attached) are finished. Both backends, both layouts (the
partitioned one may go down to 0010, not below)."""

from __future__ import annotations

from typing import Any

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated
from tests.conftest import Backend

from .raw import fetch, raw_state, run_sql, version_rows

INDEX = "idx_transcript_session_key_cursor"
COLUMNS = ["session_key", "session_id", "created_at", "id"]
KEY = "agent:main:cursor"
# PostgreSQL: every index on the live table or its partitions, with its validity.
PG_INDEXES = (
    "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname ~ '^transcript_entries(_p[0-9]+)?$'"
)
PARTITIONS = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = 'transcript_entries'::regclass ORDER BY c.relname"
)


async def _populated(storage: SessionStorage) -> None:
    manager = SessionManager(storage, inject_time_prefix=False)
    for key in (KEY, "agent:main:other"):
        await manager.create(key)
        await manager.append_messages(key, [{"role": "user", "content": f"m{n}"} for n in range(5)])
        await manager.append_message(key, "assistant", "one more")


VERSION_TABLES = ("opensquilla_session_version", migrate.POLICY_TABLE)


def _schema(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in ("rows", "sqlite_sequence")}


def _rows(state: dict[str, Any]) -> dict[str, Any]:
    """Every table's rows but the version tables'."""
    return {k: v for k, v in state["rows"].items() if k not in VERSION_TABLES}


async def _our_indexes(backend: Backend, target: str) -> dict[str, bool]:
    """The new index and its partitions' copies (PostgreSQL), by name: valid or not."""
    if backend.is_postgres:
        rows = await fetch(backend, target, PG_INDEXES)
        return {str(name): bool(valid) for name, valid in rows if "key_cursor" in name}
    rows = await fetch(
        backend, target, f"SELECT name FROM sqlite_master WHERE type = 'index' AND name = '{INDEX}'"
    )
    return {str(name): True for (name,) in rows}


async def _columns(backend: Backend, target: str) -> list[str]:
    if backend.is_postgres:
        query = (
            "SELECT pg_get_indexdef(i.indexrelid, n, true) FROM pg_index i "
            "CROSS JOIN LATERAL generate_series(1, i.indnkeyatts) AS n "
            f"WHERE i.indexrelid = '{INDEX}'::regclass ORDER BY n"
        )
    else:
        query = f"SELECT name FROM pragma_index_info('{INDEX}') ORDER BY seqno"
    return [str(name) for (name,) in await fetch(backend, target, query)]


async def _expected_names(backend: Backend, target: str) -> set[str]:
    partitions = await fetch(backend, target, PARTITIONS) if backend.is_postgres else []
    return {INDEX} | {f"{name}_session_key_cursor_idx" for (name,) in partitions}


async def _at_head(target: str) -> None:
    async with unmigrated(target) as storage:
        await migrate.upgrade(storage.engine, "head")
        status = await migrate.check(storage.engine)
        missing = await migrate.find_missing_indexes(storage.engine)
    assert status.at_head and status.drift == () and missing == [], (status, missing)


async def test_upgrade_builds_the_index_and_downgrade_gives_back_0010(
    backend: Backend, database: str
) -> None:
    policy = await fetch(
        backend, database, f"SELECT expand_only FROM {migrate.POLICY_TABLE} WHERE revision = '0011'"
    )
    assert [bool(flag) for (flag,) in policy] == [True]
    async with SessionStorage(database) as storage:
        await _populated(storage)
    expected = await _expected_names(backend, database)
    assert await _our_indexes(backend, database) == dict.fromkeys(expected, True)
    assert await _columns(backend, database) == COLUMNS
    at_head = _schema(await raw_state(backend, database))

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0010")
    assert await version_rows(backend, database) == ["0010"]
    assert await _our_indexes(backend, database) == {}
    below = await raw_state(backend, database)

    # Over the rows a release at 0010 wrote: built, and not a row changed.
    await _at_head(database)
    upgraded = await raw_state(backend, database)
    assert _rows(upgraded) == _rows(below)
    assert _schema(upgraded) == at_head
    assert await _our_indexes(backend, database) == dict.fromkeys(expected, True)

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0010")
    assert _schema(await raw_state(backend, database)) == _schema(below)
    await _at_head(database)


async def test_a_replay_changes_nothing(backend: Backend, database: str) -> None:
    """A database at head whose version row says 0010 replays 0011: the index found in
    place is kept."""
    async with SessionStorage(database) as storage:
        await _populated(storage)
    at_head = await raw_state(backend, database)
    async with unmigrated(database) as storage:
        await migrate.stamp(storage.engine, "0010")
    await _at_head(database)
    assert await raw_state(backend, database) == at_head


async def test_an_interrupted_build_is_finished(backend: Backend, database: str) -> None:
    """PostgreSQL: what a build stopped half-way leaves is finished by the next upgrade. On
    a plain database: the index left invalid by a failed ``CREATE INDEX CONCURRENTLY``
    (dropped and built again). On a partitioned one: the parent's index ``ON ONLY``
    (invalid), one partition's built but not attached, another's left invalid, the rest
    missing. SQLite's build is one transaction: nothing half-way to finish."""
    if not backend.is_postgres:
        return
    async with SessionStorage(database) as storage:
        await _populated(storage)
    at_head = _schema(await raw_state(backend, database))
    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0010")
    columns = ", ".join(COLUMNS)
    partitions = [str(name) for (name,) in await fetch(backend, database, PARTITIONS)]
    if not partitions:
        leftovers = [
            f"CREATE INDEX {INDEX} ON transcript_entries ({columns})",
            f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{INDEX}'::regclass",
        ]
    else:
        unattached, invalid = (f"{p}_session_key_cursor_idx" for p in partitions[:2])
        leftovers = [
            f"CREATE INDEX {INDEX} ON ONLY transcript_entries ({columns})",
            f"CREATE INDEX {unattached} ON {partitions[0]} ({columns})",
            f"CREATE INDEX {invalid} ON {partitions[1]} ({columns})",
            f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{invalid}'::regclass",
        ]
    await run_sql(backend, database, leftovers)
    assert (await _our_indexes(backend, database))[INDEX] is False
    await _at_head(database)
    assert await _our_indexes(backend, database) == dict.fromkeys(
        await _expected_names(backend, database), True
    )
    assert _schema(await raw_state(backend, database)) == at_head
