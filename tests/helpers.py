"""Shared test helpers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from opensquilla.session import SessionStorage

TABLES = (
    "sessions",
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
)


@contextlib.asynccontextmanager
async def unmigrated_storage(dsn: str) -> AsyncIterator[SessionStorage]:
    """A whole ``SessionStorage`` on ``dsn`` with its schema left as it is (the command
    line's ``overview.unmigrated`` opens only the engine's lifecycle)."""
    storage = SessionStorage(dsn)
    await storage.connect_without_migrating()
    try:
        yield storage
    finally:
        await storage.close()


async def table_snapshot(storage: SessionStorage) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the five tables, in primary-key order: for "nothing changed" checks."""
    snapshot: dict[str, list[tuple[Any, ...]]] = {}
    async with storage.engine.connect() as conn:
        for table in TABLES:
            key = "session_key" if table == "sessions" else "id"
            rows = await conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {key}"))
            snapshot[table] = [tuple(row) for row in rows]
    return snapshot


REPO_ROOT = Path(__file__).resolve().parents[1]
DSN_ENV = "OPENSQUILLA_SESSION_DSN"


def run_alembic(*args: str, dsn: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m alembic ARGS`` from the repository root, as an operator runs it: the DSN
    in ``OPENSQUILLA_SESSION_DSN`` when given, otherwise the variable unset."""
    env = {name: value for name, value in os.environ.items() if name != DSN_ENV}
    if dsn is not None:
        env[DSN_ENV] = dsn
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only: a loaded machine needs seconds
        check=False,
    )


# Revision 0007's counts of the archive, and the same counts computed afresh from it.
ARCHIVE_COUNTS = (
    "SELECT session_id, compaction_id, archived, unlinked FROM canonical_archive_counts"
)
ARCHIVE_GROUPS = (
    "SELECT session_id, compaction_id, count(*), "
    "sum(CASE WHEN original_entry_id IS NULL THEN 1 ELSE 0 END) "
    "FROM compacted_transcript_entries GROUP BY session_id, compaction_id"
)


def sorted_groups(rows: Any) -> list[tuple[Any, ...]]:
    """``(session_id, compaction_id, archived, unlinked)`` rows in one order on both
    backends (the NULL compaction first), counts as ints."""
    found = [(row[0], row[1], int(row[2]), int(row[3])) for row in rows]
    return sorted(found, key=lambda row: (row[0], row[1] is not None, row[1] or ""))


async def assert_archive_counts_exact(storage: SessionStorage) -> list[tuple[Any, ...]]:
    """The counter rows equal a fresh ``GROUP BY`` of the archive; the rows."""
    async with storage.engine.connect() as conn:
        counted = sorted_groups(await conn.execute(sa.text(ARCHIVE_COUNTS)))
        grouped = sorted_groups(await conn.execute(sa.text(ARCHIVE_GROUPS)))
    assert counted == grouped
    return counted
