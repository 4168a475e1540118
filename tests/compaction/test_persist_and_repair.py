"""Persisting a summary the caller already has (SEMANTICS §9), and the repair queue of
compactions whose memory flush went wrong (§10.2-10.3). Both backends."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionManager, SessionStorage, SessionSummary, TranscriptEntry
from opensquilla.session.errors import InvalidInputError
from tests.helpers import table_snapshot

KEY = "agent:main:inline"
LATEST = [{"role": "assistant", "content": "latest reply"}]


async def four_messages(manager: SessionManager, key: str = KEY) -> list[int]:
    await manager.create(key)
    ids = []
    for index in range(4):
        entry = await manager.append_message(key, "user", f"msg {index}", token_count=5)
        assert entry.id is not None
        ids.append(entry.id)
    return ids


async def degraded(manager: SessionManager, key: str, compaction_id: str) -> None:
    """A session with one compaction whose flush receipt needs repair."""
    await four_messages(manager, key)
    await manager.persist_compaction_result(
        key,
        "condensed",
        LATEST,
        compaction_id=compaction_id,
        flush_receipt_status="degraded_forensic",
    )


# -- positional semantics ----------------------------------------------------------------


async def test_positional_persist_archives_the_prefix(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Four rows and one kept dict: three archived, the unmatched fourth replaced."""
    ids = await four_messages(manager)

    written = await manager.persist_compaction_result(
        KEY,
        "condensed history",
        LATEST,
        compaction_id="cmp_inline_x",
        trigger_reason="agent_inline_overflow",
    )

    assert written is True
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    live = await manager.get_transcript(KEY)
    assert [(e.role, e.content) for e in live] == [("assistant", "latest reply")]
    assert all(e.role != "system" for e in live)
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == ["msg 0", "msg 1", "msg 2", "latest reply"]
    archived = await storage.get_compacted_transcript_entries(node.session_id)
    assert [(a.original_entry_id, a.compaction_id, a.compaction_index) for a in archived] == [
        (ids[0], "cmp_inline_x", 0),
        (ids[1], "cmp_inline_x", 0),
        (ids[2], "cmp_inline_x", 0),
    ]
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_text == "condensed history"
    assert (row.compaction_id, row.trigger_reason) == ("cmp_inline_x", "agent_inline_overflow")
    assert (row.removed_count, row.kept_count, row.chunk_count) == (3, 1, 0)
    assert (row.tokens_before, row.tokens_after) == (None, None)
    assert row.summary_format == "structured_v1"
    assert row.summary_source == "unknown"
    assert row.covered_through_id == ids[2]
    (state,) = await manager.get_context_states(KEY)
    assert state.state_kind == "structured_summary_v1"
    assert state.payload["compaction_id"] == "cmp_inline_x"
    assert state.payload["current_status"] == "condensed history"


async def test_kept_dict_matching_the_live_row_reuses_it(manager: SessionManager) -> None:
    """Same role and content at the same position: the row stays as it is, id included."""
    ids = await four_messages(manager)
    before = await manager.get_transcript(KEY)

    await manager.persist_compaction_result(
        KEY,
        "condensed",
        [{"role": "user", "content": "msg 2"}, {"role": "user", "content": "msg 3"}],
    )

    live = await manager.get_transcript(KEY)
    assert [(e.id, e.message_id, e.created_at) for e in live] == [
        (e.id, e.message_id, e.created_at) for e in before[2:]
    ]
    assert [e.id for e in live] == ids[2:]
    assert [e.content for e in await manager.get_canonical_transcript(KEY)] == [
        "msg 0",
        "msg 1",
        "msg 2",
        "msg 3",
    ]


