"""Orphan child rows (their session row gone, as a legacy database may hold) stay reachable
by the by-id forms once those carry ``session_key`` (docs/scaling.md#keys-and-statements):
the key is resolved from ``sessions``, else from the rows themselves."""

from __future__ import annotations

import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage

ORPHAN_ID = "orphan-generation"
ORPHAN_KEY = "agent:main:orphaned"


async def test_orphan_rows_are_read_by_their_session_id(storage: SessionStorage) -> None:
    async with storage.engine.begin() as conn:
        for n in range(3):
            await conn.execute(
                sa.text(
                    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, "
                    "content, created_at) VALUES (:sid, :key, :mid, 'user', :content, :at)"
                ),
                {"sid": ORPHAN_ID, "key": ORPHAN_KEY, "mid": f"m{n}", "content": f"c{n}", "at": n},
            )
        await conn.execute(
            sa.text(
                "INSERT INTO session_summaries (session_id, session_key, compaction_index, "
                "summary_text, created_at) VALUES (:sid, :key, 1, 'kept', 0)"
            ),
            {"sid": ORPHAN_ID, "key": ORPHAN_KEY},
        )
        await conn.execute(  # a generation of which only a summary is left
            sa.text(
                "INSERT INTO session_summaries (session_id, session_key, compaction_index, "
                "summary_text, created_at) VALUES ('summary-only', 'agent:main:gone', 1, "
                "'alone', 0)"
            )
        )
    summary_only = await storage.get_latest_summary("summary-only")
    assert summary_only is not None and summary_only.summary_text == "alone"
    assert [e.content for e in await storage.get_transcript(ORPHAN_ID)] == ["c0", "c1", "c2"]
    assert [e.content for e in await storage.get_recent_transcript(ORPHAN_ID, 2)] == ["c1", "c2"]
    assert await storage.count_transcript_entries(ORPHAN_ID) == 3
    assert [s.summary_text for s in await storage.get_all_summaries(ORPHAN_ID)] == ["kept"]
    latest = await storage.get_latest_summary(ORPHAN_ID)
    assert latest is not None and latest.summary_text == "kept"
    # The canonical forms, the one-message forms and the deletes by id too.
    canonical = await storage.get_canonical_transcript(ORPHAN_ID)
    assert [e.content for e in canonical] == ["c0", "c1", "c2"]
    page, has_more = await storage.get_canonical_transcript_page(ORPHAN_ID, limit=2)
    assert [e.content for e in page] == ["c1", "c2"] and has_more
    older, _ = await storage.get_canonical_transcript_page(
        ORPHAN_ID, limit=2, before=(page[0].created_at, page[0].id or 0)
    )
    assert [e.content for e in older] == ["c0"]
    found = await storage.get_canonical_transcript_entry(ORPHAN_ID, "m1")
    assert found is not None and found.content == "c1"
    coverage = await storage.get_canonical_transcript_coverage(ORPHAN_ID)
    assert coverage.canonical_complete is False  # no session row: nothing proves it
    assert await storage.delete_transcript_entry(ORPHAN_ID, "m0")
    assert await storage.count_transcript_entries(ORPHAN_ID) == 2
    await storage.delete_transcript(ORPHAN_ID)
    assert await storage.get_canonical_transcript(ORPHAN_ID) == []


async def test_an_id_nothing_carries_reads_empty(storage: SessionStorage) -> None:
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create("agent:main:someone")
    await manager.append_message("agent:main:someone", "user", "not yours")
    assert await storage.get_transcript("no-such-generation") == []
    assert await storage.get_recent_transcript("no-such-generation", 5) == []
    assert await storage.count_transcript_entries("no-such-generation") == 0
    assert await storage.get_all_summaries("no-such-generation") == []
    assert await storage.get_latest_summary("no-such-generation") is None
    assert await storage.get_canonical_transcript("no-such-generation") == []
    assert await storage.get_canonical_transcript_entry("no-such-generation", "m") is None
    assert not await storage.delete_transcript_entry("no-such-generation", "m")
    await storage.delete_transcript("no-such-generation")
    assert await manager.count_transcript_entries("agent:main:someone") == 1
