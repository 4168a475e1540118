"""Driver floors: our append's statements and our transcript read, through the bare driver.

The floor is what the database and driver cost with no store around them; our figures are
compared with it, on the same database, schema and durability settings.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiosqlite
import asyncpg
from common import MESSAGE, Timings, bulk_fill, fresh_target, timed

from opensquilla.session import SessionManager, SessionStorage

INSERT_COLUMNS = (
    "session_id, session_key, message_id, role, content, tool_calls, tool_call_id, "
    "reasoning_content, turn_usage, turn_context, created_at, token_count, provenance_kind, "
    "provenance_origin_session_id, provenance_source_session_key, provenance_source_channel, "
    "provenance_source_tool, schema_version"
)
JSON_COLUMNS = ("tool_calls", "turn_usage", "turn_context")


def _values(session_id: str, key: str, i: int) -> tuple[Any, ...]:
    return (
        session_id,
        key,
        f"floor-{i}",
        "user",
        MESSAGE,
        None,
        None,
        None,
        None,
        None,
        1_800_000_000_000 + i,
        50,
        None,
        None,
        None,
        None,
        None,
        1,
    )


async def sqlite_append(path: str, key: str, session_id: str, n: int, synchronous: str) -> Timings:
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA synchronous={synchronous}")
        placeholders = ", ".join("?" * 18)
        insert = f"INSERT INTO transcript_entries ({INSERT_COLUMNS}) VALUES ({placeholders})"
        update = (
            "UPDATE sessions SET updated_at = ?, total_tokens = total_tokens + ?, "
            "total_tokens_fresh = 0 WHERE session_key = ? AND epoch = ?"
        )
        counter = iter(range(10**9))

        async def one() -> None:
            i = next(counter)
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute(update, (1_800_000_000_000 + i, 50, key, 0))
            await conn.execute(insert, _values(session_id, key, i))
            await conn.execute("COMMIT")

        return await timed(one, n)
    finally:
        await conn.close()


async def sqlite_one_hop_append(path: str, key: str, session_id: str, n: int) -> Timings:
    """Our one-statement append (revision 0008's view) through bare aiosqlite, in
    autocommit: one call on the driver's thread per append, no store around it."""
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        columns = f"{INSERT_COLUMNS}, fence_epoch, touched_at, token_delta, tokens_ceiling"
        append = (
            f"INSERT INTO transcript_appends ({columns}) VALUES ({', '.join('?' * 22)}) "
            "RETURNING (SELECT max(id) FROM transcript_entries)"
        )
        counter = iter(range(10**9))

        async def one() -> None:
            i = next(counter)
            fence = (0, 1_800_000_000_000 + i, 50, 2**63 - 1 - 50)
            assert await conn.execute_fetchall(append, _values(session_id, key, i) + fence)

        return await timed(one, n)
    finally:
        await conn.close()


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def postgres_append(url: str, key: str, session_id: str, n: int) -> Timings:
    conn = await asyncpg.connect(_pg_dsn(url))
    try:
        placeholders = ", ".join(f"${i}" for i in range(1, 19))
        insert = f"INSERT INTO transcript_entries ({INSERT_COLUMNS}) VALUES ({placeholders})"
        update = (
            "UPDATE sessions SET updated_at = $1, total_tokens = total_tokens + $2, "
            "total_tokens_fresh = false WHERE session_key = $3 AND epoch = $4"
        )
        counter = iter(range(10**9))

        async def one() -> None:
            i = next(counter)
            async with conn.transaction():
                await conn.execute(update, 1_800_000_000_000 + i, 50, key, 0)
                await conn.execute(insert, *_values(session_id, key, i))

        return await timed(one, n)
    finally:
        await conn.close()


# The columns our live read selects: every column but ``session_id``, which its WHERE pins
# (our read puts the parameter in every model instead of reading it from every row).
READ_COLUMNS = "id, " + INSERT_COLUMNS.split(", ", 1)[1]
READ = (
    f"SELECT {READ_COLUMNS} FROM transcript_entries WHERE session_id = {{}} ORDER BY created_at, id"
)

# The JSON decoding of the floor is our reads' own: the C scanner behind ``json.loads``,
# called directly. ``json.loads`` adds two whitespace regex matches and three Python frames
# per call, which cost twice the scan itself for a small value: a floor that paid them
# (as this one did) was slower than the decoding our reads do, and flattered them.
_scan = json.JSONDecoder().scan_once


@contextlib.asynccontextmanager
async def transcript_reader(
    target: str, session_id: str
) -> AsyncIterator[Callable[[], Awaitable[list[Any]]]]:
    """The floor of our transcript read: the same SELECT (the same columns, same order)
    through the bare driver; the rows as the driver returns them, each JSON value decoded (and
    dropped: the floor builds nothing). Columns are found by position on both drivers
    (an asyncpg record looked up by name costs a dict lookup per value)."""
    if target.startswith("postgresql"):
        pg = await asyncpg.connect(_pg_dsn(target))
        try:
            statement = await pg.prepare(READ.format("$1"))
            names = [attribute.name for attribute in statement.get_attributes()]
            json_at = [names.index(c) for c in JSON_COLUMNS]

            async def read_pg() -> list[Any]:
                rows = await statement.fetch(session_id)
                for row in rows:
                    for index in json_at:
                        if row[index] is not None:
                            _scan(row[index], 0)
                return rows

            yield read_pg
        finally:
            await pg.close()
        return
    lite = await aiosqlite.connect(target)
    try:
        async with lite.execute(READ.format("?") + " LIMIT 0", (session_id,)) as cursor:
            names = [d[0] for d in cursor.description]
        json_at = [names.index(c) for c in JSON_COLUMNS]

        async def read_sqlite() -> list[Any]:
            # One call on aiosqlite's thread (execute and fetch), as our lean adapter makes.
            rows = list(await lite.execute_fetchall(READ.format("?"), (session_id,)))
            for row in rows:
                for index in json_at:
                    if row[index] is not None:
                        _scan(row[index], 0)
            return rows

        yield read_sqlite
    finally:
        await lite.close()


@contextlib.asynccontextmanager
async def floor_database(
    backend: str, key: str, entries: int = 1000
) -> AsyncIterator[tuple[str, str, str]]:
    """A database of the floor's own (so that on SQLite neither its writes nor ours make the
    other's connection reload its page cache), laid out by our migrations, with one session
    of ``entries`` entries under ``key``: ``(target, session_key, session_id)``."""
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        try:
            node = await SessionManager(storage).create(key)
            await bulk_fill(storage, key, node.session_id, entries)
        finally:
            await storage.close()
        yield target, node.session_key, node.session_id


@contextlib.asynccontextmanager
async def batch_appenders(
    target: str, key: str, session_id: str, sizes: tuple[int, ...] = (1, 10)
) -> AsyncIterator[dict[int, Callable[[], Awaitable[None]]]]:
    """The floor of a batch append, for each of ``sizes`` rows: in one transaction through the
    bare driver, the session row's fence and counters updated, then one multi-row ``INSERT``
    into the transcript table (its search index triggers and indexes maintained, as for ours).
    One connection serves every size (on SQLite a write by another connection would make the
    next call reload its page cache). The ratio of two sizes is the driver's and the
    database's own cost of a batch's extra rows (issue 28's batch target)."""
    counter = iter(range(10**9))
    update_sql = (
        "UPDATE sessions SET updated_at = {}, total_tokens = total_tokens + {}, "
        "total_tokens_fresh = {} WHERE session_key = {} AND epoch = {}"
    )
    if target.startswith("postgresql"):
        pg = await asyncpg.connect(_pg_dsn(target))
        try:
            update = await pg.prepare(update_sql.format("$1", "$2", "false", "$3", "$4"))
            appenders = {}
            for rows in sizes:
                marks = ", ".join(
                    "(" + ", ".join(f"${r * 18 + c + 1}" for c in range(18)) + ")"
                    for r in range(rows)
                )
                insert = await pg.prepare(
                    f"INSERT INTO transcript_entries ({INSERT_COLUMNS}) VALUES {marks}"
                )

                async def append_pg(rows: int = rows, insert: Any = insert) -> None:
                    batch = [_values(session_id, key, next(counter)) for _ in range(rows)]
                    async with pg.transaction():
                        await update.fetch(batch[-1][10], 50 * rows, key, 0)
                        await insert.fetch(*(value for row in batch for value in row))

                appenders[rows] = append_pg
            yield appenders
        finally:
            await pg.close()
        return
    lite = await aiosqlite.connect(target, isolation_level=None)
    try:
        await lite.execute("PRAGMA journal_mode=WAL")
        await lite.execute("PRAGMA synchronous=FULL")
        update = update_sql.format("?", "?", "0", "?", "?")
        row_marks = "(" + ", ".join("?" * 18) + ")"

        def appender(rows: int) -> Callable[[], Awaitable[None]]:
            insert = f"INSERT INTO transcript_entries ({INSERT_COLUMNS}) VALUES " + ", ".join(
                [row_marks] * rows
            )

            async def append_sqlite() -> None:
                batch = [_values(session_id, key, next(counter)) for _ in range(rows)]
                await lite.execute("BEGIN IMMEDIATE")
                await lite.execute(update, (batch[-1][10], 50 * rows, key, 0))
                await lite.execute(insert, tuple(value for row in batch for value in row))
                await lite.execute("COMMIT")

            return append_sqlite

        yield {rows: appender(rows) for rows in sizes}
    finally:
        await lite.close()
