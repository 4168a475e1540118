"""The reads upstream added after the contract revision (HEAD-FEATURES §2): keyset pages of
the session listing, the newest messages, one message by id across the archive, the
transcript as JSON, and batch reads over many sessions. Both backends."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError
from opensquilla.session.models import (
    SessionListCursor,
    SessionListPage,
    SessionNode,
    TranscriptEntry,
)

KEY = "agent:main:reads"
T0 = 1_700_000_000_000


@contextlib.contextmanager
def statements(storage: SessionStorage) -> Iterator[list[str]]:
    """The SQL statements ``storage`` sends while the block runs."""
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def _seed_sessions(storage: SessionStorage, keys_and_times: dict[str, int]) -> None:
    for key, updated_at in keys_and_times.items():
        assert await storage.create_session(
            SessionNode(session_key=key, created_at=T0, updated_at=updated_at)
        )


async def _walk(manager: SessionManager, limit: int, **filters: Any) -> list[SessionListPage]:
    pages = [await manager.list_sessions_page(limit=limit, **filters)]
    while pages[-1].has_more:
        pages.append(
            await manager.list_sessions_page(limit=limit, cursor=pages[-1].next_cursor, **filters)
        )
    return pages


def _keys(*pages: SessionListPage) -> list[str]:
    return [node.session_key for page in pages for node in page.sessions]


# -- keyset session listing ---------------------------------------------------------------


async def test_keyset_pages_all_401_sessions_with_tied_timestamps(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """401 sessions, one ``updated_at``: pages of 200, 200 and 1, keys descending across
    page boundaries, none repeated, none lost."""
    keys = [f"agent:main:tied{index:04d}" for index in range(401)]
    await _seed_sessions(storage, dict.fromkeys(keys, T0))

    pages = await _walk(manager, 200)

    assert [len(page.sessions) for page in pages] == [200, 200, 1]
    assert [page.has_more for page in pages] == [True, True, False]
    assert _keys(*pages) == sorted(keys, reverse=True)
    for page in pages[:-1]:
        last = page.sessions[-1]
        assert page.next_cursor == SessionListCursor(T0, T0, last.session_key)
    assert pages[-1].next_cursor is None


async def test_keyset_order_is_the_listing_order(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Newest ``updated_at`` first, ties by key descending: what ``list_sessions`` shows."""
    await _seed_sessions(
        storage,
        {"agent:main:a": T0 + 5, "agent:main:b": T0, "agent:main:c": T0 + 5, "agent:main:d": T0},
    )
    walked = _keys(*await _walk(manager, 3))
    assert walked == ["agent:main:c", "agent:main:a", "agent:main:d", "agent:main:b"]
    assert walked == [node.session_key for node in await manager.list_sessions()]


