"""Storage-layer tests: ``SessionStorage`` on the backend the environment selects.

Small builders shared by these tests live here; they go through the public storage API
except where a test needs rows the API only writes as part of a larger operation (the
compacted archive), which are inserted with the repository inside one transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)


async def new_session(storage: SessionStorage, key: str, **fields: Any) -> SessionNode:
    """Insert a session row and return the node as written (key canonicalised)."""
    node = SessionNode(session_key=key, **fields)
    assert await storage.create_session(node)
    return node


async def add_entry(
    storage: SessionStorage, node: SessionNode, content: str | None, **fields: Any
) -> TranscriptEntry:
    fields.setdefault("role", "user")
    entry = TranscriptEntry(
        session_id=node.session_id, session_key=node.session_key, content=content, **fields
    )
    return await storage.append_transcript_entry(entry)


def archived(node: SessionNode, original_id: int, content: str, **fields: Any) -> Any:
    """A compacted-archive row that was live entry ``original_id`` of ``node``."""
    fields.setdefault("role", "user")
    fields.setdefault("compaction_id", "cmp_test")
    fields.setdefault("compaction_index", 0)
    return CompactedTranscriptEntry(
        session_id=node.session_id,
        session_key=node.session_key,
        original_entry_id=original_id,
        content=content,
        **fields,
    )


async def insert_archive(storage: SessionStorage, rows: list[CompactedTranscriptEntry]) -> None:
    async with storage.engine.begin() as conn:
        await TranscriptRepository(conn).insert_archive_rows(rows)


async def add_summary(
    storage: SessionStorage, node: SessionNode, text: str = "summary", **fields: Any
) -> SessionSummary:
    summary = SessionSummary(
        session_id=node.session_id, session_key=node.session_key, summary_text=text, **fields
    )
    return await storage.save_summary(summary)


async def add_state(
    storage: SessionStorage, node: SessionNode, kind: str = "structured_summary_v1", **fields: Any
) -> SessionContextState:
    fields.setdefault("session_id", node.session_id)
    state = SessionContextState(session_key=node.session_key, state_kind=kind, **fields)
    return await storage.save_context_state(state)


async def count_rows(storage: SessionStorage, table: str, **equal: Any) -> int:
    """Rows of ``table`` whose columns equal ``equal`` (raw SQL: independent of the repos)."""
    where = " AND ".join(f"{name} = :{name}" for name in equal) or "1 = 1"
    async with storage.engine.connect() as conn:
        result = await conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {where}"), equal)
        return int(result.scalar_one())
