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
from common import MESSAGE, Timings, timed

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


READ = "SELECT * FROM transcript_entries WHERE session_id = {} ORDER BY created_at, id"


@contextlib.asynccontextmanager
async def transcript_reader(
    target: str, session_id: str
) -> AsyncIterator[Callable[[], Awaitable[list[Any]]]]:
    """The floor of our transcript read: the same SELECT (every column, same order) through
    the bare driver; the rows as the driver returns them, each JSON value decoded (and
    dropped: the floor builds nothing)."""
    if target.startswith("postgresql"):
        pg = await asyncpg.connect(_pg_dsn(target))
        try:

            async def read_pg() -> list[Any]:
                rows = await pg.fetch(READ.format("$1"), session_id)
                for row in rows:
                    for column in JSON_COLUMNS:
                        if row[column] is not None:
                            json.loads(row[column])
                return rows

            yield read_pg
        finally:
            await pg.close()
        return
    lite = await aiosqlite.connect(target)
    try:

        async def read_sqlite() -> list[Any]:
            cursor = await lite.execute(READ.format("?"), (session_id,))
            names = [d[0] for d in cursor.description]
            json_at = [names.index(c) for c in JSON_COLUMNS]
            rows = list(await cursor.fetchall())
            for row in rows:
                for index in json_at:
                    if row[index] is not None:
                        json.loads(row[index])
            return rows

        yield read_sqlite
    finally:
        await lite.close()
