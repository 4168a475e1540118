"""The transcript through the manager: appends and their token accounting, provenance,
ordering and pages, truncation, missing sessions, and the memory-sync notification."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionSummary,
    TranscriptEntry,
)
from tests.helpers import table_snapshot

KEY = "agent:main:talk"


async def _set_counters(storage: SessionStorage, key: str, **values: Any) -> None:
    node = await storage.get_session(key)
    assert node is not None
    for name, value in values.items():
        setattr(node, name, value)
    await storage.upsert_session(node)


async def _total_tokens(storage: SessionStorage, key: str = KEY) -> int:
    node = await storage.get_session(key)
    assert node is not None
    return node.total_tokens


# -- append_message ------------------------------------------------------------------------


async def test_append_returns_the_stored_entry(manager: SessionManager) -> None:
    """The returned entry carries the database id and the caller's role and content."""
    node = await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", "Hello there")

    assert isinstance(entry.id, int)
    assert entry.role == "user"
    assert entry.content == "Hello there"
    assert entry.session_id == node.session_id
    assert entry.session_key == KEY
    stored = await manager.get_transcript(KEY)
    assert [(e.id, e.message_id, e.content) for e in stored] == [
        (entry.id, entry.message_id, "Hello there")
    ]


async def test_append_through_a_non_canonical_key(manager: SessionManager) -> None:
    """Any spelling of the key appends to the canonical session."""
    await manager.create(KEY)

    entry = await manager.append_message("agent:MAIN:talk", "user", "spelled oddly")

    assert entry.session_key == KEY
    assert [e.content for e in await manager.get_transcript(KEY)] == ["spelled oddly"]


