"""Only our own tables are adopted (issue 11, class 2).

A table that merely shares one of the five names (``sessions``, ``transcript_entries``,
``compacted_transcript_entries``, ``session_summaries``, ``session_context_states``) but whose
key columns are not ours is refused with a ``MigrationError`` naming the table and what is
missing. The database is left exactly as it was: no ``ADD COLUMN``, no trigger, no index,
no version table, every row as it was. Otherwise adoption would graft some sixty
columns and our triggers onto someone else's table, stamp it, and a later
``db downgrade base`` would drop it with its rows.

Each case runs through ``SessionStorage.connect()``, through ``opensquilla-session db
upgrade``, and (once) through the ``alembic`` command line, on the configured backend."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.errors import MigrationError
from tests.helpers import run_alembic

from ..cli.support import cli, run
from .raw import fetch, raw_state, run_sql, version_rows
from .test_legacy_adoption import LEGACY_SUMMARY_ROW, _Backend, legacy_summaries

# For each of our names, someone else's table called that, with a row or two, and what
# the refusal must say is missing. Plain DDL both backends accept.
FOREIGN: dict[str, tuple[list[str], str]] = {
    "sessions": (
        [
            "CREATE TABLE sessions (id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, token TEXT)",
            "INSERT INTO sessions VALUES (1, 'u-1', 'tok-a'), (2, 'u-2', NULL)",
        ],
        "its primary key is (id), not (session_key)",
    ),
    "transcript_entries": (
        [
            "CREATE TABLE transcript_entries (id INTEGER PRIMARY KEY, course_id TEXT, "
            "spoken_text TEXT, created_at BIGINT)",
            "INSERT INTO transcript_entries VALUES (7, 'c-1', 'hello class', 1700000000000)",
        ],
        "it lacks column(s) session_id, session_key, message_id, role",
    ),
    "compacted_transcript_entries": (
        [
            "CREATE TABLE compacted_transcript_entries (entry_id TEXT PRIMARY KEY, body TEXT)",
            "INSERT INTO compacted_transcript_entries VALUES ('e-1', 'zipped')",
        ],
        "its primary key is (entry_id), not (id)",
    ),
    "session_summaries": (
        [
            "CREATE TABLE session_summaries (session_key TEXT PRIMARY KEY, summary TEXT)",
            "INSERT INTO session_summaries VALUES ('agent:main:x', 'a summary of ours?')",
        ],
        "its primary key is (session_key), not (id)",
    ),
    "session_context_states": (
        [
            "CREATE TABLE session_context_states (id INTEGER PRIMARY KEY, session_id TEXT, "
            "state TEXT)",
            "INSERT INTO session_context_states VALUES (1, 'sid', 'open')",
        ],
        "it lacks column(s) session_key, state_kind, created_at",
    ),
}

# Something the rest of the application keeps next to it: must survive too.
NEIGHBOUR = [
    "CREATE TABLE agent_tasks (task_id TEXT PRIMARY KEY, session_key TEXT, status TEXT)",
    "INSERT INTO agent_tasks VALUES ('t-1', 'agent:main:a', 'done')",
]


def _assert_one_line_refusal(message: str, table: str, missing: str) -> None:
    assert "\n" not in message
    assert f"table {table} is not an opensquilla session table" in message
    assert missing in message, message
    assert "nothing was changed" in message


@pytest.mark.parametrize("table", list(FOREIGN))
async def test_connect_refuses_a_foreign_table_and_changes_nothing(
    backend: _Backend, empty_database: str, table: str
) -> None:
    statements, missing = FOREIGN[table]
    await run_sql(backend, empty_database, [*statements, *NEIGHBOUR])
    before = await raw_state(backend, empty_database)

    storage = SessionStorage(empty_database)
    with pytest.raises(MigrationError) as refused:
        await storage.connect()
    assert not storage.is_connected
    _assert_one_line_refusal(str(refused.value), table, missing)

    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) is None


@pytest.mark.parametrize("table", list(FOREIGN))
def test_db_upgrade_refuses_a_foreign_table_in_one_line(
    backend: _Backend, empty_database: str, table: str
) -> None:
    statements, missing = FOREIGN[table]
    run(run_sql(backend, empty_database, [*statements, *NEIGHBOUR]))
    before = run(raw_state(backend, empty_database))

    result = cli(empty_database, "db", "upgrade")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    _assert_one_line_refusal(lines[0], table, missing)
    assert "Traceback" not in result.output

    assert run(raw_state(backend, empty_database)) == before
    assert run(version_rows(backend, empty_database)) is None


async def test_a_foreign_table_blocks_adopting_our_own_tables_next_to_it(
    backend: _Backend, empty_database: str
) -> None:
    """The check runs before any write: a genuine legacy table in the same database is not
    widened either (nothing is half-adopted)."""
    statements, _missing = FOREIGN["sessions"]
    await run_sql(
        backend, empty_database, [*statements, legacy_summaries(backend), LEGACY_SUMMARY_ROW]
    )
    before = await raw_state(backend, empty_database)
    with pytest.raises(MigrationError, match="table sessions is not"):
        await SessionStorage(empty_database).connect()
    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) is None


async def test_every_foreign_table_is_named_in_the_one_refusal(
    backend: _Backend, empty_database: str
) -> None:
    await run_sql(
        backend,
        empty_database,
        [*FOREIGN["sessions"][0], *FOREIGN["session_context_states"][0]],
    )
    with pytest.raises(MigrationError) as refused:
        await SessionStorage(empty_database).connect()
    message = str(refused.value)
    assert "table sessions is not" in message
    assert "table session_context_states is not" in message
    assert "\n" not in message


async def test_hostile_column_names_do_not_break_the_one_line(
    backend: _Backend, empty_database: str
) -> None:
    """Column names come from someone else's schema: control characters are shown
    escaped, so the refusal stays one line."""
    await run_sql(
        backend,
        empty_database,
        ['CREATE TABLE sessions (id INTEGER PRIMARY KEY, "evil\nname\x1b[31m" TEXT)'],
    )
    with pytest.raises(MigrationError) as refused:
        await SessionStorage(empty_database).connect()
    message = str(refused.value)
    assert "\n" not in message and "\x1b" not in message
    assert "evil\\x0aname\\x1b[31m" in message


async def test_alembic_command_line_refuses_a_foreign_table_in_one_line(
    backend: _Backend, empty_database: str
) -> None:
    statements, missing = FOREIGN["sessions"]
    await run_sql(backend, empty_database, statements)
    before = await raw_state(backend, empty_database)

    done = await asyncio.to_thread(run_alembic, "upgrade", "head", dsn=empty_database)
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED:")]
    assert len(failed) == 1, done.stdout
    _assert_one_line_refusal(failed[0], "sessions", missing)

    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) is None


# A table that shares our name *and our key* but is not ours (issue 31, item 2): a web
# framework's session table. Before, its key alone made it ours: ``connect()`` grafted some
# sixty columns and the epoch trigger onto it, its rows became sessions updated at 0, and
# ``prune --older-than 30d``, ``cap`` or ``db downgrade base`` then deleted them.
LOOKALIKE_SESSIONS = [
    "CREATE TABLE sessions (session_key TEXT PRIMARY KEY, session_data TEXT NOT NULL, "
    "expire_date INTEGER NOT NULL)",
    "INSERT INTO sessions VALUES ('k7x9', 'eyJ1c2VyIjoxfQ==', 1900000000), "
    "('agent:main:a', 'e30=', 1900000001)",
]
LOOKALIKE_MISSING = (
    "it has column(s) session_data, expire_date that the older store's table never had"
)


async def test_connect_refuses_a_lookalike_sessions_table_keyed_by_session_key(
    backend: _Backend, empty_database: str
) -> None:
    await run_sql(backend, empty_database, [*LOOKALIKE_SESSIONS, *NEIGHBOUR])
    before = await raw_state(backend, empty_database)

    storage = SessionStorage(empty_database)
    with pytest.raises(MigrationError) as refused:
        await storage.connect()
    assert not storage.is_connected
    _assert_one_line_refusal(str(refused.value), "sessions", LOOKALIKE_MISSING)

    assert await raw_state(backend, empty_database) == before
    assert await version_rows(backend, empty_database) is None


def test_db_upgrade_and_prune_leave_a_lookalike_sessions_table_alone(
    backend: _Backend, empty_database: str
) -> None:
    run(run_sql(backend, empty_database, LOOKALIKE_SESSIONS))
    before = run(raw_state(backend, empty_database))

    for args in (("db", "upgrade"), ("prune", "--older-than", "30d")):
        result = cli(empty_database, *args)
        assert result.exit_code != 0, (args, result.output)
        assert "Traceback" not in result.output
        assert "table sessions is not an opensquilla session table" in result.stderr
        assert run(raw_state(backend, empty_database)) == before
    assert run(version_rows(backend, empty_database)) is None


async def test_the_older_stores_own_sessions_columns_are_still_adopted(
    backend: _Backend, empty_database: str
) -> None:
    """The rule is "no column the older store never had", not "only the key": a legacy
    ``sessions`` with a handful of its own columns is adopted, its rows kept."""
    await run_sql(
        backend,
        empty_database,
        [
            "CREATE TABLE sessions (session_key TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
            "created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, label TEXT)",
            "INSERT INTO sessions VALUES ('agent:main:kept', 'sid-kept', 1, 2, 'x')",
        ],
    )
    async with SessionStorage(empty_database) as storage:
        assert storage.is_connected
    rows = await fetch(backend, empty_database, "SELECT session_key, label FROM sessions")
    assert [tuple(r) for r in rows] == [("agent:main:kept", "x")]


def test_every_column_of_ours_is_known_to_the_baseline_check() -> None:
    """A database at head whose version row is gone re-runs the baseline, whose check then
    sees every column later revisions added: each must be known to it as ours, or the
    store's own tables would be refused as foreign."""
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext

    from opensquilla.session.db import migrate
    from opensquilla.session.db.base import Base

    baseline = migrate.script_directory().get_revision("0001").module
    context = MigrationContext.configure(dialect_name="sqlite")
    for table, (columns, _indexes, _options) in baseline.TABLES.items():
        with Operations.context(context):
            declared = columns()
        known = {c.name for c in declared if isinstance(c, sa.Column)}
        known |= baseline.LATER_COLUMNS.get(table, frozenset())
        modelled = set(Base.metadata.tables[table].c.keys())
        assert modelled <= known, (table, modelled - known)
