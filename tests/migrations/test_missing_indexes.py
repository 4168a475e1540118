"""A database at head that lacks an index of the head (HEAD-FEATURES §1.5,
``test_storage_adds_compaction_lookup_index_to_existing_database``;
docs/migrations.md#missing-indexes): ``connect()`` recreates a missing non-unique index,
``db check`` reports a missing one as drift, ``db check --repair`` creates every missing one,
unique ones included, or none. Both backends."""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import indexes, migrate
from opensquilla.session.db.rows import values_of
from opensquilla.session.db.tables import sessions
from opensquilla.session.errors import IntegrityViolationError
from opensquilla.session.models import SessionNode
from opensquilla.session.usecases import overview
from tests.cli.support import cli, run

LOOKUP = "idx_compacted_transcript_session_compaction"
UNIQUE = "uq_sessions_session_id"


async def _drop(target: str, *names: str) -> None:
    async with SessionStorage(target) as storage, storage.engine.begin() as conn:
        for name in names:
            await conn.execute(sa.text(f"DROP INDEX {name}"))


async def _index_names(target: str) -> set[str]:
    """What the database holds, read without connect() (which would repair)."""
    storage = SessionStorage(target)
    await storage.connect_without_migrating()
    try:
        async with storage.engine.connect() as conn:
            return await conn.run_sync(indexes.existing_index_names)
    finally:
        await storage.close()


async def _connect(target: str) -> None:
    async with SessionStorage(target):
        pass


async def test_every_declared_index_exists_at_head(database: str) -> None:
    declared = {str(index.name) for index in indexes.declared_indexes(unique=True)}
    assert LOOKUP in declared and UNIQUE in declared
    assert declared <= await _index_names(database)


async def test_connect_recreates_a_missing_lookup_index(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:kept")
        await manager.append_message("agent:main:kept", "user", "still here")
    await _drop(database, LOOKUP, "idx_transcript_session_cursor")
    assert LOOKUP not in await _index_names(database)

    with caplog.at_level(logging.WARNING, logger="opensquilla.session.migrate"):
        async with SessionStorage(database) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            assert [e.content for e in await manager.get_transcript("agent:main:kept")] == [
                "still here"
            ]

    present = await _index_names(database)
    assert {LOOKUP, "idx_transcript_session_cursor"} <= present
    assert any(LOOKUP in record.getMessage() for record in caplog.records)
    report = await overview.schema_report(database)
    assert report.ok, report.drift


def test_connect_leaves_a_missing_unique_index_to_the_repair(database: str) -> None:
    """A unique index is a constraint: existing duplicates would make creating it fail, so
    connect() does not try; db check reports it; --repair creates it."""
    run(_drop(database, UNIQUE))
    run(_connect(database))
    assert UNIQUE not in run(_index_names(database))

    check = cli(database, "db", "check", "--json")
    assert check.exit_code == 2
    assert any(UNIQUE in line for line in json.loads(check.stdout)["drift"])

    repaired = cli(database, "db", "check", "--repair", "--json")
    assert repaired.exit_code == 0, repaired.output
    data = json.loads(repaired.stdout)
    assert data["repaired"] == [UNIQUE] and data["ok"] is True
    assert UNIQUE in run(_index_names(database))
    again = cli(database, "db", "check", "--repair")
    assert again.exit_code == 0 and "recreated: nothing" in again.stdout


async def test_repair_is_all_or_nothing_when_duplicates_refuse_a_unique_index(
    database: str,
) -> None:
    await _drop(database, UNIQUE, LOOKUP)
    async with SessionStorage(database) as storage, storage.engine.begin() as conn:
        for key in ("agent:main:a", "agent:main:b"):
            node = SessionNode(session_key=key, session_id="same-id")
            await conn.execute(sa.insert(sessions).values(values_of(node, sessions)))
    # connect() above recreated LOOKUP; drop it again so that the repair has two to make.
    await _drop(database, LOOKUP)

    with pytest.raises(IntegrityViolationError):
        await overview.repair_indexes(database)

    present = await _index_names(database)
    assert UNIQUE not in present and LOOKUP not in present  # nothing was created


async def test_missing_indexes_lists_what_the_database_lacks(database: str) -> None:
    await _drop(database, LOOKUP)
    async with SessionStorage(database) as storage:
        pass  # connect() repaired it already
    assert LOOKUP in await _index_names(database)
    await _drop(database, UNIQUE)
    async with SessionStorage(database) as storage:
        assert await migrate.missing_indexes(storage.engine) == [UNIQUE]
