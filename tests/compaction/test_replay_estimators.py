"""The replay estimators (HEAD-FEATURES §5.7, docs/semantics.md#compaction).

Two sizes of one entry: as a model request replays it (full tool-call JSON, raw
reasoning; every budget, cut and skip decision) and as the compaction input describes it
(tool payloads summarised; never a decision). The content part of both is the persisted
count or the content estimate, whichever is larger.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from opensquilla.session import SessionManager
from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    compact_entries,
    entry_dict,
    entry_tokens,
    estimate_entries_model_replay_chars,
    estimate_entry_model_replay_tokens,
    estimate_entry_replay_tokens,
    summarize_tool_calls,
)
from opensquilla.session.compaction.tool_payload import LONG_VALUE_CHARS

KEY = "agent:main:estimators"
ARGUMENT = "".join(chr(ord("a") + i % 26) for i in range(80_000))  # 80 000 characters


def write_call(style: str) -> dict[str, Any]:
    """One ``write_file`` call carrying ARGUMENT, in OpenAI's or Anthropic's shape."""
    arguments = {"path": "site/index.html", "content": ARGUMENT}
    if style == "openai":
        return {
            "id": "call_w1",
            "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps(arguments)},
        }
    return {"type": "tool_use", "tool_use_id": "call_w1", "name": "write_file", "input": arguments}


def assistant(content: str, tokens: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "token_count": tokens, **extra}


def test_tool_payload_summary_keeps_80k_argument_chars_under_500_tokens() -> None:
    for style in ("openai", "anthropic"):
        entry = assistant("writing the page", 4, tool_calls=[write_call(style)])

        described = estimate_entry_replay_tokens(entry)
        replayed = estimate_entry_model_replay_tokens(entry)

        assert described < 500, style
        assert replayed > 20_000, style  # the replay itself is the 80 000 characters
        (call,) = json.loads(summarize_tool_calls(entry["tool_calls"]))
        assert call["name"] == "write_file" and call["id"] == "call_w1"
        assert sorted(call["input"]) == ["content", "path"]
        assert call["input"]["path"] == "site/index.html"  # a short value stays as it is
        digest = hashlib.sha256(ARGUMENT.encode()).hexdigest()
        content = call["input"]["content"]
        assert content["chars"] == 80_000 and digest.startswith(content["sha256"])
        assert ARGUMENT.startswith(content["head"]) and ARGUMENT.endswith(content["tail"])


def test_a_value_just_over_the_limit_is_described_and_one_at_it_is_kept() -> None:
    at_limit = "v" * LONG_VALUE_CHARS
    over = "v" * (LONG_VALUE_CHARS + 1)
    calls = [{"id": "c1", "name": "t", "input": {"kept": at_limit, "described": over}}]

    (call,) = json.loads(summarize_tool_calls(calls))

    assert call["input"]["kept"] == at_limit
    assert call["input"]["described"]["chars"] == LONG_VALUE_CHARS + 1


def test_arguments_that_are_not_an_object_are_described_whole() -> None:
    calls = [
        {"id": "c1", "function": {"name": "shell", "arguments": "not json " * 100}},
        "a bare string call",
    ]

    first, second = json.loads(summarize_tool_calls(calls))

    assert first["name"] == "shell" and first["input"]["chars"] == 900
    assert second == {"id": None, "input": "a bare string call", "name": None}


def test_compaction_input_states_only_the_reasoning_length() -> None:
    reasoning = "private chain of thought " * 400  # 10 000 characters
    entry = assistant("answer", 2, reasoning_content=reasoning)

    assert estimate_entry_replay_tokens(entry) == 2 + len("[reasoning: 10000 characters]") // 4
    assert estimate_entry_model_replay_tokens(entry) == 2 + len(reasoning) // 4


def test_model_replay_estimate_does_not_trust_underreported_persisted_count() -> None:
    """A persisted count of 3 for 4000 characters is under-reported: both estimates take the
    content's own estimate instead; a count above the estimate is kept."""
    under = assistant("y" * 4000, 3)
    over = assistant("y" * 40, 300)

    assert estimate_entry_model_replay_tokens(under) == 1000
    assert estimate_entry_replay_tokens(under) == 1000
    assert estimate_entry_model_replay_tokens(over) == 300
    assert entry_tokens is estimate_entry_model_replay_tokens  # the engine's name for it


async def test_underreported_persisted_count_does_not_keep_a_long_message(
    manager: SessionManager,
) -> None:
    """Stored with token_count=3, 4000 characters still count as 1000 tokens: a 500-token
    window compacts them (trusting the count, 5 tokens would be within budget)."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "y" * 4000, token_count=3)
    await manager.append_message(KEY, "assistant", "ok", token_count=2)
    (persisted, _) = await manager.get_transcript(KEY)
    assert persisted.token_count == 3
    assert estimate_entry_model_replay_tokens(entry_dict(persisted)) == 1000

    result = await manager.compact_with_result(KEY, 500, CompactionConfig(safety_margin=1.0))

    assert result.tokens_before == 1002
    assert result.skip_reason is None and result.removed_count == 1
    assert [entry.content for entry in await manager.get_transcript(KEY)] == ["ok"]


def test_budget_check_counts_full_tool_call_replay_not_summarized_previews() -> None:
    """Described, the transcript would fit a 2000-token window; replayed, it is over 20 000
    tokens, so it is compacted and sized by its replay. (The newest answer fills most of the
    1000-token keep budget, so the cut falls after the tool result: the pair goes together.)"""
    entries = [
        {"role": "user", "content": "write the site", "token_count": 4},
        assistant("writing", 2, tool_calls=[write_call("openai")]),
        {"role": "tool", "content": "written", "token_count": 20, "tool_call_id": "call_w1"},
        {"role": "user", "content": "thanks", "token_count": 2},
        assistant("you are welcome", 990),
    ]
    described = sum(estimate_entry_replay_tokens(entry) for entry in entries)
    replayed = sum(estimate_entry_model_replay_tokens(entry) for entry in entries)
    window = 2000
    assert described * 1.2 <= window < replayed

    result = compact_entries(CompactionRequest("s-1", entries, window))

    assert result.skip_reason is None
    assert result.tokens_before == replayed
    assert result.removed_count == 3  # the call and its result go together
    assert [entry["content"] for entry in result.kept_entries] == ["thanks", "you are welcome"]


def test_model_replay_chars_are_the_json_of_the_replayed_messages() -> None:
    entries = [
        {"role": "user", "content": "héllo", "token_count": 9, "turn_usage": {"x": 1}},
        assistant("call", None, tool_calls=[{"id": "c1"}], reasoning_content="why"),
        {"role": "tool", "content": None, "tool_call_id": "c1", "tool_calls": []},
    ]
    expected = [
        {"role": "user", "content": "héllo"},
        {
            "role": "assistant",
            "content": "call",
            "tool_calls": [{"id": "c1"}],
            "reasoning_content": "why",
        },
        {"role": "tool", "content": None, "tool_call_id": "c1"},
    ]

    assert estimate_entries_model_replay_chars(entries) == len(
        json.dumps(expected, ensure_ascii=False)
    )
    assert estimate_entries_model_replay_chars([]) == 2
