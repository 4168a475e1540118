"""Both cut policies through the manager, on both backends (HEAD-FEATURES §0 tests 4 and 5,
§5.3).

The contract cuts per entry (the default, ``cut_policy="entries"``); upstream HEAD cuts
between API rounds and keeps a live latest round raw (``cut_policy="api_rounds"``). The same
transcripts are compacted under each policy, and what was removed, what stays live and what
the canonical transcript still holds are pinned for both.
"""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session import SessionManager
from opensquilla.session.compaction import CompactionConfig

KEY = "agent:main:rounds"
CALL = [{"id": "call_1", "type": "function"}]


def config(policy: str, **options: Any) -> CompactionConfig:
    return CompactionConfig(safety_margin=1.0, cut_policy=policy, **options)


async def contents(manager: SessionManager, *, canonical: bool = False) -> list[Any]:
    read = manager.get_canonical_transcript if canonical else manager.get_transcript
    return [entry.content for entry in await read(KEY)]


async def tool_exchange(manager: SessionManager, *, old_reply: bool) -> None:
    """A big old turn, a small tool round opened by a user request, a short question."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "old context", token_count=600 if old_reply else 300)
    if old_reply:
        await manager.append_message(KEY, "assistant", "old reply", token_count=3)
        await manager.append_message(KEY, "user", "tool request", token_count=3)
    await manager.append_message(KEY, "assistant", "calling tool", tool_calls=CALL, token_count=4)
    await manager.append_message(KEY, "tool", "tool result", tool_call_id="call_1", token_count=4)
    await manager.append_message(KEY, "user", "next question", token_count=3)
    await manager.append_message(KEY, "assistant", "answer", token_count=3)


async def test_round_cut_starts_the_kept_part_at_the_tool_request(
    manager: SessionManager,
) -> None:
    """HEAD's boundary-cut case: window 500 removes the old turn (2 rows) and keeps the
    whole tool round from its user request, with the call's metadata intact."""
    await tool_exchange(manager, old_reply=True)

    result = await manager.compact_with_result(KEY, 500, config=config("api_rounds"))

    assert result.removed_count == 2
    assert result.kept_entries[0]["content"] == "tool request"
    assert result.kept_entries[1]["tool_calls"] == CALL
    request, call, output, *_ = await manager.get_transcript(KEY)
    assert request.role == "user" and request.content == "tool request"
    assert call.role == "assistant" and call.tool_calls == CALL
    assert output.role == "tool" and output.tool_call_id == "call_1"
    assert await contents(manager, canonical=True) == [
        "old context",
        "old reply",
        "tool request",
        "calling tool",
        "tool result",
        "next question",
        "answer",
    ]


async def test_entry_cut_on_the_same_transcript_keeps_the_old_reply(
    manager: SessionManager,
) -> None:
    """The default policy on the transcript above fits one more entry in the budget."""
    await tool_exchange(manager, old_reply=True)

    result = await manager.compact_with_result(KEY, 500, config=CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 1
    assert await contents(manager) == [
        "old reply",
        "tool request",
        "calling tool",
        "tool result",
        "next question",
        "answer",
    ]


@pytest.mark.parametrize(
    ("policy", "removed", "live"),
    [
        # The contract (test 4): one entry goes, the call and its result stay together.
        ("entries", 1, ["calling tool", "tool result", "next question", "answer"]),
        # HEAD: the old user turn, the call and its result are one round and go together.
        ("api_rounds", 3, ["next question", "answer"]),
    ],
)
async def test_boundary_cut_around_a_tool_pair_under_each_policy(
    manager: SessionManager, policy: str, removed: int, live: list[str]
) -> None:
    await tool_exchange(manager, old_reply=False)

    result = await manager.compact_with_result(KEY, 100, config=config(policy))

    assert result.removed_count == removed
    assert await contents(manager) == live
    transcript = await manager.get_transcript(KEY)
    if policy == "entries":
        assert transcript[0].tool_calls == CALL
        assert transcript[1].tool_call_id == "call_1"
    assert len(await manager.get_canonical_transcript(KEY)) == 5


async def test_round_cut_summarizes_a_completed_tool_round(manager: SessionManager) -> None:
    """A finished call with its result is compacted as one round: its id is remembered as a
    tool result and is not listed as pending. Per entry, the call would stay live."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "run the checker", token_count=300)
    await manager.append_message(
        KEY,
        "assistant",
        "running it",
        tool_calls=[{"id": "call_7", "type": "function", "function": {"name": "check"}}],
        token_count=4,
    )
    await manager.append_message(KEY, "tool", "all green", tool_call_id="call_7", token_count=4)
    await manager.append_message(KEY, "assistant", "the checker passed", token_count=4)
    await manager.append_message(KEY, "user", "next", token_count=3)
    await manager.append_message(KEY, "assistant", "ok", token_count=3)

    result = await manager.compact_with_result(KEY, 100, config=config("api_rounds"))

    assert result.removed_count == 3
    assert await contents(manager) == ["the checker passed", "next", "ok"]
    assert result.summary_payload is not None
    assert {"id": "call_7"} in result.summary_payload["tool_results_to_remember"]
    assert "Pending tool calls" not in result.summary
    (stored,) = await manager.get_summaries(KEY)
    assert stored.summary_payload is not None
    assert {"id": "call_7"} in stored.summary_payload["tool_results_to_remember"]


async def _lone_unanswered_call(manager: SessionManager) -> str:
    payload = "y" * 5000
    await manager.create(KEY)
    await manager.append_message(
        KEY,
        "assistant",
        "small visible answer",
        tool_calls=[
            {
                "type": "tool_use",
                "tool_use_id": "write-pending",
                "name": "write_file",
                "input": {"path": "index.html", "content": payload},
            }
        ],
        token_count=1,
    )
    return payload


@pytest.mark.parametrize(
    "settings",
    [
        CompactionConfig(safety_margin=1.0),  # the contract (test 5)
        config("api_rounds", protect_semantic_tail=False),
    ],
    ids=["entries", "api_rounds-without-semantic-tail"],
)
async def test_an_underreported_lone_call_is_compacted_without_the_semantic_tail(
    manager: SessionManager, settings: CompactionConfig
) -> None:
    payload = await _lone_unanswered_call(manager)

    result = await manager.compact_with_result(KEY, 50, config=settings)

    assert result.removed_count == 1
    assert result.summary and payload not in result.summary
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    assert await manager.get_transcript(KEY) == []


async def test_the_semantic_tail_keeps_a_lone_unanswered_call_raw(
    manager: SessionManager,
) -> None:
    """HEAD's outcome for the contract's test 5: the call is still waiting for its result,
    so nothing can be removed and nothing is written."""
    await _lone_unanswered_call(manager)

    result = await manager.compact_with_result(KEY, 50, config=config("api_rounds"))

    assert result.removed_count == 0
    assert result.skip_reason == "no_safe_turn_boundary"
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 0
    assert await manager.get_summaries(KEY) == []
    assert await contents(manager) == ["small visible answer"]
