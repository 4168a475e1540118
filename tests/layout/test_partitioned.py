"""The partitioned layout (docs/scaling.md#the-partitioned-layout): ``db upgrade --layout
partitioned[:N]`` and the storage's ``layout=`` setting create the tables hash-partitioned by
``session_key`` on an empty PostgreSQL database, with keys that include it; anything else
(a database with tables, SQLite, a bad value) is refused by name."""

from __future__ import annotations

import json

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import layout, migrate
from opensquilla.session.errors import ConfigurationError
from opensquilla.session.usecases.overview import unmigrated
from tests.cli.support import cli
from tests.migrations.raw import fetch

from ..conftest import Backend

pytestmark = pytest.mark.postgres_only

PARTITIONS = (
    "SELECT p.relname, p.relkind::text, count(i.inhrelid) FROM pg_class p "
    "LEFT JOIN pg_inherits i ON i.inhparent = p.oid "
    "WHERE p.relnamespace = 'public'::regnamespace AND p.relkind IN ('r', 'p') "
    "AND NOT p.relispartition GROUP BY p.relname, p.relkind"
)
PRIMARY_KEYS = (
    "SELECT c.conrelid::regclass::text, array_to_string(array(SELECT a.attname FROM "
    "unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a ON "
    "a.attrelid = c.conrelid AND a.attnum = k.attnum ORDER BY k.n), ',') "
    "FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid "
    "WHERE c.contype = 'p' AND NOT r.relispartition "
    "AND c.connamespace = 'public'::regnamespace"
)
UNIQUE_WITHOUT_KEY = (
    "SELECT ix.relname FROM pg_index i JOIN pg_class ix ON ix.oid = i.indexrelid "
    "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relkind = 'p' AND i.indisunique "
    "AND NOT EXISTS (SELECT 1 FROM unnest(i.indkey) k JOIN pg_attribute a "
    "ON a.attrelid = i.indrelid AND a.attnum = k WHERE a.attname = 'session_key')"
)


async def _upgrade(target: str, wanted: str | None) -> None:
    async with unmigrated(target) as storage:
        await migrate.upgrade(storage.engine, layout=layout.parse(wanted))


async def _check(target: str) -> migrate.SchemaStatus:
    async with unmigrated(target) as storage:
        return await migrate.check(storage.engine)


async def _detected(target: str) -> layout.Layout | None:
    async with unmigrated(target) as storage:
        return await migrate.current_layout(storage.engine)


@pytest.mark.parametrize(("wanted", "count"), [("partitioned:4", 4), ("partitioned", 16)])
async def test_an_empty_database_is_created_partitioned(
    backend: Backend, empty_database: str, wanted: str, count: int
) -> None:
    await _upgrade(empty_database, wanted)

    tables = {name: (kind, n) for name, kind, n in await fetch(backend, empty_database, PARTITIONS)}
    for table in layout.PARTITIONED_KEYS:
        assert tables[table] == ("p", count), table
    assert tables["scope_states"] == ("r", 0)  # not a session's: never partitioned
    keys = dict(await fetch(backend, empty_database, PRIMARY_KEYS))
    for table, key in layout.PARTITIONED_KEYS.items():
        assert keys[table] == ",".join(key), table
    assert await fetch(backend, empty_database, UNIQUE_WITHOUT_KEY) == []
    status = await _check(empty_database)
    assert status.ok, status.drift
    assert await _detected(empty_database) == layout.Layout(count)
    # A later upgrade (a restarted worker, the same request again) finds it done.
    await _upgrade(empty_database, wanted)
    await _upgrade(empty_database, None)
    assert (await _check(empty_database)).ok


async def test_a_database_with_tables_is_not_converted(
    backend: Backend, empty_database: str
) -> None:
    async with unmigrated(empty_database) as storage:
        await migrate.upgrade(storage.engine, "0001")
    with pytest.raises(ConfigurationError, match=r"empty database only.*converting a plain"):
        await _upgrade(empty_database, "partitioned:4")
    assert await _detected(empty_database) == layout.PLAIN
    await _upgrade(empty_database, None)
    with pytest.raises(ConfigurationError, match="empty database only"):
        await _upgrade(empty_database, "partitioned:4")
    assert (await _check(empty_database)).ok


