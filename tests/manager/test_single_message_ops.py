"""Single-message operations and assistant identity (docs/semantics.md#message-id), on both
backends: the message id as upsert key, reservations, removal, injection, turn-context
rebinding, prepared messages, and the reset of the collaboration fields."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import (
    InvalidInputError,
    SessionManager,
    SessionNotFoundError,
    SessionStorage,
    StaleEpochError,
)
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.fallback import fallback_chunk_summary
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.models import AssistantMessageReservation, TranscriptEntry
from opensquilla.session.usecases.messages import current_turn_context, set_turn_context
from tests.helpers import table_snapshot

KEY = "agent:main:single"
WAIT = 120.0  # a hang guard: every wait below is for an event the other side must set


async def live_rows(manager: SessionManager, key: str = KEY) -> list[tuple[str, str | None]]:
    return [(e.message_id, e.content) for e in await manager.get_transcript(key)]


async def fold_first_rows(manager: SessionManager, count: int = 6) -> list[str]:
    """``count`` user rows of 200 tokens with ids m0..; a compaction then archives the
    oldest ones. Returns the ids."""
    await manager.create(KEY)
    ids = [f"m{index}" for index in range(count)]
    for index, message_id in enumerate(ids):
        await manager.append_message(
            KEY, "user", f"seed {index}", token_count=200, message_id=message_id
        )
    return ids


# -- reservations and the upsert by message id -------------------------------------------


async def test_reservation_writes_nothing_and_one_id_upserts_one_row(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    before = await table_snapshot(storage)
    reservation = SessionManager.reserve_assistant_message("turn-1", "reply-1", " agent:MAIN:x")
    assert reservation.session_key == "agent:main:x"
    reservation = SessionManager.reserve_assistant_message("turn-1", "reply-1", KEY)
    assert reservation == AssistantMessageReservation("turn-1", "reply-1", KEY, None)
    with pytest.raises(AttributeError):
        reservation.turn_id = "other"  # type: ignore[misc]
    assert await table_snapshot(storage) == before

    rid = reservation.assistant_message_id
    draft = await manager.append_message(KEY, "assistant", "dra", token_count=7, message_id=rid)
    final = await manager.append_message(
        KEY, "assistant", "final", token_count=7, assistant_message_id=rid
    )
    replay = await manager.append_message(
        KEY, "assistant", "final", token_count=7, message_id=rid, assistant_message_id=rid
    )

    rows = await manager.get_transcript(KEY)
    assert [(e.message_id, e.content) for e in rows] == [(rid, "final")]
    assert draft.id is not None and draft.id == final.id == replay.id == rows[0].id
    assert draft.created_at == final.created_at == replay.created_at == rows[0].created_at
    stored = await manager.get_session(KEY)
    assert stored is not None
    assert stored.total_tokens == 7  # counted once, at the insert
    assert stored.updated_at >= node.updated_at


async def test_reservation_without_visible_output_creates_no_row(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "question")
    before = await table_snapshot(storage)
    manager.reserve_assistant_message("turn-2", "never-sent", KEY, channel_id="web")
    assert await table_snapshot(storage) == before
    assert [role for role in (e.role for e in await manager.get_transcript(KEY))] == ["user"]


@pytest.mark.parametrize(
    ("turn_id", "reply_id"), [("", "r"), ("t", ""), ("  ", "r"), ("t", "\t"), (None, "r")]
)
def test_reservation_refuses_blank_ids(turn_id: Any, reply_id: Any) -> None:
    with pytest.raises(ValueError, match=r"must be a non-empty string|must be a string"):
        SessionManager.reserve_assistant_message(turn_id, reply_id, KEY)


async def test_upsert_replaces_every_column_but_id_and_created_at(
    manager: SessionManager,
) -> None:
    """Fields the new call leaves out are cleared; the row keeps its place."""
    await manager.create(KEY)
    first = await manager.append_message(
        KEY,
        "assistant",
        "draft",
        message_id="a1",
        tool_calls=[{"id": "c1", "name": "search"}],
        reasoning_content="thinking",
        turn_usage={"input": 3},
        turn_context={"run_kind": "goal"},
        token_count=4,
        provenance={"kind": "external_user", "source_channel": "web"},
    )
    later = await manager.append_message(KEY, "user", "after")
    again = await manager.append_message(KEY, "assistant", "final", message_id="a1")

    rows = await manager.get_transcript(KEY)
    assert [e.message_id for e in rows] == ["a1", later.message_id]
    row = rows[0]
    assert (row.id, row.created_at) == (first.id, first.created_at) == (again.id, again.created_at)
    assert row.content == "final"
    assert (row.tool_calls, row.reasoning_content, row.turn_usage, row.turn_context) == (
        None,
        None,
        None,
        None,
    )
    assert (row.token_count, row.provenance_kind, row.provenance_source_channel) == (
        None,
        None,
        None,
    )


async def test_upsert_with_a_new_id_counts_its_tokens_and_marks_them_stale(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await storage.update_session_fields(KEY, {"total_tokens": 10, "total_tokens_fresh": True})
    await manager.append_message(KEY, "user", "q", token_count=5, message_id="u1")
    node = await manager.get_session(KEY)
    assert node is not None and (node.total_tokens, node.total_tokens_fresh) == (15, False)
    await storage.update_session_fields(KEY, {"total_tokens_fresh": True})
    await manager.append_message(KEY, "user", "q again", token_count=5, message_id="u1")
    node = await manager.get_session(KEY)
    assert node is not None and (node.total_tokens, node.total_tokens_fresh) == (15, True)


@pytest.mark.parametrize(
    ("message_id", "assistant_message_id", "message"),
    [
        ("a", "b", "message_id and assistant_message_id must match"),
        ("", None, "message_id must be a non-empty string when supplied"),
        ("   ", None, "message_id must be a non-empty string when supplied"),
        (None, "", "assistant_message_id must be a non-empty string when supplied"),
    ],
)
async def test_append_refuses_bad_message_ids(
    manager: SessionManager,
    storage: SessionStorage,
    message_id: str | None,
    assistant_message_id: str | None,
    message: str,
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(storage)
    with pytest.raises(ValueError, match=message):
        await manager.append_message(
            KEY,
            "assistant",
            "x",
            message_id=message_id,
            assistant_message_id=assistant_message_id,
        )
    assert await table_snapshot(storage) == before


async def test_upsert_fence_refuses_a_stale_epoch_and_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "assistant", "draft", message_id="a1")
    before = await table_snapshot(storage)
    entry = TranscriptEntry(
        session_id=node.session_id, session_key=KEY, role="assistant", content="x", message_id="a1"
    )
    with pytest.raises(StaleEpochError, match=f"^Epoch mismatch for {KEY}: expected 5, got 0$"):
        await storage.upsert_transcript_entry_and_touch(
            entry, expected_epoch=5, updated_at=1, token_delta=3
        )
    missing = entry.model_copy(update={"session_key": "agent:main:nobody", "message_id": "n"})
    with pytest.raises(StaleEpochError, match=r"expected 0, got None$"):
        await storage.upsert_transcript_entry_and_touch(missing, expected_epoch=0, updated_at=1)
    assert await table_snapshot(storage) == before


async def test_upsert_is_fenced_to_its_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A manager whose cached generation is older re-reads it once; a storage caller fenced
    to the old generation is refused."""
    old = await manager.create(KEY)
    await manager.append_message(KEY, "assistant", "old generation", message_id="a1")
    other = SessionManager(storage, inject_time_prefix=False)
    await other.reset(KEY)
    entry = TranscriptEntry(
        session_id=old.session_id, session_key=KEY, role="assistant", message_id="a1"
    )
    with pytest.raises(StaleEpochError):
        await storage.upsert_transcript_entry_and_touch(entry, expected_epoch=0, updated_at=1)
    written = await manager.append_message(KEY, "assistant", "new generation", message_id="a1")
    assert written.session_id != old.session_id
    assert await live_rows(manager) == [("a1", "new generation")]


