"""Shared test helpers."""

from __future__ import annotations

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


async def table_snapshot(storage: SessionStorage) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the five tables, in primary-key order: for "nothing changed" checks."""
    snapshot: dict[str, list[tuple[Any, ...]]] = {}
    async with storage.engine.connect() as conn:
        for table in TABLES:
            key = "session_key" if table == "sessions" else "id"
            rows = await conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {key}"))
            snapshot[table] = [tuple(row) for row in rows]
    return snapshot
