"""Revision 0010 on a populated plain PostgreSQL database: how long, and which locks.

Fills a fresh database at revision 0009 with ``-n`` live transcript entries over ``n / 100``
sessions (default 1,000,000 over 10,000; ``INSERT ... SELECT generate_series``), a tenth as
many archived rows, one summary and one context state per session, then runs the upgrade to
0010 while:

* a second connection polls ``pg_locks`` in a tight loop and keeps, per table of ours, the
  strongest lock mode any other backend held on it and for how long (first to last sighting);
* a writer appends one transcript row at a time on a third connection and keeps its slowest
  append (what a gateway worker would have waited);
* every DDL statement of the upgrade is timed (the exact time each ``ALTER TABLE`` held its
  ``ACCESS EXCLUSIVE`` lock: each runs in autocommit).

Run: ``python bench/upgrade_keys.py [-n 1000000]`` (``BENCH_POSTGRES_URL`` names the server).
The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import asyncpg
import sqlalchemy as sa

from opensquilla.session.db import migrate
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.engine import create_engine
from opensquilla.session.db.tables import CHILD_TABLES

try:
    from bench.common import PG_URL
except ImportError:  # run as a script from bench/
    from common import PG_URL  # type: ignore[no-redef]

MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)
TABLES = (*CHILD_TABLES, "sessions", "session_archives", "canonical_archive_counts")

FILL = [
    "INSERT INTO sessions (session_key, session_id, created_at, updated_at) "
    "SELECT 'agent:main:bench-' || s, 'sid-' || s, 0, 0 FROM generate_series(1, {sessions}) s",
    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
    "created_at) SELECT 'sid-' || (i % {sessions} + 1), 'agent:main:bench-' || "
    "(i % {sessions} + 1), 'm' || i, 'user', 'entry number ' || i || ' of the bench', i "
    "FROM generate_series(1, {entries}) i",
    "INSERT INTO compacted_transcript_entries (session_id, session_key, compaction_id, "
    "compaction_index, original_entry_id, message_id, role, content, created_at, archived_at) "
    "SELECT 'sid-' || (i % {sessions} + 1), 'agent:main:bench-' || (i % {sessions} + 1), "
    "'c1', 1, i, 'a' || i, 'user', 'archived ' || i, i, i FROM generate_series(1, {archived}) i",
    "INSERT INTO session_summaries (session_id, session_key, compaction_index, summary_text, "
    "created_at) SELECT 'sid-' || s, 'agent:main:bench-' || s, 1, 'summary', 0 "
    "FROM generate_series(1, {sessions}) s",
    "INSERT INTO session_context_states (session_id, session_key, state_kind, created_at) "
    "SELECT 'sid-' || s, 'agent:main:bench-' || s, 'summary', 0 "
    "FROM generate_series(1, {sessions}) s",
    # The counts as 0007's triggers would have them (the archive was filled in one statement).
    "DELETE FROM canonical_archive_counts",
    "INSERT INTO canonical_archive_counts (session_id, compaction_id, archived, unlinked) "
    "SELECT session_id, compaction_id, count(*), 0 FROM compacted_transcript_entries "
    "GROUP BY session_id, compaction_id",
    "ANALYZE",
]

LOCKS = (
    "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
    "WHERE l.granted AND l.pid <> pg_backend_pid() AND l.pid <> $1 "
    "AND c.relname = ANY($2::text[])"
)


async def _watch_locks(dsn: str, writer_pid: int, stop: asyncio.Event) -> dict[str, Any]:
    """Per table: the strongest mode seen, and first/last sighting of it (seconds)."""
    seen: dict[str, list[Any]] = {}
    conn = await asyncpg.connect(dsn)
    polls = 0
    try:
        while not stop.is_set():
            now = time.perf_counter()
            for table, mode in await conn.fetch(LOCKS, writer_pid, list(TABLES)):
                rank = MODES.index(mode)
                entry = seen.get(table)
                if entry is None or rank > entry[0]:
                    seen[table] = [rank, now, now]
                elif rank == entry[0]:
                    entry[2] = now
            polls += 1
            await asyncio.sleep(0)
    finally:
        await conn.close()
    return {"polls": polls, "tables": seen}


async def _write_while(dsn: str, stop: asyncio.Event, ready: asyncio.Future[int]) -> float:
    """Append rows one by one until ``stop``; the slowest append in milliseconds."""
    conn = await asyncpg.connect(dsn)
    ready.set_result(await conn.fetchval("SELECT pg_backend_pid()"))
    slowest = 0.0
    n = 0
    try:
        while not stop.is_set():
            start = time.perf_counter()
            await conn.execute(
                "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
                "content, created_at) VALUES ('sid-1', 'agent:main:bench-1', $1, 'user', "
                "'written during the upgrade', 0)",
                f"w{n}",
            )
            slowest = max(slowest, (time.perf_counter() - start) * 1000)
            n += 1
            await asyncio.sleep(0.002)
    finally:
        await conn.close()
    return slowest


async def run(entries: int) -> None:
    name = f"helper30keys_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_URL)
    await admin.execute(f"CREATE DATABASE {name}")
    dsn = PG_URL.rsplit("/", 1)[0] + "/" + name
    sessions = max(1, entries // 100)
    try:
        engine = create_engine(parse_target(dsn))
        await migrate.upgrade(engine, "0009")
        conn = await asyncpg.connect(dsn)
        start = time.perf_counter()
        for statement in FILL:
            await conn.execute(
                statement.format(sessions=sessions, entries=entries, archived=entries // 10)
            )
        await conn.close()
        print(
            f"filled: {entries:,} entries, {entries // 10:,} archived, {sessions:,} sessions "
            f"in {time.perf_counter() - start:.1f} s"
        )

        ddl: list[tuple[str, float]] = []
        began: dict[int, float] = {}

        def before(_c: Any, cursor: Any, statement: str, *_: Any) -> None:
            began[id(cursor)] = time.perf_counter()

        def after(_c: Any, cursor: Any, statement: str, *_: Any) -> None:
            if (
                statement.lstrip()
                .upper()
                .startswith(("ALTER", "CREATE", "DROP", "INSERT", "DELETE"))
            ):
                ddl.append(
                    (" ".join(statement.split())[:110], time.perf_counter() - began[id(cursor)])
                )

        sa.event.listen(engine.sync_engine, "before_cursor_execute", before)
        sa.event.listen(engine.sync_engine, "after_cursor_execute", after)
        stop = asyncio.Event()
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        writer = asyncio.create_task(_write_while(dsn, stop, ready))
        watcher = asyncio.create_task(_watch_locks(dsn, await ready, stop))
        start = time.perf_counter()
        await migrate.upgrade(engine, "head")
        elapsed = time.perf_counter() - start
        stop.set()
        slowest = await writer
        locks = await watcher
        status = await migrate.check(engine)
        await engine.dispose()
        print(f"upgrade 0009 -> 0010: {elapsed:.2f} s (drift after: {list(status.drift)})")
        print(f"slowest concurrent append: {slowest:.1f} ms")
        print(f"strongest lock per table ({locks['polls']:,} polls of pg_locks):")
        for table, (rank, first, last) in sorted(locks["tables"].items()):
            print(f"  {table:30} {MODES[rank]:26} seen for {(last - first) * 1000:8.1f} ms")
        print("statements over 5 ms:")
        for statement, seconds in ddl:
            if seconds >= 0.005:
                print(f"  {seconds * 1000:9.1f} ms  {statement}")
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="live transcript entries")
    asyncio.run(run(parser.parse_args().n))


if __name__ == "__main__":
    main()