async def test_upsert_after_compaction_inserts_a_new_live_row(manager: SessionManager) -> None:
    ids = await fold_first_rows(manager)
    result = await manager.compact_with_result(KEY, 1000)
    assert result.removed_count > 0
    archived = await manager.get_canonical_transcript(KEY)
    assert "m0" not in [e.message_id for e in await manager.get_transcript(KEY)]
    tokens = (await manager.get_session(KEY) or pytest.fail()).total_tokens

    again = await manager.append_message(KEY, "user", "m0 again", token_count=9, message_id="m0")

    live = await manager.get_transcript(KEY)
    assert live[-1].id == again.id and live[-1].message_id == "m0"
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.message_id for e in canonical] == [*ids, "m0"]
    assert canonical[: len(archived)] == archived
    assert (await manager.get_session(KEY) or pytest.fail()).total_tokens == tokens + 9


async def test_concurrent_upserts_of_one_new_id_make_one_row(database: str) -> None:
    """Two storages (two engines) upsert the same new id. The first is held inside its
    write transaction, after its insert and before its commit, until the second has been
    started and is seen waiting for it; the second then finds the row and replaces it."""
    stores = [SessionStorage(database) for _ in range(2)]
    for store in stores:
        await store.connect()
    try:
        first, second = (SessionManager(s, inject_time_prefix=False) for s in stores)
        await first.create(KEY)
        await second.get_session(KEY)
        inside, release = asyncio.Event(), asyncio.Event()
        original = TranscriptRepository.upsert_and_touch
        calls = 0

        async def held(self: TranscriptRepository, entry: TranscriptEntry, **kw: Any) -> Any:
            nonlocal calls
            calls += 1
            placed = await original(self, entry, **kw)
            if calls == 1:
                inside.set()
                await asyncio.wait_for(release.wait(), WAIT)
            return placed

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(TranscriptRepository, "upsert_and_touch", held)
            one = asyncio.create_task(
                first.append_message(KEY, "assistant", "one", token_count=4, message_id="x")
            )
            await asyncio.wait_for(inside.wait(), WAIT)
            two = asyncio.create_task(
                second.append_message(KEY, "assistant", "two", token_count=4, message_id="x")
            )
            await asyncio.sleep(0.3)
            assert not two.done(), "the second upsert did not wait for the first one's commit"
            release.set()
            written = await asyncio.gather(one, two)

        rows = await first.get_transcript(KEY)
        assert [(e.message_id, e.content) for e in rows] == [("x", "two")]
        assert written[0].id == written[1].id == rows[0].id
        assert (await first.get_session(KEY) or pytest.fail()).total_tokens == 4
    finally:
        for store in stores:
            await store.close()


