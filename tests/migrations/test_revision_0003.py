"""Revision 0003: transcript search objects (docs/search.md#schema).

On SQLite the older store's FTS5 objects, character for character, rebuilt over rows
written before them; on PostgreSQL the ``search_vector`` column, its trigger and function,
and the GIN indexes, back-filled over existing rows. Downgrade removes them; the rolling
policy lets a release at 0002 run against a database at 0003 only while 0003 is recorded
expand-only."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.errors import MigrationError
from opensquilla.session.usecases.overview import unmigrated

from .raw import fetch, run_sql, version_rows
from .test_legacy_adoption import _Backend, _pg_dsn
from .test_legacy_fixtures import FIXTURES, LEGACY_DIR

LIVE_FTS = ("transcript_fts", "transcript_fts_ai", "transcript_fts_ad", "transcript_fts_au")
PG_INDEXES = {
    "ix_transcript_entries_search_vector",
    "ix_transcript_entries_content_trgm",
    "ix_compacted_transcript_entries_search_vector",
    "ix_compacted_transcript_entries_content_trgm",
}
(HEAD,) = migrate.head_revisions()
PG_FUNCTIONS = {"transcript_search_vector", "transcript_entries_search_vector"}
ROWS = [
    "INSERT INTO sessions (session_key, session_id, created_at, updated_at) "
    "VALUES ('agent:main:old', 'sid-old', 1751234567000, 1751234567000)",
    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
    "created_at) VALUES ('sid-old', 'agent:main:old', 'm-1', 'user', "
    "'written before search existed: albatross 信天翁', 1751234567001)",
]


def _fts_sql(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        marks = ",".join("?" * len(LIVE_FTS))
        rows = db.execute(f"SELECT name, sql FROM sqlite_master WHERE name IN ({marks})", LIVE_FTS)
        return dict(rows)


async def _search_objects(backend: _Backend, target: str) -> dict[str, set[str]]:
    """The search objects present: SQLite ``*fts*`` names; PostgreSQL column, indexes,
    functions and the policy table."""
    if not backend.is_postgres:
        rows = await fetch(backend, target, "SELECT name FROM sqlite_master")
        names = {name for (name,) in rows}
        return {
            "fts": {n for n in names if "fts" in n},
            "policy": names & {migrate.POLICY_TABLE},
        }
    columns = await fetch(
        backend,
        target,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'transcript_entries' AND column_name = 'search_vector'",
    )
    indexes = await fetch(backend, target, "SELECT indexname FROM pg_indexes")
    functions = await fetch(
        backend,
        target,
        "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'public'",
    )
    tables = await fetch(backend, target, "SELECT to_regclass('public.session_schema_revisions')")
    return {
        "column": {c for (c,) in columns},
        "indexes": {i for (i,) in indexes if i.endswith("trgm") or i.endswith("search_vector")},
        "functions": {f for (f,) in functions} & PG_FUNCTIONS,
        "policy": {str(t) for (t,) in tables if t is not None},
    }


async def _finds_the_old_row(target: str) -> None:
    async with SessionStorage(target) as storage:
        [word] = await storage.search_transcript("albatross")
        assert word["session_key"] == "agent:main:old"
        [sub] = await storage.search_transcript_like("信天翁")
        assert sub["id"] == word["id"]


def test_a_fresh_file_has_the_legacy_fts_objects_verbatim(tmp_path: Path) -> None:
    """A new SQLite file at head and a file the older store wrote define the four live
    FTS objects with identical SQL, so either store can open either file."""

    async def create() -> None:
        async with SessionStorage(tmp_path / "fresh.db"):
            pass

    asyncio.run(create())
    legacy = tmp_path / "legacy.sqlite"
    shutil.copyfile(LEGACY_DIR / FIXTURES[0], legacy)

    fresh_sql = _fts_sql(tmp_path / "fresh.db")
    assert set(fresh_sql) == set(LIVE_FTS)
    assert fresh_sql == _fts_sql(legacy)


async def test_upgrade_makes_existing_rows_searchable(
    backend: _Backend, empty_database: str
) -> None:
    """Rows written at 0002 are searchable after the upgrade (SQLite: FTS rebuild;
    PostgreSQL: back-fill of ``search_vector``)."""
    async with unmigrated(empty_database) as storage:
        await migrate.upgrade(storage.engine, "0002")
    await run_sql(backend, empty_database, ROWS)

    await _finds_the_old_row(empty_database)
    assert await version_rows(backend, empty_database) == list(migrate.head_revisions())
    if backend.is_postgres:
        filled = await fetch(
            backend,
            empty_database,
            "SELECT count(*) FROM transcript_entries WHERE search_vector IS NULL",
        )
        assert filled == [(0,)]


@pytest.mark.plain_layout
async def test_downgrade_removes_search_and_upgrade_restores_it(
    backend: _Backend, database: str
) -> None:
    await run_sql(backend, database, ROWS)
    before = await _search_objects(backend, database)
    if backend.is_postgres:
        assert before["column"] and before["indexes"] == PG_INDEXES
        assert before["functions"] == PG_FUNCTIONS
    else:
        assert set(LIVE_FTS) <= before["fts"]
    assert before["policy"]

    async with unmigrated(database) as storage:
        await migrate.downgrade(storage.engine, "0002")
    after = await _search_objects(backend, database)
    assert all(not found for found in after.values()), after
    assert await version_rows(backend, database) == ["0002"]

    async with unmigrated(database) as storage:
        await migrate.upgrade(storage.engine, "head")
    assert await _search_objects(backend, database) == before
    await _finds_the_old_row(database)


async def test_no_drift_at_head(database: str) -> None:
    async with unmigrated(database) as storage:
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == ()


class _OlderScripts:
    """The package's scripts as a release at 0002 knows them."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def walk_revisions(self) -> list[Any]:
        return [r for r in self.real.walk_revisions() if r.revision <= "0002"]


