"""Adopting databases written by the older raw-SQL store (tables present, no version
table, columns missing): every row survives, defaults fill what the old rows
never had, foreign tables stay untouched, and adoption happens once.

The legacy tables are written with plain SQL through the raw driver (stdlib ``sqlite3`` or
``asyncpg``), never through our code, on whichever backend the run uses."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from typing import Any, Protocol

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import (
    SessionManager,
    SessionStorage,
    SessionSummary,
    TranscriptEntry,
)
from opensquilla.session.db import migrate
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.engine import create_engine
from opensquilla.session.db.tables import SessionRow

try:  # the helper module is importable as ``tests.helpers`` once ``tests`` is a package
    from tests.helpers import TABLES, table_snapshot
except ModuleNotFoundError:  # pragma: no cover - rootdir-relative import (no tests/__init__)
    from helpers import TABLES, table_snapshot  # type: ignore[no-redef]


class _Backend(Protocol):
    @property
    def is_postgres(self) -> bool: ...


def _pg_dsn(target: str) -> str:
    return make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)


async def run_sql(backend: _Backend, target: str, statements: Sequence[str]) -> None:
    """Run plain SQL with the raw driver, one transaction."""
    if backend.is_postgres:
        conn = await asyncpg.connect(_pg_dsn(target))
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
        finally:
            await conn.close()
        return
    with contextlib.closing(sqlite3.connect(target)) as db, db:
        for statement in statements:
            db.execute(statement)


async def fetch(backend: _Backend, target: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` read with the raw driver."""
    if backend.is_postgres:
        conn = await asyncpg.connect(_pg_dsn(target))
        try:
            return [tuple(row) for row in await conn.fetch(query)]
        finally:
            await conn.close()
    with contextlib.closing(sqlite3.connect(target)) as db:
        return [tuple(row) for row in db.execute(query)]


LEGACY_SUMMARIES_SQLITE = """
CREATE TABLE session_summaries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    compaction_index INTEGER NOT NULL DEFAULT 0,
    summary_text TEXT NOT NULL,
    covered_through_id INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1
)
"""
# The same first-release table as a Postgres port with native types would declare it
# (64-bit ids and millisecond timestamps, 32-bit counters).
LEGACY_SUMMARIES_PG = """
CREATE TABLE session_summaries (
    id BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    compaction_index INTEGER NOT NULL DEFAULT 0,
    summary_text TEXT NOT NULL,
    covered_through_id BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1
)
"""


def legacy_summaries(backend: _Backend) -> str:
    return LEGACY_SUMMARIES_PG if backend.is_postgres else LEGACY_SUMMARIES_SQLITE


LEGACY_SUMMARY_ROW = """
INSERT INTO session_summaries
    (id, session_id, session_key, compaction_index, summary_text, covered_through_id,
     created_at, schema_version)
VALUES (7, 'sid-legacy', 'agent:main:legacy', 3, 'Earlier: the user asked for a plan.', 41,
        1751234567890, 1)
"""
ONE_COLUMN_SESSIONS = "CREATE TABLE sessions (session_key TEXT PRIMARY KEY)"
LEGACY_KEYS = ("agent:main:legacy-a", "agent:main:legacy-b", "agent:coder:legacy-c")
AGENT_TASKS = """
CREATE TABLE agent_tasks (
    task_id TEXT PRIMARY KEY,
    session_key TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    payload TEXT,
    updated_at INTEGER NOT NULL
)
"""
AGENT_TASK_ROWS = (
    "INSERT INTO agent_tasks VALUES ('t-1', 'agent:main:legacy-a', 'done', '{\"n\": 1}', 11)",
    "INSERT INTO agent_tasks VALUES ('t-2', 'agent:main:legacy-b', 'queued', NULL, 12)",
)

# Columns the older store added to session_summaries after its first release (SEMANTICS §3.6).
LATER_SUMMARY_COLUMNS = {
    "compaction_id",
    "trigger_reason",
    "summary_payload",
    "summary_format",
    "summary_source",
    "coverage_status",
    "missing_obligations",
    "critical_carry_forward",
    "tokens_before",
    "tokens_after",
    "removed_count",
    "kept_count",
    "chunk_count",
    "flush_receipt_status",
}
CONTEXT_STATE_COLUMNS = {
    "session_id",
    "session_key",
    "provider",
    "model",
    "state_kind",
    "payload",
    "covered_through_id",
    "created_at",
    "expires_at",
    "portable",
    "cacheable",
    "valid",
    "invalid_reason",
}