# -- remove, inject, turn context --------------------------------------------------------


async def test_remove_message_deletes_every_live_duplicate_only(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    for content in ("one", "two"):  # the low-level append does not upsert: duplicates
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id,
                session_key=KEY,
                role="user",
                content=content,
                message_id="dup",
            )
        )
    kept = await manager.append_message(KEY, "user", "kept", token_count=6)
    counters = await manager.get_session(KEY)

    assert await manager.remove_message(KEY, "dup") is True
    assert await manager.remove_message(KEY, "dup") is False
    assert await live_rows(manager) == [(kept.message_id, "kept")]
    after = await manager.get_session(KEY)
    assert after is not None and counters is not None
    assert (after.total_tokens, after.updated_at) == (counters.total_tokens, counters.updated_at)


async def test_remove_message_never_touches_the_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await fold_first_rows(manager)
    assert (await manager.compact_with_result(KEY, 1000)).removed_count > 0
    before = await table_snapshot(storage)
    assert await manager.remove_message(KEY, "m0") is False
    assert await table_snapshot(storage) == before


async def test_remove_message_of_a_missing_session_is_false(manager: SessionManager) -> None:
    assert await manager.remove_message("agent:main:nobody", "m") is False


async def test_storage_delete_transcript_entry(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "x", message_id="m")
    assert await storage.delete_transcript_entry("another-generation", "m") is False
    assert await storage.delete_transcript_entry(node.session_id, "m") is True
    assert await manager.count_transcript_entries(KEY) == 0


@pytest.mark.parametrize(
    ("provenance", "expected"),
    [
        (None, {"kind": "inter_session"}),
        ("external_user", {"kind": "external_user"}),
        (
            {
                "kind": "inter_session",
                "origin_session_id": "sid",
                "source_session_key": "agent:Main:Other",
                "source_channel": "web",
                "source_tool": "sessions_send",
            },
            {
                "kind": "inter_session",
                "origin_session_id": "sid",
                "source_session_key": "agent:main:Other",
                "source_channel": "web",
                "source_tool": "sessions_send",
            },
        ),
    ],
)
async def test_inject_message_is_a_user_append_with_provenance(
    storage: SessionStorage, provenance: Any, expected: Mapping[str, Any]
) -> None:
    manager = SessionManager(storage)  # with the time prefix
    await manager.create(KEY)
    args = () if provenance is None else (provenance,)
    assert await manager.inject_message(KEY, "hello from elsewhere", *args) is True
    [entry] = await manager.get_transcript(KEY)
    assert entry.role == "user"
    assert entry.content is not None and entry.content.startswith("[")
    assert entry.content.endswith("\nhello from elsewhere")
    stored = {
        name: getattr(entry, f"provenance_{name}")
        for name in (
            "kind",
            "origin_session_id",
            "source_session_key",
            "source_channel",
            "source_tool",
        )
    }
    assert stored == {name: expected.get(name) for name in stored}