async def test_the_same_role_keeps_the_stored_row_and_its_metadata(
    manager: SessionManager,
) -> None:
    """``match_kept="role"`` (upstream HEAD's rule, opt-in) matches a kept dict to the live
    row at its position by role alone: the dicts a compactor returns are its replay view of
    the rows (silent replies blanked, no turn context, provenance or reasoning), so the
    stored row, every column of it, is what stays. A dict that states no tool calls keeps
    the row's."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "old question", token_count=5)
    await manager.append_message(KEY, "assistant", "old answer", token_count=5)
    question = await manager.append_message(
        KEY,
        "user",
        "what now?",
        turn_context={"turn_id": "t-2", "input_mode": "chat"},
        provenance={"kind": "inter_session", "source_session_key": "agent:main:other"},
    )
    answer = await manager.append_message(
        KEY,
        "assistant",
        "NO_REPLY",
        tool_calls=[{"type": "tool_use", "tool_use_id": "call-1", "name": "run"}],
        reasoning_content="thinking",
        turn_usage={"input_tokens": 3},
        turn_context={"turn_id": "t-2", "run_kind": "heartbeat"},
    )
    before = await manager.get_transcript(KEY)

    written = await manager.persist_compaction_result(
        KEY,
        "condensed",
        [
            {"role": "user", "content": "[replay view] what now?"},
            {"role": "assistant", "content": ""},  # the silent reply, blanked for replay
        ],
        match_kept="role",
    )

    assert written is True
    assert await manager.get_transcript(KEY) == before[2:]
    assert [e.message_id for e in before[2:]] == [question.message_id, answer.message_id]
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == ["old question", "old answer", "what now?", "NO_REPLY"]
    (summary,) = await manager.get_summaries(KEY)
    assert (summary.removed_count, summary.kept_count) == (2, 2)


async def redaction_case(manager: SessionManager) -> list[TranscriptEntry]:
    """Live ``[user q1, assistant a1, user <a secret>, tool "result A" (call_A)]``."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "q1", token_count=5)
    await manager.append_message(KEY, "assistant", "a1", token_count=5)
    await manager.append_message(KEY, "user", "my password is hunter2", token_count=5)
    await manager.append_message(KEY, "tool", "result A", tool_call_id="call_A", token_count=5)
    return await manager.get_transcript(KEY)


REDACTED = [
    {"role": "user", "content": "my password is [REDACTED]"},
    {"role": "tool", "content": "result B", "tool_call_id": "call_B"},
]


async def test_by_default_a_rewritten_kept_dict_replaces_the_row(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The default (SEMANTICS §9 step 5) compares role and content: a caller that rewrote
    a kept row (a redaction, another tool result) gets its own dicts as the live tail, and
    the rows they replace are dropped, not archived: the secret is gone from every table."""
    before = await redaction_case(manager)

    written = await manager.persist_compaction_result(KEY, "condensed", REDACTED)

    assert written is True
    live = await manager.get_transcript(KEY)
    assert [(e.role, e.content, e.tool_call_id) for e in live] == [
        ("user", "my password is [REDACTED]", None),
        ("tool", "result B", "call_B"),
    ]
    assert not {e.id for e in live} & {e.id for e in before}
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == [
        "q1",
        "a1",
        "my password is [REDACTED]",
        "result B",
    ]
    assert "hunter2" not in repr(await table_snapshot(storage))
    assert "call_A" not in repr(await table_snapshot(storage))


async def test_role_mode_keeps_the_row_but_never_another_call(manager: SessionManager) -> None:
    """``match_kept="role"``: the user row of the same role stays as stored (HEAD's rule:
    its content included), but the tool dict names another call than the row, so it is a
    new row: a tool result is never re-paired with a call the caller did not name."""
    before = await redaction_case(manager)

    written = await manager.persist_compaction_result(KEY, "condensed", REDACTED, match_kept="role")

    assert written is True
    kept, tool = await manager.get_transcript(KEY)
    assert kept == before[2]
    assert tool.id not in {e.id for e in before}
    assert (tool.role, tool.content, tool.tool_call_id) == ("tool", "result B", "call_B")


@pytest.mark.parametrize("match_kept", ["content", "role"])
async def test_stated_tool_fields_must_be_the_rows(
    manager: SessionManager, match_kept: str
) -> None:
    """Same role and content, but the dict states another ``tool_call_id`` or other
    ``tool_calls``: a new row in either mode. A dict that states the row's own stays."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "q", token_count=5)
    call = await manager.append_message(
        KEY, "assistant", "calling", tool_calls=[{"id": "call_1"}], token_count=5
    )
    result = await manager.append_message(KEY, "tool", "done", tool_call_id="call_1", token_count=5)

    await manager.persist_compaction_result(
        KEY,
        "condensed",
        [
            {"role": "assistant", "content": "calling", "tool_calls": [{"id": "call_2"}]},
            {"role": "tool", "content": "done", "tool_call_id": "call_1"},
        ],
        match_kept=match_kept,
    )

    live = await manager.get_transcript(KEY)
    # The new row sorts after the kept one (its created_at is now, SEMANTICS §9).
    assert live[0] == result
    assert live[1].id != call.id and live[1].tool_calls == [{"id": "call_2"}]
    assert call.id not in {e.id for e in live}


@pytest.mark.parametrize("value", ["contents", "", 1, True])
async def test_an_unknown_match_mode_is_refused(
    manager: SessionManager, storage: SessionStorage, value: object
) -> None:
    await four_messages(manager)
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match="match_kept"):
        await manager.persist_compaction_result(
            KEY,
            "condensed",
            LATEST,
            match_kept=value,  # type: ignore[arg-type]
        )
    assert await table_snapshot(storage) == before