async def test_a_partitioned_database_keeps_its_layout(empty_database: str) -> None:
    await _upgrade(empty_database, "partitioned:4")
    for other in ("partitioned:8", "plain"):
        with pytest.raises(ConfigurationError, match=f"partitioned:4, not the {other}"):
            await _upgrade(empty_database, other)
    with pytest.raises(ConfigurationError, match="partitioned:4, not the plain"):
        async with SessionStorage(empty_database, layout="plain"):
            pass
    async with SessionStorage(empty_database) as storage:  # unset: the database's own
        assert await migrate.current_layout(storage.engine) == layout.Layout(4)


async def test_the_setting_lays_out_a_new_database(empty_database: str) -> None:
    async with SessionStorage(empty_database, layout="partitioned:4") as storage:
        assert await migrate.current_layout(storage.engine) == layout.Layout(4)
        assert (await migrate.check(storage.engine)).ok
    async with SessionStorage(empty_database, layout="partitioned:4") as storage:
        await SessionManager(storage).create("agent:main:again")


async def test_the_environment_lays_out_new_databases_only(
    backend: Backend, empty_database: str, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(layout.LAYOUT_ENV, "partitioned:4")
    async with SessionStorage(empty_database) as storage:
        assert await migrate.current_layout(storage.engine) == layout.Layout(4)
    before = await _detected(database)  # the suite's template: plain or partitioned:N
    async with SessionStorage(database) as storage:  # an existing one is left as it is
        assert await migrate.current_layout(storage.engine) == before


def test_the_cli_flag_and_db_check(empty_database: str) -> None:
    upgraded = cli(empty_database, "db", "upgrade", "--layout", "partitioned:4")
    assert upgraded.exit_code == 0, upgraded.output
    check = cli(empty_database, "db", "check", "--json")
    assert check.exit_code == 0, check.output
    report = json.loads(check.stdout)
    assert report["layout"] == "partitioned:4" and report["drift"] == []
    assert "layout:   partitioned:4" in cli(empty_database, "db", "check").stdout
    refused = cli(empty_database, "db", "upgrade", "--layout", "plain")
    assert refused.exit_code != 0 and "partitioned:4, not the plain" in refused.output
    bad = cli(empty_database, "db", "upgrade", "--layout", "partitioned:1")
    assert bad.exit_code != 0 and "--layout must be" in bad.output


async def test_a_session_round_trip_stays_in_its_partitions(
    backend: Backend, empty_database: str
) -> None:
    await _upgrade(empty_database, "partitioned:4")
    keys = [f"agent:main:part-{n}" for n in range(6)]
    async with SessionStorage(empty_database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        for key in keys:
            await manager.create(key)
            for n in range(4):
                await manager.append_message(key, "user" if n % 2 == 0 else "assistant", f"m{n}")
        first = keys[0]
        page = await manager.get_canonical_transcript_page(first, limit=2)
        assert [entry.content for entry in page.entries] == ["m2", "m3"]  # the newest page
        kept = [{"role": "user", "content": "m2"}, {"role": "assistant", "content": "m3"}]
        assert await manager.persist_compaction_result(first, "summary", kept)
        view = await manager.get_context_view(first, max_tokens=10_000)
        assert view.summary is not None
        assert [entry.content for entry in await manager.get_recent_transcript(first, 2)] == [
            "m2",
            "m3",
        ]
        await manager.branch(first, "agent:main:part-fork", fork_transcript=True)
        await manager.reset(keys[1])
        assert await manager.delete(keys[2])
        found = await manager.search_transcript("m3")
        assert found
    for table in ("sessions", "transcript_entries", "compacted_transcript_entries"):
        for i in range(4):
            rows = await fetch(
                backend,
                empty_database,
                f"SELECT count(*), count(*) FILTER (WHERE satisfies_hash_partition("
                f"'{table}'::regclass, 4, {i}, session_key)) FROM {table}_p{i}",
            )
            assert rows[0][0] == rows[0][1], (table, i)
    # A session's rows share the partition index of its session row (co-location).
    spread = await fetch(
        backend,
        empty_database,
        "SELECT s.session_key, count(DISTINCT right(t.tableoid::regclass::text, 1)) "
        "FILTER (WHERE right(t.tableoid::regclass::text, 1) <> "
        "right(s.tableoid::regclass::text, 1)) FROM sessions s "
        "JOIN transcript_entries t USING (session_key) GROUP BY s.session_key",
    )
    assert spread and all(count == 0 for _, count in spread)
    assert (await _check(empty_database)).ok