async def test_inject_message_into_a_missing_session_is_a_key_error(
    manager: SessionManager,
) -> None:
    with pytest.raises(KeyError, match="Session not found: agent:main:nobody"):
        await manager.inject_message("agent:main:nobody", "hi")


async def test_turn_context_can_be_rebound_on_live_and_archived_rows(
    manager: SessionManager,
) -> None:
    await fold_first_rows(manager)
    assert (await manager.compact_with_result(KEY, 1000)).removed_count > 0
    await manager.append_message(KEY, "user", "tail", message_id="m0")  # archived and live
    live_ids = [e.message_id for e in await manager.get_transcript(KEY)]
    assert "m0" in live_ids and "m1" not in live_ids

    context = {"disposition": "rebound", "turn": 2}
    assert await manager.update_message_turn_context(" agent:MAIN:single", "m0", context)
    assert await manager.update_message_turn_context(KEY, "m1", {"x": 1})
    assert await manager.update_message_turn_context(KEY, "absent", {"x": 1}) is False

    canonical = await manager.get_canonical_transcript(KEY)
    contexts = {(e.message_id, e.id): e.turn_context for e in canonical}
    assert [c for (mid, _), c in contexts.items() if mid == "m0"] == [context, context]
    assert [c for (mid, _), c in contexts.items() if mid == "m1"] == [{"x": 1}]
    assert all(c is None for (mid, _), c in contexts.items() if mid not in ("m0", "m1"))

    assert await manager.update_message_turn_context(KEY, "m0", None)
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.turn_context for e in canonical if e.message_id == "m0"] == [None, None]


async def test_storage_turn_context_update_takes_the_key_as_given(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "x", message_id="m")
    assert await storage.update_transcript_turn_context("agent:MAIN:single", "m", {}) is False
    assert await storage.update_transcript_turn_context(KEY, "m", {"k": "v"}) is True
    with pytest.raises(InvalidInputError, match="turn_context"):
        await storage.update_transcript_turn_context(KEY, "m", {1: "not a string key"})


# -- prepare_message ---------------------------------------------------------------------


@pytest.fixture
async def notified(storage: SessionStorage) -> AsyncIterator[tuple[SessionManager, list[int]]]:
    sizes: list[int] = []
    yield SessionManager(storage, memory_sync_notify=sizes.append), sizes


async def test_prepare_message_writes_nothing_and_the_caller_appends_it(
    notified: tuple[SessionManager, list[int]], storage: SessionStorage
) -> None:
    manager, sizes = notified
    node = await manager.create(KEY)
    before = await table_snapshot(storage)
    entry, epoch = await manager.prepare_message(KEY, "user", "hi")
    assert await table_snapshot(storage) == before and sizes == []
    assert (entry.session_id, entry.session_key, epoch) == (node.session_id, KEY, node.epoch)
    assert uuid.UUID(entry.message_id).version == 4
    assert entry.content is not None and entry.content.endswith("\nhi")  # time-stamped
    assert entry.id is None

    await storage.append_transcript_entry(entry, expected_epoch=epoch)
    await manager.notify_message_appended(entry)
    assert sizes == [len(entry.content.encode())]
    assert [e.id for e in await manager.get_transcript(KEY)] == [entry.id]


