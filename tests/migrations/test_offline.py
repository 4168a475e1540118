"""Offline migrations (issue 11, class 15): ``alembic upgrade head --sql`` writes a correct
script for an empty database of the configured dialect (it builds the same schema an
online upgrade does), says that adopting an existing database needs an online upgrade,
and an unusable configuration is refused in one line, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import asyncpg

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate
from opensquilla.session.usecases.overview import unmigrated
from tests.helpers import run_alembic

from .raw import raw_state, version_rows
from .test_legacy_adoption import _Backend, _pg_dsn


async def _offline_script(target: str, *revisions: str) -> str:
    done = await asyncio.to_thread(run_alembic, "upgrade", *revisions, "--sql", dsn=target)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


async def _apply(backend: _Backend, target: str, script: str) -> None:
    """Run the script as an operator would (psql / sqlite3): the raw driver, no store."""
    if backend.is_postgres:
        conn = await asyncpg.connect(_pg_dsn(target))
        try:
            await conn.execute(script)
        finally:
            await conn.close()
        return
    with contextlib.closing(sqlite3.connect(target, isolation_level=None)) as db:
        db.executescript(script)


def _layout(state: dict[str, Any]) -> dict[str, Any]:
    """The schema part of a raw state, DDL text compared modulo whitespace (the offline
    script indents with spaces, SQLAlchemy's online DDL with tabs)."""
    state = {k: v for k, v in state.items() if k not in ("rows", "sqlite_sequence")}
    if "objects" in state:
        state["objects"] = [
            (kind, name, table, " ".join((sql or "").split()))
            for kind, name, table, sql in state["objects"]
        ]
    return state


async def test_offline_script_builds_the_same_schema_as_an_online_upgrade(
    backend: _Backend, empty_database: str, tmp_path: Path
) -> None:
    script = await _offline_script(empty_database, "head")
    assert script.lstrip().startswith("BEGIN;") and script.rstrip().endswith("COMMIT;")
    await _apply(backend, empty_database, script)

    async with unmigrated(empty_database) as storage:
        status = await migrate.check(storage.engine)
    assert status.at_head and status.drift == (), status

    # The very same schema (tables, columns, indexes, triggers) as connect() builds.
    online, cleanup = await backend.fresh_empty(tmp_path)
    try:
        async with SessionStorage(online):
            pass
        offline_state = _layout(await raw_state(backend, empty_database))
        online_state = _layout(await raw_state(backend, online))
        assert offline_state == online_state
    finally:
        await cleanup()

    # And it is a working store.
    async with SessionStorage(empty_database) as storage:
        assert await migrate.ensure_head(storage.engine) is False
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:offline")
        await manager.append_message("agent:main:offline", "user", "built from a script")
        assert len(await manager.get_transcript("agent:main:offline")) == 1


async def test_offline_script_says_adoption_needs_an_online_upgrade(
    empty_database: str,
) -> None:
    script = await _offline_script(empty_database, "head")
    assert "creates the schema in an EMPTY database" in script
    assert "run an online" in script and "upgrade instead" in script


async def test_offline_script_from_0001_upgrades_a_deployed_database(
    backend: _Backend, empty_database: str
) -> None:
    """``upgrade 0001:head --sql``: the script a DBA applies to a database already at 0001."""
    async with unmigrated(empty_database) as storage:
        await migrate.upgrade(storage.engine, "0001")
    script = await _offline_script(empty_database, "0001:head")
    assert "CREATE UNIQUE INDEX uq_sessions_session_id ON sessions (session_id)" in script
    assert ("TYPE BIGINT" in script) == backend.is_postgres
    await _apply(backend, empty_database, script)
    assert await version_rows(backend, empty_database) == list(migrate.head_revisions())
    async with unmigrated(empty_database) as storage:
        assert (await migrate.check(storage.engine)).drift == ()


async def test_offline_refuses_an_unusable_dsn_in_one_line(tmp_path: Path) -> None:
    done = await asyncio.to_thread(
        run_alembic, "upgrade", "head", "--sql", dsn="mysql://app:S3CRET@db/sessions"
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert "S3CRET" not in done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED:")]
    assert len(failed) == 1, done.stdout
    assert "unsupported database 'mysql'" in failed[0]
    assert not (tmp_path / "sessions").exists()