async def test_match_mode_is_refused_with_a_source(manager: SessionManager) -> None:
    await four_messages(manager)
    source = await manager.capture_compaction_source(KEY)
    with pytest.raises(InvalidInputError, match="match_kept"):
        await manager.persist_compaction_result(
            KEY,
            "condensed",
            [],
            source_entries=list(source.entries),
            source_preimage=source.preimage,
            removed_count=2,
            match_kept="role",
        )


async def test_a_kept_dict_is_checked_even_where_the_row_stays(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A bad value in a dict whose row is kept as it is still refuses the call."""
    await four_messages(manager)
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match="tool_calls"):
        await manager.persist_compaction_result(
            KEY, "condensed", [{"role": "user", "content": "x", "tool_calls": "call"}]
        )
    assert await table_snapshot(storage) == before


async def test_a_mismatch_replaces_only_its_position(manager: SessionManager) -> None:
    """Same content under another role is a mismatch too: a new row takes the place."""
    ids = await four_messages(manager)

    await manager.persist_compaction_result(
        KEY,
        "condensed",
        [
            {"role": "user", "content": "msg 2"},
            {"role": "assistant", "content": "msg 3", "tool_calls": [{"id": "c"}]},
        ],
    )

    first, second = await manager.get_transcript(KEY)
    assert first.id == ids[2]
    assert second.id not in ids
    assert (second.role, second.content, second.tool_calls) == (
        "assistant",
        "msg 3",
        [{"id": "c"}],
    )
    canonical = await manager.get_canonical_transcript(KEY)
    assert [(e.role, e.content) for e in canonical] == [
        ("user", "msg 0"),
        ("user", "msg 1"),
        ("user", "msg 2"),
        ("assistant", "msg 3"),
    ]


async def test_obligations_come_from_the_removed_rows(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "Goal: rotate the keys", token_count=5)
    await manager.append_message(KEY, "tool", "rotated", tool_call_id="call_rot", token_count=5)
    await manager.append_message(KEY, "user", "thanks", token_count=5)

    await manager.persist_compaction_result(
        KEY, "We rotate the keys.", [{"role": "user", "content": "thanks"}]
    )

    (row,) = await manager.get_summaries(KEY)
    assert row.summary_payload is not None
    assert row.summary_payload["user_goal"] == "rotate the keys"
    assert row.coverage_status == "pass_with_backfill"
    assert row.missing_obligations == ["tool_result_id: call_rot"]


async def test_nothing_is_written_without_a_summary_or_a_session(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """An empty summary would lose the removed rows; a missing session is only logged."""
    await four_messages(manager)
    await manager.append_message(KEY, "user", "msg 4", token_count=5)
    before = await table_snapshot(storage)

    for text in ("", "   "):
        assert await manager.persist_compaction_result(KEY, text, LATEST) is False
        assert await table_snapshot(storage) == before
    assert not await manager.persist_compaction_result("agent:main:ghost", "text", LATEST)
    assert await table_snapshot(storage) == before


async def test_delete_session_removes_the_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await four_messages(manager)
    await manager.persist_compaction_result(KEY, "condensed", LATEST)
    node = await manager.get_session(KEY)
    assert node is not None
    assert len(await storage.get_compacted_transcript_entries(node.session_id)) == 3

    assert await storage.delete_session(KEY) is True

    assert await storage.get_compacted_transcript_entries(node.session_id) == []
    assert await storage.get_all_summaries(node.session_id) == []
    assert await storage.get_transcript(node.session_id) == []
    assert await manager.get_context_states(KEY) == []


# -- the repair queue --------------------------------------------------------------------


async def test_queue_filters_by_exact_agent_prefix_orders_and_limits(
    manager: SessionManager,
) -> None:
    """``a_b`` must not match ``axb`` (no LIKE wildcards) nor ``a_bc``."""
    await degraded(manager, "agent:a_b:one", "cmp_1")
    await degraded(manager, "agent:axb:one", "cmp_2")
    await degraded(manager, "agent:a_bc:one", "cmp_3")
    await degraded(manager, "agent:a_b:two", "cmp_4")
    await four_messages(manager, "agent:a_b:fine")
    await manager.persist_compaction_result(
        "agent:a_b:fine", "ok", LATEST, flush_receipt_status="safe"
    )

    everything = await manager.list_degraded_compactions()
    mine = await manager.list_degraded_compactions(agent_id="A_B")
    first_only = await manager.list_degraded_compactions(agent_id="a_b", limit=1)

    assert [s.compaction_id for s in everything] == ["cmp_1", "cmp_2", "cmp_3", "cmp_4"]
    assert [s.compaction_id for s in mine] == ["cmp_1", "cmp_4"]
    assert [s.compaction_id for s in first_only] == ["cmp_1"]
    assert await manager.list_degraded_compactions(agent_id="nobody") == []


async def test_unsafe_flush_is_queued_with_its_preimage(manager: SessionManager) -> None:
    """The repair job gets the removed rows back in order, under their live ids."""
    ids = await four_messages(manager)
    await manager.persist_compaction_result(
        KEY, "condensed", LATEST, compaction_id="cmp_pre", flush_receipt_status="unsafe"
    )
    (pending,) = await manager.list_degraded_compactions(agent_id="main")
    assert pending.flush_receipt_status == "degraded_forensic"

    preimage = await manager.get_compaction_preimage(pending)

    assert [(e.id, e.content) for e in preimage] == [
        (ids[0], "msg 0"),
        (ids[1], "msg 1"),
        (ids[2], "msg 2"),
    ]
    assert all(e.session_id == pending.session_id for e in preimage)
    pending.compaction_id = None
    assert await manager.get_compaction_preimage(pending) == []


async def test_repair_status_takes_the_summary_off_the_queue(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await degraded(manager, KEY, "cmp_fix")
    (pending,) = await manager.list_degraded_compactions(agent_id="main")

    unsaved = SessionSummary(session_id="x", session_key=KEY, summary_text="never stored")
    before = await table_snapshot(storage)
    await manager.mark_compaction_repair_status(unsaved, "repaired")
    assert await table_snapshot(storage) == before

    await manager.mark_compaction_repair_status(pending, "repaired")

    assert await manager.list_degraded_compactions(agent_id="main") == []
    (row,) = await manager.get_summaries(KEY)
    assert row.flush_receipt_status == "repaired"


async def test_flush_status_backfill_by_compaction_id(manager: SessionManager) -> None:
    await degraded(manager, KEY, "cmp_bg")

    assert await manager.mark_compaction_flush_receipt_status(KEY, "cmp_unknown", "safe") == 0
    assert await manager.list_degraded_compactions() != []
    assert (
        await manager.mark_compaction_flush_receipt_status("agent:MAIN:inline", "cmp_bg", "safe")
        == 1
    )

    (row,) = await manager.get_summaries(KEY)
    assert row.flush_receipt_status == "safe"
    assert await manager.list_degraded_compactions() == []