async def test_keyset_traversal_handles_concurrent_insert_and_delete(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Between two pages: a session inserted (or touched) ahead of the cursor is not seen,
    one inserted behind it is; a deleted unseen session is skipped; deleting an already
    seen one changes nothing. No session is seen twice."""
    await _seed_sessions(storage, {f"agent:main:s{index}": T0 + index for index in range(10)})
    first = await manager.list_sessions_page(limit=4)
    assert _keys(first) == ["agent:main:s9", "agent:main:s8", "agent:main:s7", "agent:main:s6"]

    await _seed_sessions(storage, {"agent:main:ahead": T0 + 100, "agent:main:behind": T0 + 2})
    await storage.update_session_fields("agent:main:s1", {"updated_at": T0 + 200})  # moved ahead
    assert await manager.delete("agent:main:s4")  # not yet seen
    assert await manager.delete("agent:main:s8")  # seen already
    rest = await _walk_from(manager, first.next_cursor, 4)

    assert _keys(*rest) == [
        "agent:main:s5",
        "agent:main:s3",
        "agent:main:s2",
        "agent:main:behind",  # ties with s2: the smaller key comes later
        "agent:main:s0",
    ]
    walked = _keys(first, *rest)
    assert len(walked) == len(set(walked))


async def _walk_from(
    manager: SessionManager, cursor: SessionListCursor | None, limit: int
) -> list[SessionListPage]:
    pages: list[SessionListPage] = []
    while cursor is not None:
        pages.append(await manager.list_sessions_page(limit=limit, cursor=cursor))
        cursor = pages[-1].next_cursor
    return pages


async def test_keyset_page_returns_terminal_empty_page(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A cursor at the last session gives an empty page with no next cursor; so does an
    empty store."""
    assert await manager.list_sessions_page(limit=5) == SessionListPage([], None, False)
    await _seed_sessions(storage, {"agent:main:only": T0, "agent:main:other": T0 - 1})
    full = await manager.list_sessions_page(limit=2)
    assert len(full.sessions) == 2 and not full.has_more and full.next_cursor is None
    after_last = SessionListCursor.of(full.sessions[-1])
    assert await manager.list_sessions_page(limit=2, cursor=after_last) == SessionListPage(
        [], None, False
    )


async def test_keyset_page_size_is_at_least_one_and_filters_apply(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _seed_sessions(storage, {f"agent:main:m{index}": T0 + index for index in range(3)})
    await manager.create("agent:ops:o1", agent_id="ops")
    await manager.finish("agent:main:m0", "done")
    for limit in (0, -7):
        page = await manager.list_sessions_page(limit=limit)
        assert len(page.sessions) == 1 and page.has_more
    assert _keys(*await _walk(manager, 1, agent_id="OPS")) == ["agent:ops:o1"]
    assert _keys(*await _walk(manager, 1, status="done")) == ["agent:main:m0"]
    assert _keys(*await _walk(manager, 1, agent_id="main", status="running")) == [
        "agent:main:m2",
        "agent:main:m1",
    ]


def test_cursor_wire_form_round_trips_keys_with_colons() -> None:
    cursor = SessionListCursor(-5, -5, "agent:main:web:chat|x")
    assert cursor.encode() == "-5:agent:main:web:chat|x"
    assert SessionListCursor.decode(cursor.encode()) == cursor
    for bad in ("", "agent:main:x", "12", "1.5:key", "²:key", "99999999999999999999999:k"):
        with pytest.raises(InvalidInputError, match="cursor"):
            SessionListCursor.decode(bad)
    with pytest.raises(InvalidInputError, match=r"cursor\.session_key"):
        SessionListCursor(1, 1, "a\x00b")


# -- the newest messages ------------------------------------------------------------------


async def _conversation(manager: SessionManager, count: int, key: str = KEY) -> list[int]:
    await manager.create(key)
    ids = []
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        entry = await manager.append_message(key, role, f"message {index}")
        assert entry.id is not None
        ids.append(entry.id)
    return ids


async def test_recent_transcript_is_the_newest_rows_oldest_first(
    manager: SessionManager, storage: SessionStorage
) -> None:
    ids = await _conversation(manager, 5)
    assert [e.id for e in await manager.get_recent_transcript(KEY, 2)] == ids[-2:]
    assert [e.id for e in await manager.get_recent_transcript(KEY, 50)] == ids
    assert await manager.get_recent_transcript(KEY, 0) == []
    whole = await manager.get_transcript(KEY)
    assert await manager.get_recent_transcript(KEY, 5) == whole
    node = await manager.get_session(KEY)
    assert node is not None
    assert await storage.get_recent_transcript(node.session_id, 3) == whole[-3:]
    assert await storage.get_recent_transcript("no-such-generation", 3) == []


async def test_recent_transcript_after_a_compaction_reads_only_live_rows(
    manager: SessionManager,
) -> None:
    await _conversation(manager, 6)
    live_tail = [{"role": "assistant", "content": "message 5"}]
    assert await manager.persist_compaction_result(KEY, "summary of 0-4", live_tail)
    live = await manager.get_transcript(KEY)
    assert [e.content for e in live] == ["message 5"]
    assert [e.content for e in await manager.get_recent_transcript(KEY, 10)] == ["message 5"]


async def test_recent_transcript_refuses_a_negative_count(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Upstream returned every row for a negative ``n`` (SQLite's LIMIT -1); refused here."""
    await _conversation(manager, 2)
    with pytest.raises(InvalidInputError, match="n must be >= 0"):
        await manager.get_recent_transcript(KEY, -1)
    with pytest.raises(InvalidInputError, match="n must be >= 0"):
        await storage.get_recent_transcript("any", -1)
    with pytest.raises(SessionNotFoundError):
        await manager.get_recent_transcript("agent:main:ghost", 1)


# -- one message by id across archive and live -------------------------------------------


async def _entry(
    storage: SessionStorage, node: SessionNode, message_id: str, content: str, at: int
) -> TranscriptEntry:
    return await storage.append_transcript_entry(
        TranscriptEntry(
            session_id=node.session_id,
            session_key=node.session_key,
            message_id=message_id,
            role="assistant",
            content=content,
            created_at=at,
            turn_context={"turn": content},
        )
    )


async def test_canonical_entry_is_the_newest_across_archive_and_live(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    first = await _entry(storage, node, "dup", "archived copy", T0)
    await _entry(storage, node, "other", "between", T0 + 1)
    await _entry(storage, node, "tail", "kept", T0 + 2)
    assert await manager.persist_compaction_result(
        KEY, "summary", [{"role": "assistant", "content": "kept"}]
    )
    archived = await manager.get_canonical_transcript_entry(KEY, "dup")
    assert archived is not None
    assert (archived.id, archived.content) == (first.id, "archived copy")
    assert archived.turn_context == {"turn": "archived copy"}

    newer = await _entry(storage, node, "dup", "live copy", T0 + 3)
    found = await manager.get_canonical_transcript_entry(KEY, "dup")
    assert found is not None and (found.id, found.content) == (newer.id, "live copy")

    tie = await _entry(storage, node, "dup", "same time, higher id", T0 + 3)
    found = await storage.get_canonical_transcript_entry(node.session_id, "dup")
    assert found is not None and (found.id, found.content) == (tie.id, "same time, higher id")

    assert await manager.get_canonical_transcript_entry(KEY, "nobody") is None
    other = await manager.create("agent:main:elsewhere")
    await _entry(storage, other, "dup", "another session", T0 + 9)
    found = await manager.get_canonical_transcript_entry(KEY, "dup")
    assert found is not None and found.content == "same time, higher id"
    with pytest.raises(SessionNotFoundError):
        await manager.get_canonical_transcript_entry("agent:main:ghost", "dup")


# -- the transcript as JSON ---------------------------------------------------------------


async def test_read_transcript_is_json_mode_dumps_of_the_live_transcript(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "weather?")
    await manager.append_message(
        KEY,
        "assistant",
        None,
        tool_calls=[{"id": "c1", "function": {"name": "get", "arguments": "{}"}}],
        turn_context={"nested": [1, 2.5, None]},
    )
    dumped = await manager.read_transcript(KEY)
    assert dumped == [e.model_dump(mode="json") for e in await manager.get_transcript(KEY)]
    assert json.loads(json.dumps(dumped)) == dumped
    assert [row["content"] for row in await manager.read_transcript("agent:MAIN:reads", 1)] == [
        "weather?"
    ]
    with pytest.raises(KeyError, match="Session not found: agent:main:ghost"):
        await manager.read_transcript("agent:main:ghost")


# -- batch reads ----------------------------------------------------------------------------


async def test_batch_count_empty_list_returns_empty_dict(
    manager: SessionManager, storage: SessionStorage
) -> None:
    with statements(storage) as sent:
        assert await storage.count_transcript_entries_batch([]) == {}
        assert await manager.count_transcript_entries_batch([]) == {}
    assert not [s for s in sent if "transcript_entries" in s]


async def test_batch_count_matches_single_id_path_and_missing_is_zero(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _conversation(manager, 5, "agent:main:five")
    await _conversation(manager, 2, "agent:main:two")
    await _conversation(manager, 0, "agent:main:none")
    await manager.persist_compaction_result(
        "agent:main:five", "s", [{"role": "user", "content": "message 4"}]
    )
    keys = ["agent:main:five", "agent:main:two", "agent:main:none"]
    nodes = [await manager.get_session(key) for key in keys]
    ids = [node.session_id for node in nodes if node is not None]

    counts = await storage.count_transcript_entries_batch([*ids, "missing", ids[0]])

    assert counts == {
        **{sid: await storage.count_transcript_entries(sid) for sid in ids},
        "missing": 0,
    }
    assert counts[ids[0]] == 1  # live rows only
    by_key = await manager.count_transcript_entries_batch(
        ["agent:MAIN:two", "agent:main:five", "agent:main:ghost", "agent:main:two"]
    )
    assert by_key == {
        "agent:MAIN:two": 2,
        "agent:main:five": 1,
        "agent:main:ghost": 0,
        "agent:main:two": 2,
    }


async def test_batch_count_chunks_above_500(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """1500 ids: three statements of 500, every id answered."""
    await _conversation(manager, 3, "agent:main:real")
    node = await manager.get_session("agent:main:real")
    assert node is not None
    ids = [f"unknown-{index}" for index in range(1499)] + [node.session_id]

    with statements(storage) as sent:
        counts = await storage.count_transcript_entries_batch(ids)

    assert len(counts) == 1500 and counts[node.session_id] == 3
    assert sum(counts.values()) == 3
    assert len([s for s in sent if "transcript_entries" in s]) == 3

    keys = [f"agent:main:k{index}" for index in range(1200)] + ["agent:main:real"]
    by_key = await manager.count_transcript_entries_batch(keys)
    assert len(by_key) == 1201 and by_key["agent:main:real"] == 3


async def _archive_first(manager: SessionManager, key: str, count: int) -> None:
    """Compact the first ``count`` live rows into the archive, keeping the rest as they are."""
    live = await manager.get_transcript(key)
    kept = [{"role": e.role, "content": e.content} for e in live[count:]]
    assert await manager.persist_compaction_result(key, f"summary of {count}", kept)
    assert [e.id for e in await manager.get_transcript(key)] == [e.id for e in live[count:]]


async def _user_rows(storage: SessionStorage, node: SessionNode, rows: list[Any]) -> None:
    for offset, (role, content) in enumerate(rows):
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id,
                session_key=node.session_key,
                role=role,
                content=content,
                created_at=T0 + offset,
            )
        )


async def test_user_content_batch_takes_the_first_non_empty_live_user_rows(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await _user_rows(
        storage,
        node,
        [
            ("user", "archived question"),
            ("assistant", "archived answer"),
            ("user", "first live"),
            ("assistant", "not a user row"),
            ("user", ""),
            ("system", "not a user row either"),
            ("user", "second live"),
            ("user", "third live"),
            ("user", "fourth live"),
        ],
    )
    await _archive_first(manager, KEY, 2)
    live = [e.content for e in await manager.get_transcript(KEY)]
    assert live[0] == "first live" and "archived question" not in live
    other = await manager.create("agent:main:other")
    await _user_rows(storage, other, [("assistant", "hi"), ("user", None), ("user", "only one")])

    contents = await storage.list_user_transcript_content_batch(
        [node.session_id, other.session_id, "missing"]
    )
    assert contents == {
        node.session_id: ["first live", "second live", "third live"],
        other.session_id: ["only one"],
        "missing": [],
    }
    assert (
        await storage.list_user_transcript_content_batch([node.session_id], limit_per_session=1)
    ) == {node.session_id: ["first live"]}
    assert (
        await storage.list_user_transcript_content_batch([node.session_id], limit_per_session=0)
    ) == {node.session_id: []}
    assert await storage.list_user_transcript_content_batch([]) == {}
    by_key = await manager.list_user_transcript_content_batch(
        ["agent:main:other", "agent:main:ghost", "agent:MAIN:reads"], limit_per_session=10
    )
    assert by_key == {
        "agent:main:other": ["only one"],
        "agent:main:ghost": [],
        "agent:MAIN:reads": ["first live", "second live", "third live", "fourth live"],
    }


async def test_user_content_batch_chunks_above_300(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await _user_rows(storage, node, [("user", "hello"), ("user", "again")])
    ids = [f"unknown-{index}" for index in range(700)] + [node.session_id]

    with statements(storage) as sent:
        contents = await storage.list_user_transcript_content_batch(ids, limit_per_session=1)

    assert len(contents) == 701 and contents[node.session_id] == ["hello"]
    assert sum(len(found) for found in contents.values()) == 1
    assert len([s for s in sent if "transcript_entries" in s]) == 3
