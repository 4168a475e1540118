"""Helpers shared by the reliability tests: running workers, whole-database invariants,
and raw access to the database that does not go through the code under test."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from opensquilla.session import SessionStorage

# Hang guards only, never a way to make things overlap: a worker waiting for another side
# of a race gives up (and reports it) after HANG_GUARD; the parent gives up on the workers
# after PROCESS_TIMEOUT, later, so that it normally sees their reports.
HANG_GUARD = 120.0
PROCESS_TIMEOUT = 300.0


async def in_processes(
    pool: ProcessPoolExecutor,
    calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]],
    *,
    distinct: bool = True,
) -> list[Any]:
    """Run each ``(function, args)`` in a pool worker; results in call order.

    With ``distinct`` every call must have run in a different process (the results carry
    the worker's pid), so a "race between processes" really was one.
    """
    loop = asyncio.get_running_loop()
    futures = [loop.run_in_executor(pool, functools.partial(fn, *args)) for fn, args in calls]
    results = await asyncio.wait_for(asyncio.gather(*futures), PROCESS_TIMEOUT)
    if distinct:
        pids = [result["pid"] for result in results]
        assert len(set(pids)) == len(pids), f"calls shared a process: {pids}"
    return list(results)


def is_postgres_target(target: str) -> bool:
    return target.startswith("postgresql")


def asyncpg_dsn(target: str) -> str:
    return make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)


def admin_dsn(target: str) -> str:
    """The server's maintenance database, for looking at (or ending) others' sessions."""
    return (
        make_url(target)
        .set(drivername="postgresql", database="postgres")
        .render_as_string(hide_password=False)
    )


def database_name(target: str) -> str:
    name = make_url(target).database
    assert name is not None
    return name


async def raw_rows(target: str, query: str) -> list[tuple[Any, ...]]:
    """``query`` through the raw driver (stdlib ``sqlite3`` or ``asyncpg``)."""
    if is_postgres_target(target):
        conn = await asyncpg.connect(asyncpg_dsn(target))
        try:
            return [tuple(row) for row in await conn.fetch(query)]
        finally:
            await conn.close()
    db = sqlite3.connect(target, timeout=30)
    try:
        return [tuple(row) for row in db.execute(query)]
    finally:
        db.close()


ORPHAN_QUERIES = {
    "transcript_entries": (
        "SELECT session_key, session_id FROM transcript_entries "
        "WHERE session_id NOT IN (SELECT session_id FROM sessions)"
    ),
    "compacted_transcript_entries": (
        "SELECT session_key, session_id FROM compacted_transcript_entries "
        "WHERE session_id NOT IN (SELECT session_id FROM sessions)"
    ),
    "session_summaries": (
        "SELECT session_key, session_id FROM session_summaries "
        "WHERE session_id NOT IN (SELECT session_id FROM sessions)"
    ),
    "session_context_states": (
        "SELECT session_key, session_id FROM session_context_states "
        "WHERE session_key NOT IN (SELECT session_key FROM sessions)"
    ),
}


async def orphan_rows(storage: SessionStorage) -> dict[str, list[tuple[Any, ...]]]:
    """Rows that belong to no session: transcript, archive and summaries by generation,
    context states by key (a reset keeps the key's older states, invalidated)."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    async with storage.engine.connect() as conn:
        for table, query in ORPHAN_QUERIES.items():
            rows = [tuple(row) for row in await conn.execute(sa.text(query))]
            if rows:
                found[table] = rows
    return found


async def token_mismatches(storage: SessionStorage) -> list[tuple[Any, ...]]:
    """Sessions whose ``total_tokens`` is not the sum of their transcript's token counts.

    Only meaningful for workloads that append with ``token_count`` and no ``turn_usage``
    and never compact (compaction keeps the total while moving rows to the archive, which
    is counted here too).
    """
    query = """
        SELECT s.session_key, s.total_tokens, COALESCE(t.tokens, 0) + COALESCE(a.tokens, 0)
        FROM sessions s
        LEFT JOIN (SELECT session_id, SUM(token_count) AS tokens FROM transcript_entries
                   GROUP BY session_id) t ON t.session_id = s.session_id
        LEFT JOIN (SELECT session_id, SUM(token_count) AS tokens
                   FROM compacted_transcript_entries GROUP BY session_id) a
               ON a.session_id = s.session_id
        WHERE s.forked_from_parent = :no
    """
    async with storage.engine.connect() as conn:
        rows = await conn.execute(sa.text(query), {"no": False})
        return [tuple(row) for row in rows if row[1] != row[2]]


def archive_documents(directory: Path) -> list[dict[str, Any]]:
    """Every published reset archive in ``directory`` (temporary files are not archives)."""
    if not directory.exists():
        return []
    return [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(directory.glob("*.json"))
        if not path.name.startswith(".")
    ]


def overlapping(spans: Sequence[tuple[float, float]]) -> bool:
    """Whether every span overlaps every other (the latest start precedes the earliest end).

    Spans are ``time.monotonic()`` values, which one machine's processes share."""
    return max(start for start, _ in spans) < min(end for _, end in spans)