@pytest.fixture
def release_at_0002(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this package look like the release before 0003 to ``ensure_head``."""
    real = migrate.script_directory()
    monkeypatch.setattr(migrate, "head_revisions", lambda: ("0002",))
    monkeypatch.setattr(migrate, "script_directory", lambda: _OlderScripts(real))


async def test_older_release_accepts_an_expand_only_revision(
    database: str, release_at_0002: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with unmigrated(database) as storage:
        assert await migrate.ensure_head(storage.engine) is False
    assert f"revision {HEAD}" in caplog.text and "expand-only" in caplog.text


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (f"UPDATE {migrate.POLICY_TABLE} SET expand_only = false", "is not expand-only"),
        (f"DELETE FROM {migrate.POLICY_TABLE}", "is not recorded as expand-only"),
    ],
)
async def test_older_release_refuses_when_not_recorded_expand_only(
    backend: _Backend, database: str, release_at_0002: None, change: str, reason: str
) -> None:
    await run_sql(backend, database, [change])
    async with unmigrated(database) as storage:
        with pytest.raises(MigrationError) as refused:
            await migrate.ensure_head(storage.engine)
    assert f"revision {HEAD}" in str(refused.value) and reason in str(refused.value)
    assert await version_rows(backend, database) == [HEAD]


@pytest.mark.postgres_only
async def test_a_role_that_may_not_create_extensions_is_told_so(
    backend: _Backend, database: str
) -> None:
    """The upgrade names pg_trgm and CREATE EXTENSION, and leaves the database at 0002."""
    admin_target = database
    suffix = uuid.uuid4().hex[:10]
    role, name = f"osq_role_{suffix}", f"osq_noext_{suffix}"
    admin = await asyncpg.connect(_pg_dsn(admin_target))
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 OWNER postgres')
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        target = admin_target.rsplit("/", 1)[0] + f"/{name}"
        async with unmigrated(target) as storage:
            await migrate.upgrade(storage.engine, "0002")
        owner = await asyncpg.connect(_pg_dsn(target))
        try:
            await owner.execute(f'GRANT CREATE, USAGE ON SCHEMA public TO "{role}"')
            for (table,) in await owner.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ):
                await owner.execute(f'ALTER TABLE "{table}" OWNER TO "{role}"')
        finally:
            await owner.close()
        as_role = target.replace("postgres@", f"{role}@", 1)
        storage = SessionStorage(as_role)
        with pytest.raises(MigrationError) as refused:
            await storage.connect()
        message = str(refused.value)
        assert "pg_trgm" in message and "CREATE EXTENSION" in message
        assert await version_rows(backend, target) == ["0002"]
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()
