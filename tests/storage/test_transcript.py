"""Transcript rows: appends with and without the epoch fence, order, pages, the canonical
view over the compacted archive (SEMANTICS §4, §6, §10.1)."""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session import storage as storage_module
from opensquilla.session.errors import InvalidInputError, SessionStoreError, StaleEpochError
from opensquilla.session.models import SessionNode, TranscriptEntry
from tests.helpers import table_snapshot

from . import add_entry, archived, count_rows, insert_archive, new_session

KEY = "agent:main:main"


def _entry(node: SessionNode, content: str, role: str = "user", **fields: Any) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=node.session_id,
        session_key=node.session_key,
        role=role,
        content=content,
        **fields,
    )


def _contents(entries: list[TranscriptEntry]) -> list[str | None]:
    return [e.content for e in entries]


# -- append ------------------------------------------------------------------------------


async def test_append_sets_the_id_and_canonicalises_the_key(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    entry = TranscriptEntry(
        session_id=node.session_id, session_key="agent:MAIN:main", role="user", content="hi"
    )
    returned = await storage.append_transcript_entry(entry)
    assert returned is entry
    assert isinstance(entry.id, int)
    assert entry.session_key == KEY
    second = await add_entry(storage, node, "again")
    assert second.id is not None and second.id > entry.id
    [stored, _] = await storage.get_transcript(node.session_id)
    assert stored == entry


async def test_every_field_round_trips(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    entry = _entry(
        node,
        "answer",
        role="assistant",
        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        tool_call_id="call-9",
        reasoning_content="because",
        turn_usage={"input": 3, "output": 4, "cost": 0.5},
        turn_context={"cwd": "/tmp"},
        created_at=1_700_000_000_123,
        token_count=17,
        provenance_kind="inter_session",
        provenance_origin_session_id="origin",
        provenance_source_session_key="agent:main:src",
        provenance_source_channel="telegram",
        provenance_source_tool="sessions_send",
        schema_version=2,
    )
    await storage.append_transcript_entry(entry)
    assert await storage.get_transcript(node.session_id) == [entry]


async def test_append_without_fence_needs_no_session_row(storage: SessionStorage) -> None:
    """Unfenced inserts are unconditional (branch, truncate and direct test inserts)."""
    orphan = TranscriptEntry(session_id="sid", session_key="agent:main:none", role="user")
    await storage.append_transcript_entry(orphan)
    assert orphan.id is not None
    assert await storage.count_transcript_entries("sid") == 1


async def test_fenced_append_with_the_current_epoch(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, epoch=3)
    entry = await storage.append_transcript_entry(_entry(node, "ok"), expected_epoch=3)
    assert entry.id is not None
    assert _contents(await storage.get_transcript(node.session_id)) == ["ok"]


async def test_fenced_append_with_another_epoch_is_refused(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, epoch=2)
    await add_entry(storage, node, "before")
    snapshot = await table_snapshot(storage)
    for expected in (0, 1, 3):
        entry = _entry(node, "late")
        with pytest.raises(StaleEpochError) as info:
            await storage.append_transcript_entry(entry, expected_epoch=expected)
        assert str(info.value) == f"Epoch mismatch for {KEY}: expected {expected}, got 2"
        assert entry.id is None
    assert await table_snapshot(storage) == snapshot


async def test_fenced_append_to_a_missing_session_says_got_none(storage: SessionStorage) -> None:
    entry = TranscriptEntry(session_id="sid", session_key="agent:Main:gone", role="user")
    with pytest.raises(StaleEpochError) as info:
        await storage.append_transcript_entry(entry, expected_epoch=0)
    assert str(info.value) == "Epoch mismatch for agent:main:gone: expected 0, got None"
    assert await count_rows(storage, "transcript_entries") == 0


def test_stale_epoch_error_is_its_own_type() -> None:
    """Callers catch it specifically; it must not be confused with a missing key."""
    assert storage_module.StaleEpochError is StaleEpochError
    assert issubclass(StaleEpochError, SessionStoreError)
    assert not issubclass(StaleEpochError, KeyError | ValueError)


async def test_fence_checks_the_key_not_only_the_epoch(storage: SessionStorage) -> None:
    """Another session at the right epoch does not let an entry in."""
    await new_session(storage, "agent:main:other", epoch=0)
    entry = TranscriptEntry(session_id="sid", session_key=KEY, role="user", content="x")
    with pytest.raises(StaleEpochError, match="got None"):
        await storage.append_transcript_entry(entry, expected_epoch=0)
    assert await count_rows(storage, "transcript_entries") == 0


# -- order and pages ---------------------------------------------------------------------


async def test_transcript_order_is_created_at_then_insertion(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    await add_entry(storage, node, "late", created_at=20_000)
    for name in ("tie-a", "tie-b", "tie-c"):
        await add_entry(storage, node, name, created_at=12_345)
    await add_entry(storage, node, "early", created_at=1_000)
    entries = await storage.get_transcript(node.session_id)
    assert _contents(entries) == ["early", "tie-a", "tie-b", "tie-c", "late"]
    ties = [e.id for e in entries[1:4] if e.id is not None]
    assert len(ties) == 3 and ties == sorted(ties)


async def test_transcript_pages(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    for i in range(7):
        await add_entry(storage, node, f"m{i}", created_at=100 + i)
    everything = _contents(await storage.get_transcript(node.session_id))
    assert everything == [f"m{i}" for i in range(7)]
    pages = [
        _contents(await storage.get_transcript(node.session_id, limit=3, offset=offset))
        for offset in (0, 3, 6)
    ]
    assert pages == [everything[0:3], everything[3:6], everything[6:]]
    assert _contents(await storage.get_transcript(node.session_id, offset=5)) == everything[5:]
    assert await storage.get_transcript(node.session_id, limit=0) == []
    assert await storage.get_transcript(node.session_id, offset=7) == []


async def test_transcript_refuses_negative_pages(storage: SessionStorage) -> None:
    pages: list[tuple[int | None, int]] = [(-1, 0), (None, -1), (3, -2)]
    for limit, offset in pages:
        with pytest.raises(InvalidInputError):
            await storage.get_transcript("sid", limit=limit, offset=offset)
        with pytest.raises(InvalidInputError):
            await storage.get_canonical_transcript("sid", limit=limit, offset=offset)


async def test_transcript_is_per_session_id(storage: SessionStorage) -> None:
    one = await new_session(storage, "agent:main:one")
    two = await new_session(storage, "agent:main:two")
    await add_entry(storage, one, "for one")
    await add_entry(storage, two, "for two")
    assert _contents(await storage.get_transcript(one.session_id)) == ["for one"]
    assert _contents(await storage.get_transcript(two.session_id)) == ["for two"]
    assert await storage.get_transcript("no-such-id") == []


async def test_count_counts_live_rows_only(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    other = await new_session(storage, "agent:main:other")
    for i in range(3):
        await add_entry(storage, node, f"live {i}")
    await add_entry(storage, other, "elsewhere")
    await insert_archive(storage, [archived(node, 1, "old a"), archived(node, 2, "old b")])
    assert await storage.count_transcript_entries(node.session_id) == 3
    assert await storage.count_transcript_entries(other.session_id) == 1
    assert await storage.count_transcript_entries("no-such-id") == 0


# -- canonical transcript ----------------------------------------------------------------


async def _compacted_session(storage: SessionStorage) -> SessionNode:
    """Two archived rows (once live ids 1 and 2) and three live rows after them."""
    node = await new_session(storage, KEY)
    await insert_archive(
        storage,
        [
            archived(node, 2, "arch-2", created_at=200, message_id="m-2"),
            archived(node, 1, "arch-1", created_at=100, message_id="m-1"),
        ],
    )
    for i, created in enumerate((300, 400, 500), start=3):
        await add_entry(storage, node, f"live-{i}", created_at=created)
    return node


async def test_canonical_transcript_merges_archive_and_live(storage: SessionStorage) -> None:
    node = await _compacted_session(storage)
    canonical = await storage.get_canonical_transcript(node.session_id)
    assert _contents(canonical) == ["arch-1", "arch-2", "live-3", "live-4", "live-5"]
    assert [e.id for e in canonical[:2]] == [1, 2]  # original_entry_id, not the archive id
    assert [e.message_id for e in canonical[:2]] == ["m-1", "m-2"]
    assert all(isinstance(e, TranscriptEntry) for e in canonical)
    live = await storage.get_transcript(node.session_id)
    assert canonical[2:] == live
    assert _contents(live) == ["live-3", "live-4", "live-5"]


async def test_canonical_transcript_interleaves_by_created_at(storage: SessionStorage) -> None:
    """Kept rows are re-inserted with new ids but old timestamps; order follows time."""
    node = await new_session(storage, KEY)
    await add_entry(storage, node, "kept-early", created_at=150)
    await insert_archive(
        storage,
        [
            archived(node, 7, "arch-100", created_at=100),
            archived(node, 8, "arch-200", created_at=200),
        ],
    )
    canonical = await storage.get_canonical_transcript(node.session_id)
    assert _contents(canonical) == ["arch-100", "kept-early", "arch-200"]


async def test_canonical_transcript_pages(storage: SessionStorage) -> None:
    node = await _compacted_session(storage)
    everything = _contents(await storage.get_canonical_transcript(node.session_id))
    page = await storage.get_canonical_transcript(node.session_id, limit=2, offset=1)
    assert _contents(page) == everything[1:3]
    rest = await storage.get_canonical_transcript(node.session_id, offset=3)
    assert _contents(rest) == everything[3:]


async def test_compacted_entries_by_compaction_id(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    await insert_archive(
        storage,
        [
            archived(node, 1, "first", compaction_id="cmp_a", created_at=1),
            archived(node, 2, "second", compaction_id="cmp_b", compaction_index=1, created_at=2),
        ],
    )
    everything = await storage.get_compacted_transcript_entries(node.session_id)
    assert [e.content for e in everything] == ["first", "second"]
    only_b = await storage.get_compacted_transcript_entries(node.session_id, compaction_id="cmp_b")
    assert [(e.content, e.original_entry_id, e.compaction_index) for e in only_b] == [
        ("second", 2, 1)
    ]


async def test_delete_transcript_removes_live_and_archive_of_one_generation(
    storage: SessionStorage,
) -> None:
    node = await _compacted_session(storage)
    other = await new_session(storage, "agent:main:other")
    await add_entry(storage, other, "survivor")
    await storage.delete_transcript(node.session_id)
    assert await storage.get_canonical_transcript(node.session_id) == []
    assert await count_rows(storage, "compacted_transcript_entries") == 0
    assert _contents(await storage.get_transcript(other.session_id)) == ["survivor"]
