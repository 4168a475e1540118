"""A PostgreSQL schema for the store (``?schema=NAME``, ``SessionStorage(..., schema=NAME)``):
every object of the store in that schema, the store working there as anywhere, and two
schemas of one database holding two independent stores (the default one beside them)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.version_table import VERSION_TABLE
from opensquilla.session.errors import ConfigurationError
from opensquilla.session.usecases import overview
from tests.helpers import TABLES, assert_archive_counts_exact, run_alembic

KEY = "agent:main:schema"
BIG = "lorem ipsum " * 60


def _in_schema(target: str, schema: str) -> str:
    return f"{target}{'&' if '?' in target else '?'}schema={schema}"


async def _pg(target: str) -> asyncpg.Connection:
    url = parse_target(target).url.set(drivername="postgresql")
    return await asyncpg.connect(url.render_as_string(hide_password=False))


async def _objects(target: str, schema: str) -> dict[str, set[str]]:
    conn = await _pg(target)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
        indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", schema)
        functions = await conn.fetch(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = $1",
            schema,
        )
        triggers = await conn.fetch(
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = $1 AND NOT t.tgisinternal",
            schema,
        )
    finally:
        await conn.close()
    return {
        "tables": {r[0] for r in tables},
        "indexes": {r[0] for r in indexes},
        "functions": {r[0] for r in functions},
        "triggers": {r[0] for r in triggers},
    }


@pytest.mark.postgres_only
async def test_every_object_of_the_store_lands_in_its_schema(empty_database: str) -> None:
    async with SessionStorage(_in_schema(empty_database, "sessions_a")) as storage:
        assert storage.target.schema == "sessions_a"
        assert "schema=sessions_a" in storage.target.render()
    found = await _objects(empty_database, "sessions_a")
    assert found["tables"] >= {
        *TABLES,
        VERSION_TABLE,
        "compaction_leases",
        "canonical_archive_counts",
        migrate.POLICY_TABLE,
    }
    assert found["indexes"] >= set(migrate.SEARCH_OBJECTS) - {"search_vector"}
    assert found["functions"] >= {
        "transcript_search_vector",
        "transcript_entries_search_vector",
        "opensquilla_prevent_epoch_rollback",
        "opensquilla_canonical_archive_counts",
    }
    assert found["triggers"] >= {
        "prevent_epoch_rollback",
        "transcript_entries_search_vector",
        "canonical_archive_counts_insert",
        "canonical_archive_counts_delete",
        "canonical_archive_counts_update",
        "canonical_archive_counts_truncate",
    }
    public = await _objects(empty_database, "public")
    assert not public["tables"] & {*TABLES, VERSION_TABLE, "compaction_leases", "alembic_version"}
    report = await overview.schema_report(_in_schema(empty_database, "sessions_a"))
    assert report.ok, report


@pytest.mark.postgres_only
async def test_reads_writes_search_and_compaction_work_in_a_schema(empty_database: str) -> None:
    async with SessionStorage(empty_database, schema="sessions_b") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        for index in range(20):
            await manager.append_message(KEY, "user", f"heron {index} {BIG}", token_count=200)
        assert await manager.compact(KEY, context_window_tokens=1000)
        assert len(await manager.get_summaries(KEY)) == 1
        live = await manager.search_transcript("heron", limit=100)
        every = await manager.search_transcript("heron", include_archived=True, limit=100)
        like = await manager.search_transcript_like("eron 1", include_archived=True, limit=100)
        assert 0 < len(live) < len(every) == 20
        assert len(like) == 11  # heron 1, heron 10 ... heron 19
        counted = await assert_archive_counts_exact(storage)
        assert [archived for _, _, archived, _ in counted] == [len(every) - len(live)]
    report = await overview.schema_report(_in_schema(empty_database, "sessions_b"))
    assert report.ok, report
    # The archive's counts follow a write from a client whose search path does not name
    # the schema (revision 0007's function carries its own).
    conn = await _pg(empty_database)
    try:
        await conn.execute("DELETE FROM sessions_b.compacted_transcript_entries")
        assert await conn.fetchval("SELECT count(*) FROM sessions_b.canonical_archive_counts") == 0
    finally:
        await conn.close()


@pytest.mark.postgres_only
async def test_two_schemas_hold_two_independent_stores(database: str) -> None:
    """The database already holds a store in the default schema; two more go beside it."""
    stores = {
        None: database,
        "tenant_one": _in_schema(database, "tenant_one"),
        "tenant_two": _in_schema(database, "tenant_two"),
    }
    for schema, target in stores.items():
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            await manager.create(KEY)
            await manager.append_message(KEY, "user", f"written in {schema}")
    for schema, target in stores.items():
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            contents = [e.content for e in await manager.get_transcript(KEY)]
            assert contents == [f"written in {schema}"]
            hits = await manager.search_transcript("written")
            assert [hit.snippet for hit in hits] == [f">>>written<<< in {schema}"]
        report = await overview.schema_report(target)
        assert report.ok, (schema, report)
    # Ours down to base in one schema: the others keep theirs.
    await overview.downgrade(stores["tenant_one"], "base")
    assert not (await _objects(database, "tenant_one"))["tables"] & set(TABLES)
    for schema in (None, "tenant_two"):
        assert (await overview.schema_report(stores[schema])).ok


@pytest.mark.postgres_only
async def test_a_schema_given_twice_must_agree(database: str) -> None:
    same = SessionStorage(_in_schema(database, "sessions_c"), schema="sessions_c")
    assert same.target.schema == "sessions_c"
    with pytest.raises(ConfigurationError, match="give it once"):
        SessionStorage(_in_schema(database, "sessions_c"), schema="other")


@pytest.mark.postgres_only
async def test_a_schema_and_a_search_path_together_are_refused(database: str) -> None:
    """The schema sets the search path itself; a second one would put other tables on it."""
    storage = SessionStorage(_in_schema(database, "sessions_d") + "&search_path=public")
    with pytest.raises(ConfigurationError, match="search_path"):
        await storage.connect()
    await storage.close()


@pytest.mark.parametrize(
    "name", ["Upper", "1starts_with_digit", "pg_catalog", "has-dash", "x" * 64, "", "a;b"]
)
def test_an_unusable_schema_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        parse_target(f"postgresql://u@h/db?schema={name}")
    with pytest.raises(ConfigurationError, match="schema"):
        SessionStorage("postgresql://u@h/db", schema=name)


@pytest.mark.parametrize("target", [":memory:", "sessions.db", "sqlite:///sessions.db"])
def test_a_schema_on_sqlite_is_refused(target: str) -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL setting"):
        SessionStorage(target, schema="sessions")


def test_a_schema_in_a_sqlite_url_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL setting"):
        parse_target("sqlite:///sessions.db?schema=sessions")


def test_the_schema_is_not_handed_to_the_driver() -> None:
    target = parse_target("postgresql://u:secret@h/db?schema=store&ssl=require")
    assert target.schema == "store"
    assert dict(target.url.query) == {"ssl": "require"}
    assert "secret" not in target.render() and "schema=store" in target.render()


@pytest.mark.postgres_only
async def test_an_offline_script_builds_the_store_in_its_schema(empty_database: str) -> None:
    """``alembic upgrade head --sql`` with ``?schema=``: the script creates the schema and
    everything in it, version table included; applied, the store is at head there."""
    target = _in_schema(empty_database, "offline_store")
    done = await asyncio.to_thread(run_alembic, "upgrade", "head", "--sql", dsn=target)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert 'CREATE SCHEMA IF NOT EXISTS "offline_store"' in script
    assert f"offline_store.{VERSION_TABLE}" in script
    conn = await _pg(empty_database)
    try:
        await conn.execute(script)
    finally:
        await conn.close()
    found = await _objects(empty_database, "offline_store")
    assert found["tables"] >= {*TABLES, VERSION_TABLE, "compaction_leases"}
    assert not (await _objects(empty_database, "public"))["tables"] & set(TABLES)
    report = await overview.schema_report(target)
    assert report.ok, report