async def test_append_keeps_tool_fields(manager: SessionManager) -> None:
    calls = [{"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    await manager.create(KEY)

    await manager.append_message(KEY, "assistant", None, tool_calls=calls)
    await manager.append_message(KEY, "tool", "a.txt b.txt", tool_call_id="call_1")

    first, second = await manager.get_transcript(KEY)
    assert first.content is None and first.tool_calls == calls
    assert second.tool_call_id == "call_1" and second.content == "a.txt b.txt"


async def test_token_count_is_added_without_turn_usage(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Reported tokens accumulate and the total is marked as no longer fresh."""
    await manager.create(KEY)
    await _set_counters(storage, KEY, total_tokens_fresh=True)

    await manager.append_message(KEY, "user", "one", token_count=10)
    await manager.append_message(KEY, "assistant", "two", token_count=32)

    node = await storage.get_session(KEY)
    assert node is not None
    assert node.total_tokens == 42
    assert node.total_tokens_fresh is False
    assert [e.token_count for e in await manager.get_transcript(KEY)] == [10, 32]


@pytest.mark.parametrize("token_count", [0, None])
async def test_zero_or_missing_token_count_adds_nothing(
    manager: SessionManager, storage: SessionStorage, token_count: int | None
) -> None:
    """No tokens, no change to the counters, but the session is still touched."""
    await manager.create(KEY)
    await _set_counters(storage, KEY, total_tokens=7, total_tokens_fresh=True, updated_at=1)

    await manager.append_message(KEY, "user", "quiet", token_count=token_count)

    node = await storage.get_session(KEY)
    assert node is not None
    assert node.total_tokens == 7
    assert node.total_tokens_fresh is True
    assert node.updated_at > 1


async def test_assistant_turn_usage_is_kept_and_not_counted(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Usage-carrying turns are accounted elsewhere: counting them here would double it."""
    usage = {"model": "gpt-test", "input_tokens": 10, "output_tokens": 3}
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "assistant", "hi", turn_usage=usage, token_count=3)

    assert await _total_tokens(storage) == 0
    assert entry.turn_usage == usage
    assert [e.turn_usage for e in await manager.get_transcript(KEY)] == [usage]


async def test_user_turn_usage_is_refused_and_nothing_is_written(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Issue 28: usage on a user message is never silently emptied: refused, naming the
    field, and nothing written (neither the row nor the tokens)."""
    await manager.create(KEY)
    before = await table_snapshot(storage)

    with pytest.raises(InvalidInputError, match="turn_usage"):
        await manager.append_message(
            KEY, "user", "hey", turn_usage={"input_tokens": 9}, token_count=9
        )

    assert await table_snapshot(storage) == before
    assert await _total_tokens(storage) == 0


@pytest.mark.parametrize("role", ["user", "system", "tool"])
@pytest.mark.parametrize("field", ["reasoning_content", "turn_usage"])
async def test_reasoning_and_usage_refused_for_non_assistant_roles(
    manager: SessionManager, storage: SessionStorage, role: str, field: str
) -> None:
    await manager.create(KEY)
    value: Any = "hidden thoughts" if field == "reasoning_content" else {"output_tokens": 1}
    before = await table_snapshot(storage)

    with pytest.raises(InvalidInputError, match=field):
        await manager.append_message(KEY, role, role, **{field: value})
    with pytest.raises(InvalidInputError, match=field):
        await manager.prepare_message(KEY, role, role, **{field: value})

    assert await table_snapshot(storage) == before
    # None is no value: accepted for every role.
    entry = await manager.append_message(KEY, role, role, reasoning_content=None, turn_usage=None)
    assert entry.id is not None


async def test_reasoning_kept_for_the_assistant(manager: SessionManager) -> None:
    await manager.create(KEY)

    await manager.append_message(KEY, "assistant", "answer", reasoning_content="chain")

    (stored,) = await manager.get_transcript(KEY)
    assert stored.reasoning_content == "chain"


async def test_provenance_maps_to_its_columns(manager: SessionManager) -> None:
    """Each provenance key lands in its own provenance_* field."""
    await manager.create(KEY)
    provenance = {
        "kind": "inter_session",
        "origin_session_id": "origin-123",
        "source_session_key": "agent:main:other",
        "source_channel": "slack",
        "source_tool": "sessions_send",
    }

    entry = await manager.append_message(KEY, "user", "relayed", provenance=provenance)

    (stored,) = await manager.get_transcript(KEY)
    for item in (entry, stored):
        assert item.provenance_kind == "inter_session"
        assert item.provenance_origin_session_id == "origin-123"
        assert item.provenance_source_session_key == "agent:main:other"
        assert item.provenance_source_channel == "slack"
        assert item.provenance_source_tool == "sessions_send"


async def test_no_provenance_leaves_the_columns_empty(manager: SessionManager) -> None:
    await manager.create(KEY)

    await manager.append_message(KEY, "user", "direct")

    (stored,) = await manager.get_transcript(KEY)
    assert stored.provenance_kind is None
    assert stored.provenance_source_session_key is None


async def test_append_touches_updated_at(manager: SessionManager, storage: SessionStorage) -> None:
    await manager.create(KEY)
    await _set_counters(storage, KEY, updated_at=1)

    await manager.append_message(KEY, "user", "ping")

    node = await storage.get_session(KEY)
    assert node is not None and node.updated_at > 1


# -- reading the transcript ----------------------------------------------------------------


async def test_transcript_is_in_append_order(manager: SessionManager) -> None:
    await manager.create(KEY)
    for content in ("q1", "a1", "q2", "a2"):
        await manager.append_message(KEY, "user", content)

    entries = await manager.get_transcript(KEY)

    assert [e.content for e in entries] == ["q1", "a1", "q2", "a2"]


async def test_same_timestamp_rows_keep_insert_order(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """created_at orders first; the row id breaks ties inside one millisecond."""
    node = await manager.create(KEY)
    for content in ("alpha", "beta", "gamma"):
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id,
                session_key=KEY,
                role="user",
                content=content,
                created_at=50_000,
            )
        )
    await storage.append_transcript_entry(
        TranscriptEntry(
            session_id=node.session_id,
            session_key=KEY,
            role="user",
            content="earliest, inserted last",
            created_at=40_000,
        )
    )

    entries = await manager.get_transcript(KEY)

    assert [e.content for e in entries] == ["earliest, inserted last", "alpha", "beta", "gamma"]
    tied = [e.id for e in entries[1:]]
    assert tied == sorted(tied)


async def test_transcript_pages(manager: SessionManager) -> None:
    await manager.create(KEY)
    for index in range(5):
        await manager.append_message(KEY, "user", f"m{index}")

    assert [e.content for e in await manager.get_transcript(KEY, limit=2)] == ["m0", "m1"]
    assert [e.content for e in await manager.get_transcript(KEY, 2, 1)] == ["m1", "m2"]
    assert [e.content for e in await manager.get_transcript(KEY, offset=3)] == ["m3", "m4"]
    assert await manager.get_transcript(KEY, limit=0) == []
    assert await manager.get_transcript(KEY, offset=9) == []


async def test_transcript_is_per_session(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.create("agent:main:neighbour")
    await manager.append_message(KEY, "user", "mine")
    await manager.append_message("agent:main:neighbour", "user", "theirs")

    assert [e.content for e in await manager.get_transcript(KEY)] == ["mine"]


async def test_canonical_transcript_without_archive_equals_live(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "a")
    await manager.append_message(KEY, "assistant", "b")

    live = await manager.get_transcript(KEY)
    canonical = await manager.get_canonical_transcript(KEY)

    assert [e.model_dump() for e in canonical] == [e.model_dump() for e in live]


async def test_missing_session_is_a_key_error(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Transcript calls on an unknown key fail loudly and create nothing."""
    ghost = "agent:main:ghost"
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "append_message": lambda: manager.append_message(ghost, "user", "x"),
        "get_transcript": lambda: manager.get_transcript(ghost),
        "get_canonical_transcript": lambda: manager.get_canonical_transcript(ghost),
        "truncate": lambda: manager.truncate(ghost, 1),
        "get_summaries": lambda: manager.get_summaries(ghost),
    }

    for name, call in calls.items():
        with pytest.raises(KeyError, match="Session not found"):
            await call()
        assert await storage.count_sessions() == 0, name


# -- truncate ------------------------------------------------------------------------------


async def _fill(manager: SessionManager, count: int) -> list[TranscriptEntry]:
    return [await manager.append_message(KEY, "user", f"line {i}") for i in range(count)]


async def test_truncate_to_zero_empties_the_transcript(manager: SessionManager) -> None:
    await manager.create(KEY)
    await _fill(manager, 2)

    result = await manager.truncate(KEY, max_messages=0)

    assert result == {"truncated": True, "before_count": 2, "after_count": 0}
    assert await manager.get_transcript(KEY) == []


async def test_truncate_keeps_the_newest_entries(manager: SessionManager) -> None:
    """The tail survives in order, with its message ids and timestamps."""
    await manager.create(KEY)
    appended = await _fill(manager, 5)

    result = await manager.truncate(KEY, 2)

    assert result == {"truncated": True, "before_count": 5, "after_count": 2}
    kept = await manager.get_transcript(KEY)
    assert [e.content for e in kept] == ["line 3", "line 4"]
    assert [(e.message_id, e.created_at) for e in kept] == [
        (e.message_id, e.created_at) for e in appended[3:]
    ]


async def test_truncate_within_the_limit_is_a_no_op(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await _fill(manager, 3)
    await _set_counters(storage, KEY, updated_at=1)
    before = [e.model_dump() for e in await manager.get_transcript(KEY)]

    for limit in (3, 4, 20):
        result = await manager.truncate(KEY, limit)
        assert result == {"truncated": False, "before_count": 3, "after_count": 3}

    assert [e.model_dump() for e in await manager.get_transcript(KEY)] == before
    node = await storage.get_session(KEY)
    assert node is not None and node.updated_at == 1


async def test_truncate_default_keeps_twenty(manager: SessionManager) -> None:
    await manager.create(KEY)
    await _fill(manager, 22)

    result = await manager.truncate(KEY)

    assert result == {"truncated": True, "before_count": 22, "after_count": 20}
    assert (await manager.get_transcript(KEY))[0].content == "line 2"


async def test_truncate_refuses_a_negative_limit(manager: SessionManager) -> None:
    await manager.create(KEY)
    await _fill(manager, 2)

    with pytest.raises(ValueError, match="max_messages must be >= 0"):
        await manager.truncate(KEY, -1)

    assert len(await manager.get_transcript(KEY)) == 2


async def test_truncate_leaves_summaries_and_context_states(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await _fill(manager, 4)
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="so far")
    )
    await manager.save_context_state(
        SessionContextState(
            session_id=node.session_id, session_key=KEY, state_kind="structured_summary_v1"
        )
    )

    await manager.truncate(KEY, 1)

    assert [s.summary_text for s in await manager.get_summaries(KEY)] == ["so far"]
    states = await manager.get_context_states(KEY)
    assert len(states) == 1 and states[0].valid is True


async def test_truncate_drops_the_compacted_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """After a truncate the canonical transcript is exactly what was kept."""
    node = await manager.create(KEY)
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(
            [
                CompactedTranscriptEntry(
                    session_id=node.session_id,
                    session_key=KEY,
                    compaction_id="cmp_old",
                    original_entry_id=1,
                    role="user",
                    content="archived",
                    created_at=1_000,
                )
            ],
        )
    await _fill(manager, 3)

    await manager.truncate(KEY, 1)

    assert [e.content for e in await manager.get_canonical_transcript(KEY)] == ["line 2"]
    assert await storage.get_compacted_transcript_entries(node.session_id) == []


async def test_truncate_does_not_touch_other_sessions(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.create("agent:main:bystander")
    await _fill(manager, 3)
    await manager.append_message("agent:main:bystander", "user", "untouched")

    await manager.truncate(KEY, 0)

    contents = [e.content for e in await manager.get_transcript("agent:main:bystander")]
    assert contents == ["untouched"]


# -- memory sync ---------------------------------------------------------------------------


async def test_memory_sync_receives_the_utf8_size(storage: SessionStorage) -> None:
    """The notifier learns how many bytes were stored, not how many characters."""
    sizes: list[int] = []
    manager = SessionManager(storage, sizes.append, inject_time_prefix=False)
    await manager.create(KEY)

    await manager.append_message(KEY, "user", "abc")
    await manager.append_message(KEY, "user", "héllo")
    await manager.append_message(KEY, "assistant", "日本語")
    await manager.append_message(KEY, "assistant", None, tool_calls=[{"id": "c"}])

    assert sizes == [3, 6, 9, 0]


async def test_memory_sync_may_be_a_coroutine_function(storage: SessionStorage) -> None:
    sizes: list[int] = []

    async def notify(size: int) -> None:
        sizes.append(size)

    manager = SessionManager(storage, notify, inject_time_prefix=False)
    await manager.create(KEY)

    await manager.append_message(KEY, "user", "ünï")

    assert sizes == [5]


async def test_memory_sync_sees_the_stamped_content(storage: SessionStorage) -> None:
    """With the time prefix on, the size is that of what was stored."""
    sizes: list[int] = []
    manager = SessionManager(storage, sizes.append, inject_time_prefix=True, time_prefix_tz="UTC")
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", "x")

    assert entry.content is not None
    assert sizes == [len(entry.content.encode("utf-8"))]
    assert sizes[0] > 1


async def test_memory_sync_is_not_called_when_the_append_fails(storage: SessionStorage) -> None:
    sizes: list[int] = []
    manager = SessionManager(storage, sizes.append, inject_time_prefix=False)

    with pytest.raises(KeyError):
        await manager.append_message("agent:main:ghost", "user", "lost")

    assert sizes == []
