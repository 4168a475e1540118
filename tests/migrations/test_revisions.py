"""The migration history itself: one head, empty -> head, head -> base -> head, no drift,
the ``alembic`` command line, a no-op ``connect()`` at head, and refusal of a database a
newer version migrated. Everything that touches a database runs on the configured backend."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.engine import create_engine
from opensquilla.session.db.schema_compare import POSTGRES_PRIMARY_KEYS, POSTGRES_UNIQUE_INDEXES
from opensquilla.session.errors import MigrationError
from tests.helpers import run_alembic

OUR_TABLES = {
    "sessions",
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
}

# The older store's index names (SEMANTICS §3) plus the ones HEAD recommends: an adopted
# database and a fresh one must look alike, so these names are part of the schema.
EXPECTED_INDEXES: dict[str, dict[str, tuple[list[str], bool]]] = {
    "sessions": {"idx_sessions_updated_at": (["updated_at"], False)},
    "transcript_entries": {
        "idx_transcript_session_id": (["session_id"], False),
        "idx_transcript_session_key": (["session_key"], False),
        "idx_transcript_session_cursor": (["session_id", "created_at", "id"], False),
    },
    "compacted_transcript_entries": {
        "idx_compacted_transcript_session_id": (["session_id"], False),
        "idx_compacted_transcript_session_key": (["session_key"], False),
        "idx_compacted_transcript_session_compaction": (
            ["session_id", "compaction_id"],
            False,
        ),
    },
    "session_summaries": {
        "idx_summaries_session_id": (["session_id"], False),
        "uq_summaries_session_compaction_index": (["session_id", "compaction_index"], True),
    },
    "session_context_states": {
        "idx_context_states_session_id": (["session_id"], False),
        "idx_context_states_key_valid": (
            ["session_key", "valid", "state_kind", "provider"],
            False,
        ),
    },
}


async def _inspect(engine: AsyncEngine, fn: Callable[[sa.Inspector], Any]) -> Any:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: fn(sa.inspect(sync)))


async def _table_names(engine: AsyncEngine) -> set[str]:
    return set(await _inspect(engine, lambda insp: insp.get_table_names()))


async def _version_rows(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT version_num FROM opensquilla_session_version"))
        return sorted(row[0] for row in rows)


async def _epoch_guard_present(engine: AsyncEngine) -> bool:
    if engine.dialect.name == "postgresql":
        query = "SELECT count(*) FROM pg_trigger WHERE tgname = 'prevent_epoch_rollback'"
    else:
        query = (
            "SELECT count(*) FROM sqlite_master "
            "WHERE type = 'trigger' AND name = 'prevent_epoch_rollback'"
        )
    async with engine.connect() as conn:
        return bool((await conn.execute(sa.text(query))).scalar_one())


def test_history_has_exactly_one_head() -> None:
    """Two heads would make ``upgrade head`` ambiguous for every deployment."""
    heads = migrate.head_revisions()
    assert len(heads) == 1
    history = migrate.history()
    assert [info.revision for info in history if info.is_head] == list(heads)
    # The chain is linear and ends at a single base revision.
    bases = [info for info in history if info.down_revision is None]
    assert len(bases) == 1
    assert all("," not in (info.down_revision or "") for info in history)


async def test_connect_on_empty_database_builds_the_whole_schema(empty_database: str) -> None:
    """A brand-new database reaches head through ``connect()`` alone: tables, legacy index
    names and the epoch guard."""
    postgres = empty_database.startswith("postgresql")
    async with SessionStorage(empty_database) as storage:
        engine = storage.engine
        tables = await _table_names(engine)
        assert tables >= OUR_TABLES
        assert "opensquilla_session_version" in tables
        assert await _version_rows(engine) == sorted(migrate.head_revisions())
        for table, wanted in EXPECTED_INDEXES.items():
            found = {
                # An expression's element (0010's md5 of an id) reads as its text.
                index["name"]: (
                    list(index.get("expressions") or index["column_names"]),
                    bool(index["unique"]),
                )
                for index in await _inspect(engine, lambda insp, t=table: insp.get_indexes(t))
            }
            for name, shape in wanted.items():
                if postgres and name in POSTGRES_UNIQUE_INDEXES:  # revision 0010's keys
                    shape = (list(POSTGRES_UNIQUE_INDEXES[name]), True)
                assert found.get(name) == shape, (table, name, found)
        if postgres:
            for table, key in POSTGRES_PRIMARY_KEYS.items():
                primary = await _inspect(engine, lambda insp, t=table: insp.get_pk_constraint(t))
                assert tuple(primary["constrained_columns"]) == key, (table, primary)
        assert await _epoch_guard_present(engine)


async def test_epoch_guard_refuses_a_lower_epoch(empty_database: str) -> None:
    """Fencing relies on epochs never going back, even for a writer that bypasses the store;
    the schema ``connect()`` builds from nothing carries the guard."""
    async with SessionStorage(empty_database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:guarded")
        set_epoch = sa.text(
            "UPDATE sessions SET epoch = :e WHERE session_key = 'agent:main:guarded'"
        )
        async with storage.engine.begin() as conn:
            await conn.execute(set_epoch, {"e": 5})
        with pytest.raises(sa.exc.IntegrityError, match="epoch can only increase"):
            async with storage.engine.begin() as conn:
                await conn.execute(set_epoch, {"e": 4})
        # The refused statement changed nothing; raising it further is still allowed.
        assert await storage.get_epoch("agent:main:guarded") == 5
        async with storage.engine.begin() as conn:
            await conn.execute(set_epoch, {"e": 6})
        assert await storage.get_epoch("agent:main:guarded") == 6


async def test_head_to_base_to_head(empty_database: str) -> None:
    """The downgrade really removes everything, and the history can be replayed after it."""
    async with SessionStorage(empty_database) as storage:
        engine = storage.engine
        await migrate.downgrade(engine, "base")
        assert not (OUR_TABLES & await _table_names(engine))
        assert await _version_rows(engine) == []
        assert not await _epoch_guard_present(engine)
        if engine.dialect.name == "postgresql":
            async with engine.connect() as conn:
                leftover = await conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_proc "
                        "WHERE proname = 'opensquilla_prevent_epoch_rollback'"
                    )
                )
                assert leftover.scalar_one() == 0

        await migrate.upgrade(engine, "head")
        assert await _table_names(engine) >= OUR_TABLES
        assert await _version_rows(engine) == sorted(migrate.head_revisions())
        assert await _epoch_guard_present(engine)
        status = await migrate.check(engine)
        assert status.drift == ()

        # And the replayed schema is a working store.
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:replayed")
        await manager.append_message("agent:main:replayed", "user", "still here")
        assert len(await manager.get_transcript("agent:main:replayed")) == 1


async def test_fresh_upgrade_has_no_drift(empty_database: str) -> None:
    """The migrated schema matches the models exactly (what ``alembic check`` enforces)."""
    async with SessionStorage(empty_database) as storage:
        status = await migrate.check(storage.engine)
    assert status.drift == ()
    assert status.at_head
    assert status.ok


async def test_check_reports_real_drift(storage: SessionStorage) -> None:
    """``check`` is not vacuous: a missing index is reported as drift."""
    async with storage.engine.begin() as conn:
        await conn.execute(sa.text("DROP INDEX idx_transcript_session_cursor"))
    status = await migrate.check(storage.engine)
    assert status.at_head
    assert not status.ok
    assert any("idx_transcript_session_cursor" in item for item in status.drift), status.drift


async def _assert_at_head_and_clean(target: str) -> None:
    async with SessionStorage(target) as storage:
        assert await _version_rows(storage.engine) == sorted(migrate.head_revisions())
        assert await _table_names(storage.engine) >= OUR_TABLES
        assert (await migrate.check(storage.engine)).drift == ()


async def test_alembic_cli_with_env_dsn(empty_database: str) -> None:
    """The deploy path: ``alembic upgrade head`` from the repository root, DSN in the env."""
    before = await asyncio.to_thread(run_alembic, "check", dsn=empty_database)
    assert before.returncode != 0, "alembic check passed on a database with no schema"

    upgraded = await asyncio.to_thread(run_alembic, "upgrade", "head", dsn=empty_database)
    assert upgraded.returncode == 0, upgraded.stderr
    checked = await asyncio.to_thread(run_alembic, "check", dsn=empty_database)
    assert checked.returncode == 0, checked.stderr
    await _assert_at_head_and_clean(empty_database)


def _plain_url(target: str) -> str:
    """The sync-looking URL form operators write (normalised to the async driver)."""
    if "://" not in target:
        return f"sqlite:///{target}"
    return make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)


async def test_alembic_cli_with_x_dsn(empty_database: str, tmp_path: Path) -> None:
    """``-x dsn=...`` (here a plain ``sqlite://``/``postgresql://`` URL) wins over the
    environment variable, which names a decoy file."""
    decoy = tmp_path / "decoy" / "sessions.db"
    dsn = _plain_url(empty_database)
    upgraded = await asyncio.to_thread(
        run_alembic, "-x", f"dsn={dsn}", "upgrade", "head", dsn=str(decoy)
    )
    assert upgraded.returncode == 0, upgraded.stderr
    assert not decoy.exists()
    current = await asyncio.to_thread(run_alembic, "-x", f"dsn={dsn}", "current", dsn=str(decoy))
    assert current.returncode == 0, current.stderr
    (head,) = migrate.head_revisions()
    assert head in current.stdout
    await _assert_at_head_and_clean(empty_database)


async def test_connect_at_head_runs_no_migration(database: str) -> None:
    """An up-to-date database costs a version read: no DDL, no writes, no lock."""
    async with SessionStorage(database) as storage:
        before = await _version_rows(storage.engine)
        statements: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            statements.append(statement)

        sa.event.listen(storage.engine.sync_engine, "before_cursor_execute", record)
        try:
            ran = await migrate.ensure_head(storage.engine)
        finally:
            sa.event.remove(storage.engine.sync_engine, "before_cursor_execute", record)
        assert ran is False
        assert statements, "the version table was not even read"
        writes = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE")
        for statement in statements:
            head = statement.lstrip().upper()
            assert not head.startswith(writes), statement
            assert "ADVISORY" not in head, statement
        assert await _version_rows(storage.engine) == before == sorted(migrate.head_revisions())

    # A second storage on the same database finds it at head too.
    async with SessionStorage(database) as again:
        assert await migrate.ensure_head(again.engine) is False
        assert await _version_rows(again.engine) == before


async def test_unknown_newer_revision_is_refused(database: str) -> None:
    """A database migrated by a newer release must not be touched by an older one."""
    future = "9f9f_from_a_newer_release"
    async with SessionStorage(database) as storage, storage.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE opensquilla_session_version SET version_num = :v"), {"v": future}
        )

    refused = SessionStorage(database)
    with pytest.raises(MigrationError, match=future):
        await refused.connect()
    assert not refused.is_connected

    # Nothing was rewritten by the refused attempt (read without the store, which refuses).
    probe = create_engine(parse_target(database))
    try:
        assert await _version_rows(probe) == [future]
        assert await migrate.current_revisions(probe) == (future,)
    finally:
        await probe.dispose()


async def test_concurrent_first_connects_migrate_once(
    empty_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several workers starting at once on a new database all come up; the schema is built
    once (the migration lock serialises them). The overlap is forced: every worker finds
    the schema missing and waits at a barrier before it goes for the migration lock."""
    storages = [SessionStorage(empty_database) for _ in range(4)]
    all_found_it_missing = asyncio.Barrier(len(storages))
    real_upgrade = migrate.upgrade
    upgrades = 0

    async def contended_upgrade(engine: Any, revision: str = "head", layout: Any = None) -> None:
        nonlocal upgrades
        upgrades += 1
        await asyncio.wait_for(all_found_it_missing.wait(), 120)  # a hang guard
        await real_upgrade(engine, revision, layout=layout)

    monkeypatch.setattr(migrate, "upgrade", contended_upgrade)
    try:
        await asyncio.gather(*(s.connect() for s in storages))
        assert upgrades == len(storages)
        assert await _version_rows(storages[0].engine) == sorted(migrate.head_revisions())
        assert (await migrate.check(storages[0].engine)).drift == ()
    finally:
        for s in storages:
            await s.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("umask_022")
async def test_sqlite_file_and_directories_are_private(tmp_path: Path) -> None:
    """The embedded database holds whole conversations: owner-only whatever the umask.
    (Inherently a SQLite-file test; it needs no server.)"""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    parent = shared / "state"
    nested = parent / "deeper"
    path = nested / "sessions.db"
    async with SessionStorage(path) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:private")
        await manager.append_message("agent:main:private", "user", "secret")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for sidecar in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            if sidecar.exists():
                assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600, sidecar
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(nested.stat().st_mode) == 0o700
    # A directory that already existed is left as it was (it may be shared on purpose).
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