async def _columns(engine: AsyncEngine, table: str) -> list[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync: [c["name"] for c in sa.inspect(sync).get_columns(table)]
        )


async def _schema(engine: AsyncEngine) -> dict[str, Any]:
    """Tables, their columns (name, type, nullability) and index names: for "no change"."""

    def read(sync: sa.Connection) -> dict[str, Any]:
        inspector = sa.inspect(sync)
        out: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            columns = [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
            ]
            indexes = sorted(i["name"] or "" for i in inspector.get_indexes(table))
            out[table] = (columns, indexes)
        return out

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def _raw_schema(target: str) -> dict[str, Any]:
    """The schema read without our store (which would adopt the database first)."""
    engine = create_engine(parse_target(target))
    try:
        return await _schema(engine)
    finally:
        await engine.dispose()


async def _version(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return [
            r[0]
            for r in await conn.execute(
                sa.text("SELECT version_num FROM opensquilla_session_version")
            )
        ]


async def test_legacy_summary_gets_later_columns_and_defaults(
    backend: _Backend, empty_database: str
) -> None:
    """A summary written before the metadata columns existed reads back with NULL for the
    nullable ones and the server default for the NOT NULL ones (SEMANTICS §3.6)."""
    await run_sql(backend, empty_database, [legacy_summaries(backend), LEGACY_SUMMARY_ROW])

    async with SessionStorage(empty_database) as storage:
        columns = set(await _columns(storage.engine, "session_summaries"))
        assert columns >= LATER_SUMMARY_COLUMNS
        summary = await storage.get_latest_summary("sid-legacy")
        assert summary is not None
        assert (await migrate.check(storage.engine)).drift == ()

        # Everything the old row had is kept as it was.
        assert summary.id == 7
        assert summary.session_id == "sid-legacy"
        assert summary.session_key == "agent:main:legacy"
        assert summary.compaction_index == 3
        assert summary.summary_text == "Earlier: the user asked for a plan."
        assert summary.covered_through_id == 41
        assert summary.created_at == 1751234567890
        assert summary.schema_version == 1
        # Nullable later columns stay NULL ...
        assert summary.summary_payload is None
        assert summary.missing_obligations is None
        assert summary.critical_carry_forward is None
        assert summary.compaction_id is None
        assert summary.trigger_reason is None
        assert summary.tokens_before is None
        assert summary.tokens_after is None
        # ... NOT NULL ones take their server default.
        assert summary.summary_format == "text"
        assert summary.summary_source == "unknown"
        assert summary.coverage_status == "unknown"
        assert summary.removed_count == 0
        assert summary.kept_count == 0
        assert summary.chunk_count == 0
        assert summary.flush_receipt_status == "unknown"

        # The adopted table keeps working: a new summary follows the legacy one.
        saved = await storage.save_summary(
            SessionSummary(
                session_id="sid-legacy",
                session_key="agent:main:legacy",
                summary_text="Later: the plan was carried out.",
                covered_through_id=99,
            )
        )
        assert saved.id is not None and saved.id > 7
        assert saved.compaction_index == 4
        latest = await storage.get_latest_summary("sid-legacy")
        assert latest is not None and latest.id == saved.id
        assert len(await storage.get_all_summaries("sid-legacy")) == 2


LEGACY_TRANSCRIPT_SQLITE = """
CREATE TABLE transcript_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_calls TEXT,
    tool_call_id TEXT,
    created_at INTEGER NOT NULL,
    token_count INTEGER,
    schema_version INTEGER NOT NULL DEFAULT 1
)
"""
LEGACY_TRANSCRIPT_PG = """
CREATE TABLE transcript_entries (
    id BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    message_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_calls JSONB,
    tool_call_id TEXT,
    created_at BIGINT NOT NULL,
    token_count BIGINT,
    schema_version INTEGER NOT NULL DEFAULT 1
)
"""


async def test_ids_handed_out_before_adoption_are_never_reused(
    backend: _Backend, empty_database: str
) -> None:
    """The database's own id counter (``sqlite_sequence`` or the Postgres sequence) is
    kept: a row deleted before adoption never gets its id back."""
    await run_sql(
        backend,
        empty_database,
        [
            LEGACY_TRANSCRIPT_PG if backend.is_postgres else LEGACY_TRANSCRIPT_SQLITE,
            *(
                "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
                f"content, created_at) VALUES ('sid-t', 'agent:main:t', 'm-{n}', 'user', "
                f"'line {n}', {1751234567000 + n})"
                for n in range(1, 6)
            ),
            "DELETE FROM transcript_entries WHERE id > 3",
        ],
    )
    async with SessionStorage(empty_database) as storage:
        kept = await storage.get_transcript("sid-t")
        assert [(e.id, e.message_id, e.content) for e in kept] == [
            (n, f"m-{n}", f"line {n}") for n in (1, 2, 3)
        ]
        assert all(e.reasoning_content is None and e.turn_usage is None for e in kept)
        fresh = await storage.append_transcript_entry(
            TranscriptEntry(
                session_id="sid-t", session_key="agent:main:t", role="user", content="new"
            )
        )
        assert fresh.id is not None and fresh.id > 5
        assert [e.content for e in await storage.get_transcript("sid-t")][-1] == "new"


async def test_one_column_sessions_table_is_widened_into_a_working_store(
    backend: _Backend, empty_database: str
) -> None:
    """Upstream left such a table with three columns and broke later upserts; we widen it
    to the full row and create the missing tables whole."""
    await run_sql(backend, empty_database, [ONE_COLUMN_SESSIONS])

    async with SessionStorage(empty_database) as storage:
        state_columns = set(await _columns(storage.engine, "session_context_states"))
        assert state_columns >= CONTEXT_STATE_COLUMNS
        session_columns = set(await _columns(storage.engine, "sessions"))
        assert session_columns == set(SessionRow.__table__.columns.keys())
        assert (await migrate.check(storage.engine)).drift == ()

        manager = SessionManager(storage, inject_time_prefix=False)
        created = await manager.create(
            "agent:main:after-adoption", label="adopted", delivery_context={"to": "42"}
        )
        entry = await manager.append_message(
            "agent:main:after-adoption", "assistant", "hello", token_count=3
        )
        assert entry.id is not None
        node = await manager.get_session("agent:main:after-adoption")
        assert node is not None
        assert node.session_id == created.session_id
        assert node.label == "adopted"
        assert node.delivery_context == {"to": "42"}
        assert node.total_tokens == 3
        transcript = await manager.get_transcript("agent:main:after-adoption")
        assert [(e.role, e.content) for e in transcript] == [("assistant", "hello")]


async def test_one_column_sessions_rows_survive_with_an_identity(
    backend: _Backend, empty_database: str
) -> None:
    """Existing keys are kept and each gets its own non-empty session id, so the store can
    read and extend them."""
    await run_sql(
        backend,
        empty_database,
        [ONE_COLUMN_SESSIONS]
        + [f"INSERT INTO sessions (session_key) VALUES ('{key}')" for key in LEGACY_KEYS],
    )

    async with SessionStorage(empty_database) as storage:
        raw = dict(
            await fetch(backend, empty_database, "SELECT session_key, session_id FROM sessions")
        )
        assert set(raw) == set(LEGACY_KEYS)
        assert all(isinstance(sid, str) and sid.strip() for sid in raw.values())
        assert len(set(raw.values())) == len(LEGACY_KEYS)

        for key in LEGACY_KEYS:
            node = await storage.get_session(key)
            assert node is not None
            assert node.session_id == raw[key]
            assert node.epoch == 0
            assert node.status == "running"
        assert await storage.count_sessions() == len(LEGACY_KEYS)

        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.append_message(LEGACY_KEYS[0], "user", "first words after adoption")
        transcript = await manager.get_transcript(LEGACY_KEYS[0])
        assert [e.session_id for e in transcript] == [raw[LEGACY_KEYS[0]]]


async def test_foreign_tables_are_left_untouched(backend: _Backend, empty_database: str) -> None:
    """The rest of opensquilla keeps its own tables in the same database."""
    await run_sql(
        backend,
        empty_database,
        [
            ONE_COLUMN_SESSIONS,
            "INSERT INTO sessions (session_key) VALUES ('agent:main:legacy-a')",
            AGENT_TASKS,
            "CREATE INDEX idx_agent_tasks_status ON agent_tasks (status, updated_at)",
            *AGENT_TASK_ROWS,
        ],
    )
    query = "SELECT * FROM agent_tasks ORDER BY task_id"
    rows_before = await fetch(backend, empty_database, query)
    assert len(rows_before) == 2
    schema_before = (await _raw_schema(empty_database))["agent_tasks"]
    columns_before = [name for name, _type, _nullable in schema_before[0]]
    assert columns_before == ["task_id", "session_key", "status", "payload", "updated_at"]

    async with SessionStorage(empty_database) as storage:
        # Same columns in the same order, same types (its INTEGER is not "converted" like
        # one of ours would be on Postgres), same indexes.
        assert (await _schema(storage.engine))["agent_tasks"] == schema_before
        assert (await migrate.check(storage.engine)).drift == ()
    assert await fetch(backend, empty_database, query) == rows_before


async def test_second_connect_on_adopted_database_changes_nothing(
    backend: _Backend, empty_database: str
) -> None:
    """Adoption happens once; afterwards ``connect()`` only confirms the head."""
    await run_sql(
        backend,
        empty_database,
        [
            ONE_COLUMN_SESSIONS,
            *(f"INSERT INTO sessions (session_key) VALUES ('{key}')" for key in LEGACY_KEYS),
            legacy_summaries(backend),
            LEGACY_SUMMARY_ROW,
            AGENT_TASKS,
            *AGENT_TASK_ROWS,
        ],
    )
    async with SessionStorage(empty_database) as first:
        snapshot = await table_snapshot(first)
        schema = await _schema(first.engine)
        version = await _version(first.engine)
    assert version == list(migrate.head_revisions())
    assert len(snapshot["sessions"]) == len(LEGACY_KEYS)
    assert len(snapshot["session_summaries"]) == 1

    async with SessionStorage(empty_database) as second:
        assert await migrate.ensure_head(second.engine) is False
        assert await table_snapshot(second) == snapshot
        assert await _schema(second.engine) == schema
        assert await _version(second.engine) == version


async def test_half_adopted_database_is_adopted_again_safely(
    backend: _Backend, empty_database: str
) -> None:
    """A database whose schema is complete but whose version row is gone (an adoption cut
    short, or a restored backup) re-runs the baseline without touching a row."""
    await run_sql(
        backend,
        empty_database,
        [legacy_summaries(backend), LEGACY_SUMMARY_ROW],
    )
    async with SessionStorage(empty_database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:half")
        await manager.append_message("agent:main:half", "user", "kept across re-adoption")
        snapshot = await table_snapshot(storage)
        schema = await _schema(storage.engine)
        async with storage.engine.begin() as conn:
            await conn.execute(sa.text("DROP TABLE opensquilla_session_version"))

    async with SessionStorage(empty_database) as again:
        assert await _version(again.engine) == list(migrate.head_revisions())
        assert await table_snapshot(again) == snapshot
        assert await _schema(again.engine) == schema
        assert (await migrate.check(again.engine)).drift == ()


# -- Postgres: a legacy table ported with the older store's SQLite DDL ---------------------

SQLITE_STYLE_PORT = (
    """
    CREATE TABLE sessions (
        session_key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        delivery_context TEXT,
        origin TEXT,
        total_tokens INTEGER NOT NULL DEFAULT 0,
        total_tokens_fresh INTEGER NOT NULL DEFAULT 0,
        forked_from_parent INTEGER NOT NULL DEFAULT 0,
        fast_mode INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL DEFAULT 'running',
        agent_id TEXT NOT NULL DEFAULT 'main',
        epoch INTEGER NOT NULL DEFAULT 0
    )
    """,
    """
    INSERT INTO sessions VALUES
        ('agent:main:ported', 'sid-ported', 1700000000, 1700000100,
         '{"channel": "telegram", "to": "42"}', '', 120, 1, 0, 1, 'done', 'main', 2),
        ('agent:coder:ported', 'sid-coder', 1700000200, 1700000300,
         NULL, '{"surface": "cli"}', 0, 0, 1, 0, 'running', 'coder', 0)
    """,
    """
    CREATE TABLE transcript_entries (
        id SERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        session_key TEXT NOT NULL,
        message_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT,
        tool_calls TEXT,
        tool_call_id TEXT,
        turn_usage TEXT,
        created_at INTEGER NOT NULL,
        token_count INTEGER,
        schema_version INTEGER NOT NULL DEFAULT 1
    )
    """,
    """
    INSERT INTO transcript_entries
        (session_id, session_key, message_id, role, content, tool_calls, turn_usage,
         created_at, token_count)
    VALUES
        ('sid-ported', 'agent:main:ported', 'm-1', 'user', 'look it up', NULL, NULL,
         1700000010, 4),
        ('sid-ported', 'agent:main:ported', 'm-2', 'assistant', NULL,
         '[{"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]',
         '{"input_tokens": 10, "output_tokens": 5}', 1700000020, 15)
    """,
    """
    CREATE TABLE session_context_states (
        id SERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        session_key TEXT NOT NULL,
        provider TEXT NOT NULL DEFAULT 'portable',
        model TEXT,
        state_kind TEXT NOT NULL,
        payload TEXT NOT NULL DEFAULT '{}',
        covered_through_id INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        portable INTEGER NOT NULL DEFAULT 0,
        cacheable INTEGER NOT NULL DEFAULT 0,
        valid INTEGER NOT NULL DEFAULT 1,
        invalid_reason TEXT,
        schema_version INTEGER NOT NULL DEFAULT 1
    )
    """,
    """
    INSERT INTO session_context_states
        (session_id, session_key, provider, state_kind, payload, covered_through_id,
         created_at, portable, cacheable, valid, invalid_reason)
    VALUES
        ('sid-ported', 'agent:main:ported', 'openai', 'response_id', '{"k": [1, 2]}', 2,
         1700000030, 1, 0, 1, NULL),
        ('sid-ported', 'agent:main:ported', 'anthropic', 'cache', '{}', 1,
         1700000040, 0, 1, 0, 'session_reset')
    """,
)


async def test_sqlite_style_legacy_tables_are_adopted_with_their_values(
    backend: _Backend, empty_database: str
) -> None:
    """Legacy tables in the older store's SQLite style (integer booleans, JSON in text,
    integer timestamps) read back through the store with their values on both backends. On
    Postgres the columns are converted (boolean, JSONB, BIGINT); SQLite keeps them, since it
    stores by type affinity."""
    statements = SQLITE_STYLE_PORT
    if not backend.is_postgres:
        statements = tuple(
            sql.replace("SERIAL PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT")
            for sql in SQLITE_STYLE_PORT
        )
    await run_sql(backend, empty_database, statements)

    async with SessionStorage(empty_database) as storage:
        assert (await migrate.check(storage.engine)).drift == ()
        if backend.is_postgres:
            await _assert_postgres_types_converted(backend, empty_database)

        node = await storage.get_session("agent:main:ported")
        assert node is not None
        assert node.session_id == "sid-ported"
        assert node.created_at == 1700000000
        assert node.delivery_context == {"channel": "telegram", "to": "42"}
        assert node.origin is None  # the empty text was never JSON
        assert node.total_tokens == 120
        assert node.total_tokens_fresh is True
        assert node.forked_from_parent is False
        assert node.fast_mode is True
        assert node.status == "done"
        assert node.epoch == 2
        coder = await storage.get_session("agent:coder:ported")
        assert coder is not None
        assert coder.origin == {"surface": "cli"}
        assert coder.forked_from_parent is True
        assert coder.fast_mode is False

        transcript = await storage.get_transcript("sid-ported")
        assert [e.message_id for e in transcript] == ["m-1", "m-2"]
        assert transcript[0].tool_calls is None
        assert transcript[1].tool_calls == [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ]
        assert transcript[1].turn_usage == {"input_tokens": 10, "output_tokens": 5}

        states = await storage.get_context_states("agent:main:ported", valid_only=False)
        assert [(s.provider, s.valid, s.portable, s.cacheable) for s in states] == [
            ("openai", True, True, False),
            ("anthropic", False, False, True),
        ]
        assert states[0].payload == {"k": [1, 2]}
        assert states[1].invalid_reason == "session_reset"

        # Millisecond timestamps now fit: the store's own writes work on the ported rows.
        manager = SessionManager(storage, inject_time_prefix=False)
        entry = await manager.append_message("agent:main:ported", "user", "after the port")
        assert entry.id is not None and entry.id > max(e.id or 0 for e in transcript)
        touched = await storage.get_session("agent:main:ported")
        assert touched is not None and touched.updated_at > 2**31

        # The epoch guard covers the ported table too.
        with pytest.raises(sa.exc.IntegrityError):
            async with storage.engine.begin() as conn:
                await conn.execute(
                    sa.text("UPDATE sessions SET epoch = 1 WHERE session_key = 'agent:main:ported'")
                )


async def _assert_postgres_types_converted(backend: _Backend, target: str) -> None:
    types = {
        (table, column): data_type
        for table, column, data_type in await fetch(
            backend,
            target,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public'",
        )
    }
    assert set(TABLES) <= {table for table, _ in types}
    assert types["sessions", "fast_mode"] == "boolean"
    assert types["sessions", "delivery_context"] == "jsonb"
    assert types["sessions", "created_at"] == "bigint"
    assert types["sessions", "epoch"] == "bigint"
    assert types["transcript_entries", "id"] == "bigint"
    assert types["transcript_entries", "tool_calls"] == "jsonb"
    assert types["session_context_states", "payload"] == "jsonb"
    assert types["session_context_states", "valid"] == "boolean"
