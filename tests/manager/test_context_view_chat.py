"""``ContextView.as_chat_messages()``: the prompt's view as OpenAI chat-completions messages
(issue 28, item 9; docs/reading.md#chat-messages). The conversion is pure: views built by
hand, and views read from both backends (with a summary, tool rounds, provider states)."""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session import SessionManager
from opensquilla.session.compaction import CompactionConfig, format_compaction_summary_context
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import (
    ContextView,
    SessionContextState,
    SessionSummary,
    TranscriptEntry,
)

KEY = "agent:main:chat"
CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
    {"id": "call_b", "type": "function", "function": {"name": "cat", "arguments": '{"p":1}'}},
]


def entry(role: str, content: str | None, **fields: Any) -> TranscriptEntry:
    return TranscriptEntry(session_id="s", session_key=KEY, role=role, content=content, **fields)


def view(messages: list[TranscriptEntry], summary: str | None = None) -> ContextView:
    stored = None
    if summary is not None:
        stored = SessionSummary(session_id="s", session_key=KEY, summary_text=summary)
    return ContextView(
        session_key=KEY,
        session_id="s",
        epoch=0,
        summary=stored,
        messages=messages,
        max_tokens=1000,
        summary_tokens=0,
        budget_tokens=1000,
        message_tokens=0,
        truncated=False,
    )


ROUND = [
    entry("user", "list and read", metadata={"z": 1, "a": 2}, turn_context={"turn_id": "t"}),
    entry(
        "assistant",
        None,
        tool_calls=CALLS,
        reasoning_content="I should look first",
        turn_usage={"input_tokens": 5},
    ),
    entry("tool", "a.txt", tool_call_id="call_a"),
    entry("tool", "hello", tool_call_id="call_b"),
    entry("assistant", "a.txt says hello", reasoning_content="done"),
]


def test_a_tool_round_becomes_chat_messages() -> None:
    assert view(ROUND).as_chat_messages() == [
        {"role": "user", "content": "list and read"},
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        {"role": "tool", "content": "a.txt", "tool_call_id": "call_a"},
        {"role": "tool", "content": "hello", "tool_call_id": "call_b"},
        {"role": "assistant", "content": "a.txt says hello"},
    ]


def test_reasoning_only_when_asked() -> None:
    messages = view(ROUND).as_chat_messages(include_reasoning=True)
    assert messages[1]["reasoning_content"] == "I should look first"
    assert messages[4]["reasoning_content"] == "done"
    assert "reasoning_content" not in messages[0]


def test_nothing_but_the_chat_fields_goes_to_a_model() -> None:
    """Metadata, turn usage and context, provenance and ids stay in the store."""
    for message in view(ROUND).as_chat_messages(include_reasoning=True):
        assert set(message) <= {
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "reasoning_content",
        }


def test_content_none_is_empty_except_beside_tool_calls() -> None:
    messages = view([entry("user", None), entry("assistant", None)]).as_chat_messages()
    assert [m["content"] for m in messages] == ["", ""]


def test_the_summary_leads_as_a_system_message_or_a_user_one() -> None:
    text = "The user wants the files listed."
    replay = format_compaction_summary_context([text])
    assert replay is not None and replay.startswith("[Compacted Session Summaries]\n[Summary 1]\n")
    chat = view(ROUND[:1], summary=text)
    assert chat.as_chat_messages()[0] == {"role": "system", "content": replay}
    assert chat.as_chat_messages(summary_role="user")[0] == {"role": "user", "content": replay}
    assert chat.as_chat_messages()[1:] == view(ROUND[:1]).as_chat_messages()
    assert view(ROUND[:1], summary="  ").as_chat_messages() == [
        {"role": "user", "content": "list and read"}
    ]


def test_messages_are_new_objects_each_call() -> None:
    chat = view(ROUND)
    first = chat.as_chat_messages()
    first[1]["tool_calls"][0]["function"]["name"] = "rm"
    assert chat.messages[1].tool_calls == CALLS
    assert chat.as_chat_messages()[1]["tool_calls"] == CALLS


@pytest.mark.parametrize(
    "arguments",
    [
        {"include_reasoning": 1},
        {"include_reasoning": None},
        {"summary_role": "assistant"},
        {"summary_role": None},
    ],
)
def test_bad_options_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match=next(iter(arguments))):
        view(ROUND, summary="s").as_chat_messages(**arguments)


# -- read from the store ---------------------------------------------------------------------


async def _tool_rounds(manager: SessionManager, rounds: int) -> None:
    for n in range(rounds):
        await manager.append_message(KEY, "user", f"question {n} " + "w" * 200, token_count=60)
        calls = [{"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
        await manager.append_message(
            KEY, "assistant", None, tool_calls=calls, reasoning_content="think", token_count=20
        )
        await manager.append_message(KEY, "tool", f"result {n}", tool_call_id=f"c{n}")
        await manager.append_message(KEY, "assistant", f"answer {n}", token_count=20)


def _calls_precede_results(messages: list[dict[str, Any]]) -> None:
    called: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            called.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in called, messages


async def test_a_view_of_the_store_with_a_summary_tool_rounds_and_provider_states(
    manager: SessionManager,
) -> None:
    node = await manager.create(KEY)
    await _tool_rounds(manager, 6)
    result = await manager.compact_with_result(KEY, 600, CompactionConfig())
    assert result.removed_count > 0, result.skip_reason
    await _tool_rounds(manager, 1)
    await manager.save_context_state(
        SessionContextState(
            session_id=node.session_id,
            session_key=KEY,
            provider="openai",
            state_kind="response_id",
            payload={"previous_response_id": "resp_1"},
        )
    )
    summary = await manager.get_latest_summary(KEY)
    assert summary is not None
    for budget in range(0, 400, 7):
        current = await manager.get_context_view(KEY, max_tokens=budget)
        messages = current.as_chat_messages()
        assert messages[0] == {
            "role": "system",
            "content": format_compaction_summary_context([summary.summary_text]),
        }
        assert len(messages) == len(current.messages) + 1
        assert [m["role"] for m in messages[1:]] == [e.role for e in current.messages]
        _calls_precede_results(messages)
        # Provider states are not messages; reasoning only when asked.
        assert not any("resp_1" in str(m) for m in messages)
        assert not any("reasoning_content" in m for m in messages)
    whole = await manager.get_context_view(KEY, max_tokens=100_000)
    assert not whole.truncated
    live = await manager.get_transcript(KEY)
    with_reasoning = whole.as_chat_messages(include_reasoning=True)[1:]
    assert [m.get("reasoning_content") for m in with_reasoning] == [
        e.reasoning_content for e in live
    ]
    assert [m.get("tool_call_id") for m in with_reasoning] == [e.tool_call_id for e in live]


async def test_a_view_without_a_summary_has_no_summary_message(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "hi")
    current = await manager.get_context_view(KEY, max_tokens=100)
    assert current.as_chat_messages() == [{"role": "user", "content": "hi"}]
