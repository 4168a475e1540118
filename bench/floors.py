"""Driver floors: our append's statements and our transcript read, through the bare driver.

The floor is what the database and driver cost with no store around them; our figures are
compared with it, on the same database, schema and durability settings.
"""

from __future__ import annotations

import json
from typing import Any

import aiosqlite
import asyncpg
from common import MESSAGE, Timings, median_ms, timed

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


async def sqlite_read(path: str, session_id: str) -> float:
    conn = await aiosqlite.connect(path)
    try:

        async def read() -> None:
            cursor = await conn.execute(
                "SELECT * FROM transcript_entries WHERE session_id = ? ORDER BY created_at, id",
                (session_id,),
            )
            names = [d[0] for d in cursor.description]
            json_at = [names.index(c) for c in JSON_COLUMNS]
            for row in await cursor.fetchall():
                for index in json_at:
                    if row[index] is not None:
                        json.loads(row[index])

        return await median_ms(read, 5)
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


async def postgres_read(url: str, session_id: str) -> float:
    conn = await asyncpg.connect(_pg_dsn(url))
    try:

        async def read() -> None:
            rows = await conn.fetch(
                "SELECT * FROM transcript_entries WHERE session_id = $1 ORDER BY created_at, id",
                session_id,
            )
            for row in rows:
                for column in JSON_COLUMNS:
                    if row[column] is not None:
                        json.loads(row[column])

        return await median_ms(read, 5)
    finally:
        await conn.close()