async def test_prepare_message_assistant_fields_and_given_node(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    entry, epoch = await manager.prepare_message(
        KEY,
        "assistant",
        "answer",
        assistant_message_id="r1",
        reasoning_content="why",
        turn_usage={"output": 2},
        session_node=node,
    )
    assert (entry.message_id, entry.reasoning_content, entry.turn_usage, epoch) == (
        "r1",
        "why",
        {"output": 2},
        0,
    )


async def test_prepare_message_takes_the_ambient_turn_context(manager: SessionManager) -> None:
    await manager.create(KEY)
    assert current_turn_context.get() is None
    token = set_turn_context({"run_kind": "heartbeat"})
    try:
        ambient, _ = await manager.prepare_message(KEY, "assistant", "x")
        explicit, _ = await manager.prepare_message(KEY, "assistant", "x", turn_context={"a": 1})

        async def in_a_task() -> Any:
            return (await manager.prepare_message(KEY, "assistant", "x"))[0].turn_context

        inherited = await asyncio.create_task(in_a_task())
    finally:
        current_turn_context.reset(token)
    assert ambient.turn_context == {"run_kind": "heartbeat"} == inherited
    assert explicit.turn_context == {"a": 1}
    outside, _ = await manager.prepare_message(KEY, "assistant", "x")
    assert outside.turn_context is None
    with pytest.raises(InvalidInputError):
        set_turn_context("not a mapping")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"message_id": "a", "assistant_message_id": "b"}, ValueError, "must match"),
        ({"message_id": " "}, ValueError, "message_id must be a non-empty string when supplied"),
        ({"session_key": "agent:main:nobody"}, KeyError, "Session not found"),
        ({"node_key": "agent:main:other"}, ValueError, "session_node does not match session_key"),
    ],
)
async def test_prepare_message_errors(
    manager: SessionManager,
    storage: SessionStorage,
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    await manager.create(KEY)
    other = await manager.create("agent:main:other")
    kwargs = dict(kwargs)
    key = kwargs.pop("session_key", KEY)
    if kwargs.pop("node_key", None):
        kwargs["session_node"] = other
    before = await table_snapshot(storage)
    with pytest.raises(error, match=message):
        await manager.prepare_message(key, "user", "x", **kwargs)
    assert await table_snapshot(storage) == before


async def test_missing_session_in_prepare_is_session_not_found(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError):
        await manager.prepare_message("agent:main:nobody", "user", "x")


# -- compaction meets an in-place change -------------------------------------------------


class HeldSummarizer:
    """Fallback text, after the test's change has landed (the summariser waits for it)."""

    source = "fallback"

    def __init__(self, summarising: asyncio.Event, release: asyncio.Event) -> None:
        self.summarising, self.release = summarising, release

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.summarising.set()
        await asyncio.wait_for(self.release.wait(), WAIT)
        return fallback_chunk_summary(chunk, identifier_policy="strict")


@pytest.mark.parametrize("change", ["upsert", "turn_context"])
async def test_in_place_change_during_summary_makes_the_compaction_stale(
    manager: SessionManager, storage: SessionStorage, change: str
) -> None:
    """The row about to be folded keeps its id and position but not its content: the
    commit must notice, or the new content would be archived under a summary of the old."""
    await fold_first_rows(manager)
    summarising, release = asyncio.Event(), asyncio.Event()
    compaction = asyncio.create_task(
        manager.compact_with_result(KEY, 1000, summarizer=HeldSummarizer(summarising, release))
    )
    await asyncio.wait_for(summarising.wait(), WAIT)
    if change == "upsert":
        await manager.append_message(KEY, "user", "rewritten while summarising", message_id="m0")
    else:
        await manager.update_message_turn_context(KEY, "m0", {"disposition": "late"})
    changed = await table_snapshot(storage)
    release.set()
    result = await compaction

    assert result.skip_reason == "stale_preimage" and result.removed_count == 0
    assert await table_snapshot(storage) == changed
    retried = await manager.compact_with_result(KEY, 1000)  # nothing racing now
    assert retried.removed_count > 0 and retried.skip_reason is None


# -- reset -------------------------------------------------------------------------------


async def test_reset_clears_collaboration_and_plan_and_keeps_routing(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.update(
        KEY,
        collaboration_mode="plan",
        collaboration_revision=3,
        active_plan_revision_id="plan-7",
        model_routing_mode="router",
        model_routing_revision=2,
    )
    node = await manager.reset(KEY)
    stored = await manager.get_session(KEY)
    for row in (node, stored):
        assert row is not None
        assert (row.collaboration_mode, row.collaboration_revision) == ("default", 0)
        assert row.active_plan_revision_id is None
        assert (row.model_routing_mode, row.model_routing_revision) == ("router", 2)
