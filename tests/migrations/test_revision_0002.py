"""Revision 0002: a session id belongs to exactly one session, enforced by the database;
the two revision counters are 64-bit (issue 11, classes 1 and 9).

Duplicates already in a database (an adopted legacy file, an import) are reported, never
merged or rewritten: the upgrade refuses, names each shared id and the keys sharing it,
and leaves the database exactly as it was. The widening never rebuilds a SQLite table (the
older store's triggers and ``sqlite_sequence`` stay), and the downgrade removes exactly
what 0002 added, refusing rather than losing a value that no longer fits."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.errors import MigrationError, SessionStoreError
from opensquilla.session.usecases.overview import unmigrated

from ..cli.support import cli, run
from .raw import fetch, raw_state, run_sql, version_rows
from .test_legacy_adoption import _Backend

# Plain databases only: tests(postgres-partitioned) deselects them (tests/conftest.py).
pytestmark = pytest.mark.plain_layout

INDEX = "uq_sessions_session_id"
BIG = 2**40 + 7  # a millisecond clock used as a revision counter


async def _at_0001(target: str) -> None:
    """A database built by revision 0001 only (what a deployment before 0002 has)."""
    async with unmigrated(target) as storage:
        await migrate.upgrade(storage.engine, "0001")


def _insert_session(key: str, sid: str, at: int = 1751234567000) -> str:
    return (
        "INSERT INTO sessions (session_key, session_id, created_at, updated_at) "
        f"VALUES ('{key}', '{sid}', {at}, {at})"
    )


def _insert_entry(key: str, sid: str, message: str) -> str:
    return (
        "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
        f"created_at) VALUES ('{sid}', '{key}', '{message}', 'user', 'text of {message}', "
        "1751234567001)"
    )


SHARED_ROWS = [
    _insert_session("agent:main:a", "sid-shared"),
    _insert_session("agent:main:b", "sid-shared"),
    _insert_session("agent:coder:c", "sid-shared"),
    _insert_session("agent:main:d", "sid-other"),
    _insert_session("agent:main:e", "sid-other"),
    _insert_session("agent:main:alone", "sid-alone"),
    _insert_entry("agent:main:a", "sid-shared", "m-a"),
    _insert_entry("agent:main:b", "sid-shared", "m-b"),
]


def _assert_names_every_shared_id(message: str) -> None:
    assert "\n" not in message
    assert "cannot make sessions.session_id unique" in message
    assert "2 session id(s)" in message
    assert (
        "'sid-shared' is shared by 3 sessions ('agent:coder:c', 'agent:main:a', 'agent:main:b')"
        in message
    )
    assert "'sid-other' is shared by 2 sessions ('agent:main:d', 'agent:main:e')" in message
    assert "sid-alone" not in message
    assert "Nothing was changed" in message
    assert "UPDATE sessions SET session_id" in message  # what the operator can do


async def test_upgrade_refuses_shared_session_ids_and_changes_nothing(
    backend: _Backend, empty_database: str
) -> None:
    await _at_0001(empty_database)
    await run_sql(backend, empty_database, SHARED_ROWS)
    before = await raw_state(backend, empty_database)

    storage = SessionStorage(empty_database)
    with pytest.raises(MigrationError) as refused:
        await storage.connect()
    assert not storage.is_connected
    _assert_names_every_shared_id(str(refused.value))

    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) == ["0001"]


def test_db_upgrade_reports_shared_session_ids_in_one_line(
    backend: _Backend, empty_database: str
) -> None:
    run(_at_0001(empty_database))
    run(run_sql(backend, empty_database, SHARED_ROWS))
    before = run(raw_state(backend, empty_database))

    result = cli(empty_database, "db", "upgrade")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    _assert_names_every_shared_id(lines[0])
    assert "Traceback" not in result.output

    assert run(raw_state(backend, empty_database)) == before
    assert run(version_rows(backend, empty_database)) == ["0001"]

    # Once the operator has given the extra sessions their own ids, the upgrade goes on.
    run(
        run_sql(
            backend,
            empty_database,
            [
                "UPDATE sessions SET session_id = 'sid-b' WHERE session_key = 'agent:main:b'",
                "UPDATE sessions SET session_id = 'sid-c' WHERE session_key = 'agent:coder:c'",
                "UPDATE sessions SET session_id = 'sid-e' WHERE session_key = 'agent:main:e'",
            ],
        )
    )
    assert cli(empty_database, "db", "upgrade").exit_code == 0
    assert run(version_rows(backend, empty_database)) == list(migrate.head_revisions())


LEGACY_SESSIONS = """
CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    epoch BIGINT NOT NULL DEFAULT 0
)
"""


async def test_adopting_a_legacy_file_with_shared_ids_is_refused_whole(
    backend: _Backend, empty_database: str
) -> None:
    """A legacy file is adopted and made unique in one transaction: the refusal leaves it
    unadopted (no column added, no table created, no version table)."""
    await run_sql(
        backend,
        empty_database,
        [
            LEGACY_SESSIONS,
            _insert_session("agent:main:a", "sid-legacy"),
            _insert_session("agent:main:b", "sid-legacy"),
        ],
    )
    before = await raw_state(backend, empty_database)
    with pytest.raises(MigrationError, match="'sid-legacy' is shared by 2 sessions"):
        await SessionStorage(empty_database).connect()
    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) is None


async def test_the_database_refuses_a_second_session_with_the_same_id(
    backend: _Backend, database: str
) -> None:
    """Enforced below the store: even a writer that bypasses it cannot share an id."""
    await run_sql(backend, database, [_insert_session("agent:main:first", "sid-one")])
    with pytest.raises(Exception) as refused:
        await run_sql(backend, database, [_insert_session("agent:main:second", "sid-one")])
    assert "unique" in str(refused.value).lower()
    rows = await fetch(backend, database, "SELECT session_key FROM sessions")
    assert rows == [("agent:main:first",)]


async def test_a_session_cannot_take_another_sessions_id(manager: SessionManager) -> None:
    """The issue's reproduction: creating ``b`` with ``a``'s session id is refused, so
    deleting ``b`` can never empty ``a``'s transcript."""
    a = await manager.create("agent:main:a")
    await manager.append_message("agent:main:a", "user", "a's words")
    with pytest.raises(SessionStoreError):
        await manager.create("agent:main:b", session_id=a.session_id)
    assert await manager.get_session("agent:main:b") is None
    assert [e.content for e in await manager.get_transcript("agent:main:a")] == ["a's words"]


