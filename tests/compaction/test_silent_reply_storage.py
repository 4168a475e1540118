"""Silent replies through a real compaction (HEAD-FEATURES §5.5,
docs/semantics.md#silent-replies): rows written as a runtime writes them (``prepare_message``
then the storage append) reach the summariser cleaned, while the stored rows, live or
archived, keep every byte. Both backends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opensquilla.session import SessionManager, SessionStorage, TranscriptEntry
from opensquilla.session.compaction import CompactionConfig
from tests.helpers import table_snapshot

KEY = "agent:main:silent"
GOAL = {"intent": "goal_continuation"}
WIDE = 100_000
TOOL_USE = {"type": "tool_use", "tool_use_id": "call-status", "name": "read_status", "input": {}}


class RecordingSummarizer:
    """A stand-in model that keeps every row it was asked to summarise."""

    source = "llm"

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.seen.extend(dict(entry) for entry in chunk)
        return "the runtime waited for an external update"


async def write(
    manager: SessionManager,
    storage: SessionStorage,
    role: str,
    content: str,
    **fields: Any,
) -> TranscriptEntry:
    """One row the way a runtime writes it: prepared by the manager, appended by the caller."""
    entry, epoch = await manager.prepare_message(KEY, role, content, **fields)
    return await storage.append_transcript_entry(entry, expected_epoch=epoch)


async def test_compaction_payload_sanitizes_silent_replies_without_rewriting_storage(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    goal_segments = [
        {"type": "text", "text": "NO_REPLY\nWaiting for an external update."},
        TOOL_USE,
        {"type": "text", "text": "HEARTBEAT_OK"},
    ]
    quoted_segments = [{"type": "text", "text": "HEARTBEAT_OK\nQuoted segment example."}]
    goal = await write(
        manager,
        storage,
        "assistant",
        "HEARTBEAT_OK\nWaiting for an external update.\nNO_REPLY",
        tool_calls=goal_segments,
        turn_context=GOAL,
        token_count=100,
    )
    quoted = await write(
        manager,
        storage,
        "assistant",
        "NO_REPLY\nQuoted protocol example.",
        tool_calls=quoted_segments,
        turn_context={},
        token_count=100,
    )
    exact = await write(manager, storage, "assistant", "NO_REPLY", turn_context={}, token_count=100)
    latest = await manager.append_message(KEY, "user", "any news?", token_count=10)
    stored = [goal, quoted, exact, latest]

    # Within budget: nothing is written, and kept_entries are the compactor's input.
    before = await table_snapshot(storage)
    skipped = await manager.compact_with_result(KEY, WIDE)
    assert skipped.skip_reason == "within_compaction_budget"
    assert await table_snapshot(storage) == before
    assert [e["content"] for e in skipped.kept_entries] == [
        "Waiting for an external update.",
        "NO_REPLY\nQuoted protocol example.",  # a default run: the token is quoted text
        "",
        latest.content,
    ]

    # A real compaction: the summariser sees the cleaned rows, one dict per stored row.
    model = RecordingSummarizer()
    result = await manager.compact_with_result(KEY, 40, summarizer=model)
    assert result.removed_count == 3 and result.summary_source == "llm"
    assert [(e["id"], e["message_id"], e["turn_context"]) for e in model.seen] == [
        (row.id, row.message_id, row.turn_context) for row in stored[:3]
    ]
    assert model.seen[0]["content"] == "Waiting for an external update."
    assert model.seen[0]["tool_calls"] == [
        {"type": "text", "text": "Waiting for an external update."},
        TOOL_USE,
    ]
    assert model.seen[1]["content"] == "NO_REPLY\nQuoted protocol example."
    assert model.seen[1]["tool_calls"] == quoted_segments
    assert (model.seen[2]["content"], model.seen[2]["tool_calls"]) == ("", None)
    assert "HEARTBEAT_OK" not in str(model.seen[0])

    # Storage still holds what the runtime wrote: the archive and the live tail alike.
    canonical = await manager.get_canonical_transcript(KEY)
    assert [(e.content, e.tool_calls) for e in canonical] == [
        (row.content, row.tool_calls) for row in stored
    ]
    assert canonical[0].tool_calls == goal_segments
    assert [e.id for e in await manager.get_transcript(KEY)] == [latest.id]


async def test_compaction_payload_suppresses_split_goal_marker_around_tool_pair(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    tool_pair = [
        TOOL_USE,
        {"type": "tool_result", "tool_use_id": "call-status", "result": "pending"},
    ]
    segments = [
        {"type": "text", "text": "NO_"},
        *tool_pair,
        {"type": "text", "text": "REPLY"},
    ]
    row = await write(
        manager, storage, "assistant", "NO_REPLY", tool_calls=segments, turn_context=GOAL
    )

    result = await manager.compact_with_result(KEY, WIDE)

    [payload] = result.kept_entries
    assert payload["content"] == ""
    assert payload["tool_calls"] == tool_pair
    assert "NO_" not in str(payload["tool_calls"]) and "REPLY" not in str(payload["tool_calls"])
    assert (payload["id"], payload["message_id"], payload["turn_context"]) == (
        row.id,
        row.message_id,
        GOAL,
    )
    [stored] = await manager.get_transcript(KEY)
    assert (stored.content, stored.tool_calls) == ("NO_REPLY", segments)
