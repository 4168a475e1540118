"""A database at head that lacks an index of the head, or holds one invalid (HEAD-FEATURES
§1.5; docs/migrations.md#missing-indexes): ``connect()`` only detects it and warns, never
builds it; ``db check`` reports it as drift; ``db check --repair`` creates it (PostgreSQL:
``CREATE INDEX CONCURRENTLY`` per index, an invalid leftover dropped first; SQLite: one
transaction), under the migration lock, refusing a schema that is not at the head. Both
backends."""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import indexes, migrate
from opensquilla.session.db.rows import values_of
from opensquilla.session.db.tables import sessions
from opensquilla.session.errors import IntegrityViolationError, MigrationError
from opensquilla.session.models import SessionNode
from opensquilla.session.usecases import overview
from tests.cli.support import cli, run
from tests.conftest import Backend

# Plain databases only: tests(postgres-partitioned) deselects them (tests/conftest.py).
pytestmark = pytest.mark.plain_layout

LOOKUP = "idx_compacted_transcript_session_compaction"
CURSOR = "idx_transcript_session_cursor"
UNIQUE = "uq_sessions_session_id"
MIGRATE_LOG = "opensquilla.session.migrate"


async def _unmigrated(target: str) -> SessionStorage:
    """A storage on ``target`` without connect()'s version check (nothing it does counts)."""
    storage = SessionStorage(target)
    await storage.connect_without_migrating()
    return storage


async def _drop(target: str, *names: str) -> None:
    storage = await _unmigrated(target)
    try:
        async with storage.engine.begin() as conn:
            for name in names:
                await conn.execute(sa.text(f"DROP INDEX {name}"))
    finally:
        await storage.close()


async def _validity(target: str) -> dict[str, bool]:
    """What the database holds: every index by name, and whether it is valid."""
    storage = await _unmigrated(target)
    try:
        async with storage.engine.connect() as conn:
            return await conn.run_sync(indexes.index_validity)
    finally:
        await storage.close()


async def _invalidate(target: str, name: str) -> None:
    """Mark an index invalid, as a failed ``CREATE INDEX CONCURRENTLY`` leaves it (the test
    role is a superuser: it may update the catalog)."""
    storage = await _unmigrated(target)
    try:
        async with storage.engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "UPDATE pg_catalog.pg_index SET indisvalid = false"
                    " WHERE indexrelid = CAST(:name AS regclass)"
                ),
                {"name": name},
            )
    finally:
        await storage.close()


async def _connect(target: str) -> None:
    async with SessionStorage(target):
        pass


async def test_every_declared_index_exists_at_head(database: str) -> None:
    declared = {str(index.name) for index in indexes.declared_indexes(unique=True)}
    assert LOOKUP in declared and UNIQUE in declared
    validity = await _validity(database)
    assert declared <= set(validity) and all(validity[name] for name in declared)
    async with SessionStorage(database) as storage:
        assert await migrate.find_missing_indexes(storage.engine) == []


async def test_connect_warns_and_creates_nothing(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:kept")
        await manager.append_message("agent:main:kept", "user", "still here")
    await _drop(database, LOOKUP, CURSOR, UNIQUE)

    with caplog.at_level(logging.WARNING, logger=MIGRATE_LOG):
        async with SessionStorage(database) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            assert [e.content for e in await manager.get_transcript("agent:main:kept")] == [
                "still here"
            ]
            assert await migrate.find_missing_indexes(storage.engine) == [LOOKUP, CURSOR, UNIQUE]

    assert not {LOOKUP, CURSOR, UNIQUE} & set(await _validity(database))
    (warning,) = [r for r in caplog.records if r.name == MIGRATE_LOG]
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert all(name in message for name in (LOOKUP, CURSOR, UNIQUE))
    assert "opensquilla-session db check --repair" in message


def test_db_check_reports_and_repair_creates(database: str) -> None:
    run(_drop(database, LOOKUP, UNIQUE))

    check = cli(database, "db", "check", "--json")
    assert check.exit_code == 2, check.output
    drift = json.loads(check.stdout)["drift"]
    assert any(LOOKUP in line for line in drift) and any(UNIQUE in line for line in drift)

    repaired = cli(database, "db", "check", "--repair", "--json")
    assert repaired.exit_code == 0, repaired.output
    data = json.loads(repaired.stdout)
    assert data["repaired"] == [LOOKUP, UNIQUE]  # the access paths first
    assert data["ok"] is True and data["drift"] == []
    validity = run(_validity(database))
    assert validity[LOOKUP] and validity[UNIQUE]
    again = cli(database, "db", "check", "--repair")
    assert again.exit_code == 0 and "recreated: nothing" in again.stdout


def test_an_invalid_index_counts_as_missing_and_is_rebuilt(
    backend: Backend, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL keeps the leftover of a failed concurrent build in its catalog, invalid:
    no read uses it, so connect() warns about it, db check reports it, and --repair drops
    and rebuilds it."""
    if not backend.is_postgres:
        pytest.skip("SQLite has no invalid indexes")
    run(_invalidate(database, LOOKUP))
    assert run(_validity(database))[LOOKUP] is False

    with caplog.at_level(logging.WARNING, logger=MIGRATE_LOG):
        run(_connect(database))
    assert any(LOOKUP in r.getMessage() for r in caplog.records if r.name == MIGRATE_LOG)
    assert run(_validity(database))[LOOKUP] is False  # connect() created nothing
    check = cli(database, "db", "check", "--json")
    assert check.exit_code == 2
    assert f"invalid_index {LOOKUP}" in json.loads(check.stdout)["drift"]

    repaired = cli(database, "db", "check", "--repair", "--json")

    assert repaired.exit_code == 0, repaired.output
    assert json.loads(repaired.stdout)["repaired"] == [LOOKUP]
    assert run(_validity(database))[LOOKUP] is True


async def test_duplicates_refusing_a_unique_index(backend: Backend, database: str) -> None:
    """Duplicates make the unique index fail: an ``IntegrityViolationError``. On SQLite the
    repair is one transaction, so nothing is created; on PostgreSQL each index is built on
    its own, the access path first, and the failed build's invalid leftover is dropped."""
    await _drop(database, UNIQUE, LOOKUP)
    storage = await _unmigrated(database)
    try:
        async with storage.engine.begin() as conn:
            for key in ("agent:main:a", "agent:main:b"):
                node = SessionNode(session_key=key, session_id="same-id")
                await conn.execute(sa.insert(sessions).values(values_of(node, sessions)))
    finally:
        await storage.close()

    with pytest.raises(IntegrityViolationError):
        await overview.repair_indexes(database)

    validity = await _validity(database)
    assert UNIQUE not in validity  # not even an invalid leftover
    if backend.is_postgres:
        assert validity[LOOKUP] is True
    else:
        assert LOOKUP not in validity


async def test_repair_refuses_a_schema_not_at_head(database: str) -> None:
    """The version is re-read under the migration lock: not the head this code declares,
    the repair creates nothing (``db upgrade`` builds a revision's indexes)."""
    await _drop(database, LOOKUP)
    previous = migrate.history()[1].revision
    storage = await _unmigrated(database)
    try:
        await migrate.stamp(storage.engine, previous)
        with pytest.raises(MigrationError, match="not at the head"):
            await migrate.repair_indexes(storage.engine)
    finally:
        await storage.close()
    assert LOOKUP not in await _validity(database)