# -- 64-bit revision counters -------------------------------------------------------------


async def _column_types(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        columns = await conn.run_sync(lambda sync: sa.inspect(sync).get_columns("sessions"))
    return {c["name"]: str(c["type"].compile(dialect=engine.dialect)) for c in columns}


async def test_revision_counters_hold_64_bit_values(backend: _Backend, database: str) -> None:
    await run_sql(
        backend,
        database,
        [
            _insert_session("agent:main:clocked", "sid-clocked"),
            f"UPDATE sessions SET model_routing_revision = {BIG}, "
            f"collaboration_revision = {BIG + 1} WHERE session_key = 'agent:main:clocked'",
        ],
    )
    async with SessionStorage(database) as storage:
        node = await storage.get_session("agent:main:clocked")
        assert node is not None
        assert (node.model_routing_revision, node.collaboration_revision) == (BIG, BIG + 1)
        if backend.is_postgres:
            types = await _column_types(storage.engine)
            assert types["model_routing_revision"] == "BIGINT"
            assert types["collaboration_revision"] == "BIGINT"
            # Everything else that was 32-bit stays 32-bit.
            for column in ("spawn_depth", "compaction_count", "schema_version"):
                assert types[column] == "INTEGER", column


SQLITE_TRIGGER = """
CREATE TRIGGER sessions_touch_log AFTER UPDATE OF label ON sessions
BEGIN
    UPDATE sessions SET subject = 'touched' WHERE session_key = NEW.session_key;
END
"""
PG_TRIGGER = (
    """
    CREATE FUNCTION sessions_touch_log() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.subject := 'touched';
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER sessions_touch_log BEFORE UPDATE OF label ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_touch_log()
    """,
)


async def test_upgrade_to_0002_never_rebuilds_sessions(
    backend: _Backend, empty_database: str
) -> None:
    """No move-and-copy: the table definition, its rows, its triggers (ours and anyone's)
    and the id counters stay; 0002 only adds its index (and on Postgres changes the two
    column types in place)."""
    await _at_0001(empty_database)
    trigger = PG_TRIGGER if backend.is_postgres else (SQLITE_TRIGGER,)
    await run_sql(
        backend,
        empty_database,
        [
            *trigger,
            _insert_session("agent:main:kept", "sid-kept"),
            _insert_entry("agent:main:kept", "sid-kept", "m-1"),
        ],
    )
    before = await raw_state(backend, empty_database)

    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(" ".join(statement.split()).upper())

    async with unmigrated(empty_database) as storage:
        sa.event.listen(storage.engine.sync_engine, "before_cursor_execute", record)
        await migrate.upgrade(storage.engine, "0002")
        sa.event.remove(storage.engine.sync_engine, "before_cursor_execute", record)
        # At 0002 the only drift is what later revisions add (0009's metadata columns).
        later = {
            f"add_column None {table} metadata"
            for table in ("transcript_entries", "compacted_transcript_entries")
        }
        if backend.is_postgres:  # and 0010's keys (db/schema_compare.py)
            later |= {
                f"primary_key {table} (id) != (session_key, id)"
                for table in (
                    "transcript_entries",
                    "compacted_transcript_entries",
                    "session_summaries",
                    "session_context_states",
                )
            }
            later.add(
                "unique_index uq_summaries_session_compaction_index (session_id, "
                "compaction_index) != (session_key, md5(session_id), compaction_index)"
            )
        assert set((await migrate.check(storage.engine)).drift) == later

    ddl = [s for s in statements if s.startswith(("CREATE", "ALTER", "DROP", "INSERT INTO _"))]
    assert f"CREATE UNIQUE INDEX {INDEX.upper()} ON SESSIONS (SESSION_ID)" in ddl
    assert not [s for s in ddl if "TABLE" in s.split("(")[0] and not s.startswith("ALTER")]
    if backend.is_postgres:
        assert sorted(s for s in ddl if s.startswith("ALTER")) == [
            "ALTER TABLE SESSIONS ALTER COLUMN COLLABORATION_REVISION TYPE BIGINT",
            "ALTER TABLE SESSIONS ALTER COLUMN MODEL_ROUTING_REVISION TYPE BIGINT",
        ]
    else:
        assert not [s for s in ddl if s.startswith("ALTER")]

    after = await raw_state(backend, empty_database)
    assert after["rows"]["transcript_entries"] == before["rows"]["transcript_entries"]
    assert after["rows"]["sessions"] == before["rows"]["sessions"]
    if backend.is_postgres:
        assert after["triggers"] == before["triggers"]
        assert after["indexes"] == sorted(
            [
                *before["indexes"],
                (INDEX, f"CREATE UNIQUE INDEX {INDEX} ON public.sessions USING btree (session_id)"),
            ]
        )
    else:
        added = set(after["objects"]) - set(before["objects"])
        assert [(kind, name) for kind, name, *_ in added] == [("index", INDEX)]
        assert set(before["objects"]) <= set(after["objects"])  # table sql, triggers
        assert after["sqlite_sequence"] == before["sqlite_sequence"]

    # The foreign trigger still fires.
    await run_sql(
        backend,
        empty_database,
        ["UPDATE sessions SET label = 'x' WHERE session_key = 'agent:main:kept'"],
    )
    assert await fetch(backend, empty_database, "SELECT subject FROM sessions") == [("touched",)]


async def test_downgrade_from_0002_removes_exactly_what_it_added(
    backend: _Backend, database: str
) -> None:
    await run_sql(backend, database, [_insert_session("agent:main:kept", "sid-kept")])
    async with unmigrated(database) as storage:
        at_head = await raw_state(backend, database)
        await migrate.downgrade(storage.engine, "0001")
        names = await _index_names(storage.engine)
        assert INDEX not in names
        if backend.is_postgres:
            types = await _column_types(storage.engine)
            assert types["model_routing_revision"] == "INTEGER"
            assert types["collaboration_revision"] == "INTEGER"
        await migrate.upgrade(storage.engine, "head")
    assert await raw_state(backend, database) == at_head


async def _index_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        indexes = await conn.run_sync(lambda sync: sa.inspect(sync).get_indexes("sessions"))
    return {index["name"] for index in indexes}


async def test_downgrade_never_loses_a_64_bit_revision(backend: _Backend, database: str) -> None:
    """Postgres cannot narrow a value beyond 32 bits: the downgrade is refused, naming the
    session and the column, and changes nothing. SQLite's INTEGER keeps the value, so there
    the downgrade goes through and the value is still there."""
    await run_sql(
        backend,
        database,
        [
            _insert_session("agent:main:clocked", "sid-clocked"),
            f"UPDATE sessions SET model_routing_revision = {BIG} "
            "WHERE session_key = 'agent:main:clocked'",
        ],
    )
    before = await raw_state(backend, database)
    async with unmigrated(database) as storage:
        if backend.is_postgres:
            with pytest.raises(MigrationError) as refused:
                await migrate.downgrade(storage.engine, "0001")
            message = str(refused.value)
            assert "\n" not in message
            assert f"model_routing_revision of 'agent:main:clocked' ({BIG})" in message
            assert "collaboration_revision" not in message.split("fit")[1]
            assert await raw_state(backend, database) == before
            assert await version_rows(backend, database) == list(migrate.head_revisions())
        else:
            await migrate.downgrade(storage.engine, "0001")
            assert await version_rows(backend, database) == ["0001"]
    value = await fetch(backend, database, "SELECT model_routing_revision FROM sessions")
    assert value == [(BIG,)]
