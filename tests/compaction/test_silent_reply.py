"""Silent-reply sanitising of the compactor's input (HEAD-FEATURES §5.5,
docs/semantics.md#silent-replies): every rule, as tables, plus properties over generated
rows. Pure: no database (the storage side is test_silent_reply_storage.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opensquilla.session.compaction import (
    SILENT_REPLY_TOKENS,
    sanitize_silent_replies,
    sanitize_silent_reply,
)

GOAL = {"intent": "goal_continuation"}
SYSTEM_EVENT = {"input_mode": "system_event"}
HEARTBEAT = {"run_kind": "heartbeat"}
TOOL_USE = {"type": "tool_use", "tool_use_id": "call-1", "name": "read_status", "input": {}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "call-1", "result": "pending"}


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def assistant(content: Any, context: Any = None, tool_calls: Any = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": tool_calls,
        "turn_context": context,
    }


def cleaned_content(content: str, context: Any) -> Any:
    return sanitize_silent_reply(assistant(content, context))["content"]


# -- which run a row belongs to ----------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "mixed_is_cleaned"),
    [
        pytest.param(GOAL, True, id="goal continuation intent"),
        pytest.param(
            {"intent": "goal_continuation", "run_kind": "chat", "input_mode": "user"},
            True,
            id="the intent wins over run_kind and input_mode",
        ),
        pytest.param({"run_kind": "goal"}, True, id="run kind goal"),
        pytest.param(HEARTBEAT, True, id="run kind heartbeat"),
        pytest.param(SYSTEM_EVENT, True, id="input mode system_event, default run"),
        pytest.param({"run_kind": "chat", "input_mode": "system_event"}, True, id="any run"),
        pytest.param(None, False, id="no turn context: default run"),
        pytest.param({}, False, id="empty turn context"),
        pytest.param({"intent": "chat"}, False, id="another intent"),
        pytest.param({"run_kind": "chat", "input_mode": "user"}, False, id="ordinary turn"),
        pytest.param({"run_kind": 3, "input_mode": ["system_event"]}, False, id="not strings"),
    ],
)
def test_the_turn_context_decides_whether_mixed_text_is_cleaned(
    context: Any, mixed_is_cleaned: bool
) -> None:
    raw = "NO_REPLY\nStill checking."
    assert cleaned_content(raw, context) == ("Still checking." if mixed_is_cleaned else raw)


# -- content -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "content", "expected"),
    [
        # Exactly a token, once trimmed: suppressed whatever the run.
        pytest.param(None, "NO_REPLY", "", id="exact NO_REPLY, default run"),
        pytest.param({}, "  HEARTBEAT_OK \n", "", id="exact HEARTBEAT_OK, trimmed"),
        pytest.param({"run_kind": "chat"}, "NO_REPLY", "", id="exact, any run kind"),
        pytest.param(GOAL, "\nHEARTBEAT_OK\n", "", id="exact, goal"),
        pytest.param(None, "**NO_REPLY**", "**NO_REPLY**", id="emphasis is not exact"),
        pytest.param(None, "NO_REPLY.", "NO_REPLY.", id="punctuated is not exact"),
        pytest.param(None, "no_reply", "no_reply", id="case matters"),
        # Elsewhere a token is ordinary text.
        pytest.param(
            None,
            "NO_REPLY\nQuoted protocol example.",
            "NO_REPLY\nQuoted protocol example.",
            id="default run keeps an edge token",
        ),
        # Mixed text in a goal / heartbeat / system_event run: whole edge lines go.
        pytest.param(
            GOAL,
            "HEARTBEAT_OK\nWaiting for an external update.\nNO_REPLY",
            "Waiting for an external update.",
            id="leading and trailing token lines",
        ),
        pytest.param(
            GOAL,
            "NO_REPLY\nHEARTBEAT_OK\n\nHello\n\nNO_REPLY\n",
            "Hello",
            id="several edge lines and the blank lines next to them",
        ),
        pytest.param(GOAL, "NO_REPLY\n\n**HEARTBEAT_OK**", "", id="only token lines"),
        pytest.param(GOAL, "Hello\nthere\n", "Hello\nthere\n", id="no token: untouched"),
        pytest.param(GOAL, "Hello\n\nNO_REPLY", "Hello", id="trailing only"),
        pytest.param(GOAL, "NO_REPLY\n  Hello\n", "  Hello\n", id="body kept byte for byte"),
        pytest.param(GOAL, "Hello\r\nNO_REPLY\r\n", "Hello", id="CRLF lines"),
        pytest.param(SYSTEM_EVENT, "**NO_REPLY**\nHello", "Hello", id="bold"),
        pytest.param(SYSTEM_EVENT, "__NO_REPLY__\nHello", "Hello", id="underscore bold"),
        pytest.param(SYSTEM_EVENT, "*NO_REPLY*\nHello", "Hello", id="italic"),
        pytest.param(SYSTEM_EVENT, "_NO_REPLY_\nHello", "Hello", id="underscore italic"),
        pytest.param(SYSTEM_EVENT, "~~NO_REPLY~~\nHello", "Hello", id="strikethrough"),
        pytest.param(SYSTEM_EVENT, "`HEARTBEAT_OK`\nHello", "Hello", id="backticked"),
        pytest.param(SYSTEM_EVENT, "** `NO_REPLY` **\nHello", "Hello", id="nested wrappers"),
        pytest.param(SYSTEM_EVENT, "`HEARTBEAT_OK`", "", id="a lone wrapped token"),
        pytest.param(SYSTEM_EVENT, "**NO_REPLY*\nHello", "**NO_REPLY*\nHello", id="unbalanced"),
        pytest.param(
            SYSTEM_EVENT, "```NO_REPLY```\nHello", "```NO_REPLY```\nHello", id="triple backticks"
        ),
        pytest.param(GOAL, "   NO_REPLY\nHello", "Hello", id="three spaces of indent"),
        pytest.param(GOAL, "    NO_REPLY\nHello", "    NO_REPLY\nHello", id="four: code"),
        pytest.param(GOAL, "\tNO_REPLY\nHello", "\tNO_REPLY\nHello", id="a tab: code"),
        pytest.param(GOAL, "a\nNO_REPLY\nb", "a\nNO_REPLY\nb", id="a middle line stays"),
        pytest.param(GOAL, "Say NO_REPLY now", "Say NO_REPLY now", id="embedded in prose"),
        pytest.param(GOAL, "NO_REPLY Hello", "NO_REPLY Hello", id="not a whole line"),
        pytest.param(GOAL, "```\nNO_REPLY\n```", "```\nNO_REPLY\n```", id="inside fenced code"),
        pytest.param(
            GOAL, "Hello\n~~~~\nNO_REPLY\n~~~~\n", "Hello\n~~~~\nNO_REPLY\n~~~~\n", id="tildes"
        ),
        pytest.param(GOAL, "Hello\n```\nNO_REPLY", "Hello\n```\nNO_REPLY", id="unclosed fence"),
        pytest.param(
            GOAL,
            "```\ncode\n```\nNO_REPLY",
            "```\ncode\n```",
            id="after a closed fence a token line is one again",
        ),
        pytest.param(GOAL, "<think>x</think>Hi", "<think>x</think>Hi", id="think kept: not hb"),
        # Heartbeat: <think> blocks and a short acknowledgement too.
        pytest.param(HEARTBEAT, "<think>plan</think>HEARTBEAT_OK", "", id="think then token"),
        pytest.param(
            HEARTBEAT, "<think>plan</think>\nAlert: disk full", "Alert: disk full", id="think"
        ),
        pytest.param(HEARTBEAT, "Alert\n<think>cut off", "Alert", id="unclosed think"),
        pytest.param(HEARTBEAT, "HEARTBEAT_OK, nothing needs attention.", "", id="ack first"),
        pytest.param(HEARTBEAT, "All quiet. HEARTBEAT_OK", "", id="ack last"),
        pytest.param(HEARTBEAT, "HEARTBEAT_OK " + "x" * 300, "", id="ack of 300 characters"),
        pytest.param(
            HEARTBEAT,
            "HEARTBEAT_OK " + "x" * 301,
            "HEARTBEAT_OK " + "x" * 301,
            id="301 characters are a message",
        ),
        pytest.param(
            HEARTBEAT, "HEARTBEAT_OKAY, fine", "HEARTBEAT_OKAY, fine", id="ack is a whole word"
        ),
        pytest.param(
            HEARTBEAT, "NO_REPLY, nothing to do", "NO_REPLY, nothing to do", id="ack: HB only"
        ),
        pytest.param(
            HEARTBEAT,
            "Disk 91% full\n" + "y" * 300 + "\nHEARTBEAT_OK",
            "Disk 91% full\n" + "y" * 300,
            id="a long heartbeat loses its token line only",
        ),
    ],
)
def test_content_rules(context: Any, content: str, expected: str) -> None:
    assert cleaned_content(content, context) == expected


def test_a_deletion_that_exposes_a_heartbeat_ack_is_cleaned_in_the_same_call() -> None:
    raw = "NO_REPLY\nHEARTBEAT_OK done"
    once = cleaned_content(raw, HEARTBEAT)
    assert once == ""
    assert cleaned_content(once, HEARTBEAT) == once


@pytest.mark.parametrize(
    ("context", "envelope", "expected"),
    [
        pytest.param(
            GOAL,
            {"text": "NO_REPLY\nStill checking.", "display_text": "**NO_REPLY**\nStill checking."},
            {"text": "Still checking.", "display_text": "Still checking."},
            id="both text fields cleaned",
        ),
        pytest.param(
            None,
            {"text": "NO_REPLY", "attachments": [{"name": "a.png"}], "future": {"keep": 1}},
            {"text": "", "attachments": [{"name": "a.png"}], "future": {"keep": 1}},
            id="exact token: the text empties, every other key stays",
        ),
        pytest.param(
            HEARTBEAT,
            {"display_text": "<think>é</think>HEARTBEAT_OK", "artifacts": []},
            {"display_text": "", "artifacts": []},
            id="heartbeat in an envelope",
        ),
    ],
)
def test_a_json_envelope_has_its_text_fields_cleaned(
    context: Any, envelope: dict[str, Any], expected: dict[str, Any]
) -> None:
    out = cleaned_content(json.dumps(envelope), context)
    assert json.loads(out) == expected


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(json.dumps({"text": "NO_REPLY\nQuoted."}), id="default run: quoted"),
        pytest.param('{"text": "NO_REPLY"', id="not JSON: plain text, not exact"),
        pytest.param(json.dumps({"note": "NO_REPLY"}), id="no text field"),
        pytest.param(json.dumps(["NO_REPLY"]), id="not an object"),
    ],
)
def test_other_json_like_content_is_plain_text(content: str) -> None:
    assert cleaned_content(content, {"run_kind": "chat"}) == content


# -- segments (tool_calls) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "segments", "expected"),
    [
        pytest.param(None, None, None, id="absent tool_calls stays None"),
        pytest.param(GOAL, [], [], id="no segments"),
        pytest.param(None, [text("NO_REPLY"), TOOL_USE], [TOOL_USE], id="exact, default run"),
        pytest.param(
            GOAL,
            [text("NO_"), TOOL_USE, TOOL_RESULT, text("REPLY")],
            [TOOL_USE, TOOL_RESULT],
            id="token split around a tool pair",
        ),
        pytest.param(
            None,
            [text("NO_"), TOOL_USE, text("REPLY")],
            [TOOL_USE],
            id="split exact token, default run",
        ),
        pytest.param(
            GOAL,
            [text("NO_REPLY\nWaiting for an external update."), TOOL_USE, text("HEARTBEAT_OK")],
            [text("Waiting for an external update."), TOOL_USE],
            id="projected, outer token segment dropped",
        ),
        pytest.param(
            GOAL,
            [text("NO_RE"), text("PLY\nHello")],
            [text("Hello")],
            id="a deleted line spanning two segments",
        ),
        pytest.param(
            GOAL,
            [text("Before\n"), text("NO_REPLY\n"), text("After")],
            [text("Before\n"), text("NO_REPLY\n"), text("After")],
            id="a middle token segment stays",
        ),
        pytest.param(
            GOAL,
            [text("Hi"), TOOL_USE, text("NO_REPLY"), TOOL_RESULT, text("There")],
            [text("Hi"), TOOL_USE, text("NO_REPLY"), TOOL_RESULT, text("There")],
            id="a token between tools stays",
        ),
        pytest.param(
            GOAL,
            [text("a\nNO_REPLY"), TOOL_USE, text("NO_REPLY")],
            [text("a"), TOOL_USE],
            id="dropping an outer segment exposes an edge line",
        ),
        pytest.param(
            GOAL,
            [text("  "), TOOL_USE, text("**NO_REPLY**"), TOOL_RESULT, text("\n")],
            [TOOL_USE, TOOL_RESULT],
            id="nothing visible left: blank text segments go too",
        ),
        pytest.param(
            None,
            [text("HEARTBEAT_OK\nQuoted segment example.")],
            [text("HEARTBEAT_OK\nQuoted segment example.")],
            id="default run keeps an edge token",
        ),
        pytest.param(
            HEARTBEAT,
            [text("<think>checking"), TOOL_USE, text("</think>HEARTBEAT_OK all quiet")],
            [TOOL_USE],
            id="heartbeat: think across a tool, then an ack",
        ),
        pytest.param(
            None,
            [{"type": "text", "text": None}, "raw", {"id": "call_1"}, text("NO_REPLY")],
            [{"type": "text", "text": None}, "raw", {"id": "call_1"}],
            id="only dicts with type text and a string text are text segments",
        ),
    ],
)
def test_segment_rules(context: Any, segments: Any, expected: Any) -> None:
    before = copy.deepcopy(segments)
    out = sanitize_silent_reply(assistant("", context, segments))
    assert out["tool_calls"] == expected
    assert segments == before  # the caller's list and dicts are untouched


def test_content_and_segments_are_cleaned_separately() -> None:
    row = assistant("NO_REPLY", GOAL, [text("Working on it"), TOOL_USE])
    out = sanitize_silent_reply(row)
    assert (out["content"], out["tool_calls"]) == ("", [text("Working on it"), TOOL_USE])


# -- rows --------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["user", "tool", "system", None])
def test_only_assistant_rows_are_read(role: str | None) -> None:
    row = {"role": role, "content": "NO_REPLY", "tool_calls": [text("NO_REPLY")]}
    row["turn_context"] = GOAL
    assert sanitize_silent_reply(row) == row


def test_every_other_key_is_kept_and_none_content_stays_none() -> None:
    row = {
        "id": 7,
        "message_id": "m-7",
        "role": "assistant",
        "content": None,
        "token_count": 4,
        "tool_calls": None,
        "tool_call_id": None,
        "reasoning_content": "NO_REPLY",
        "turn_usage": {"output": 1},
        "turn_context": GOAL,
    }
    out = sanitize_silent_reply(row)
    assert out == row and out is not row


def test_sanitize_silent_replies_keeps_one_dict_per_row_in_order() -> None:
    rows = [assistant("NO_REPLY"), {"role": "user", "content": "hi"}, assistant("ok")]
    assert [r["content"] for r in sanitize_silent_replies(iter(rows))] == ["", "hi", "ok"]
    assert {"NO_REPLY", "HEARTBEAT_OK"} == SILENT_REPLY_TOKENS


# -- properties ----------------------------------------------------------------------------

LINES = st.sampled_from(
    [
        "NO_REPLY",
        "HEARTBEAT_OK",
        "**NO_REPLY**",
        "`HEARTBEAT_OK`",
        "   NO_REPLY",
        "    NO_REPLY",
        "```",
        "<think>",
        "</think>",
        "HEARTBEAT_OK fine",
        "Hello",
        "NO_",
        "REPLY",
        "",
        " ",
    ]
)
TEXTS = st.lists(LINES, max_size=6).flatmap(
    lambda lines: st.sampled_from(["\n", "\r\n", ""]).map(lambda sep: sep.join(lines))
)
SEGMENTS = st.lists(
    st.one_of(TEXTS.map(text), st.just(TOOL_USE), st.just(TOOL_RESULT), st.just("raw")),
    max_size=5,
)
CONTEXTS = st.sampled_from(
    [None, {}, GOAL, SYSTEM_EVENT, HEARTBEAT, {"run_kind": "goal"}, {"run_kind": "chat"}]
)
ROWS = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["assistant", "assistant", "user", "tool", "system"]),
        "content": st.one_of(st.none(), TEXTS, TEXTS.map(lambda t: json.dumps({"text": t}))),
        "tool_calls": st.one_of(st.none(), SEGMENTS),
        "turn_context": CONTEXTS,
        "token_count": st.one_of(st.none(), st.integers(0, 500)),
    }
)


def is_subsequence(short: str, long: str) -> bool:
    chars = iter(long)
    return all(char in chars for char in short)


@given(ROWS)
def test_property_non_assistant_rows_never_change(row: dict[str, Any]) -> None:
    if row["role"] != "assistant":
        assert sanitize_silent_reply(row) == row


@given(ROWS)
def test_property_sanitising_twice_is_sanitising_once(row: dict[str, Any]) -> None:
    once = sanitize_silent_reply(row)
    assert sanitize_silent_reply(once) == once


@given(ROWS)
def test_property_deletion_only_tools_kept_input_untouched(row: dict[str, Any]) -> None:
    before = copy.deepcopy(row)
    out = sanitize_silent_reply(row)
    assert row == before
    assert list(out) == list(row)
    if isinstance(row["content"], str):
        assert is_subsequence(out["content"], row["content"])
    else:
        assert out["content"] is None
    if row["tool_calls"] is None:
        assert out["tool_calls"] is None
    else:

        def tools(segments: list[Any]) -> list[Any]:
            return [s for s in segments if not (isinstance(s, dict) and s.get("type") == "text")]

        assert tools(out["tool_calls"]) == tools(row["tool_calls"])
        kept = "".join(s["text"] for s in out["tool_calls"] if s not in tools(out["tool_calls"]))
        joined = "".join(s["text"] for s in row["tool_calls"] if s not in tools(row["tool_calls"]))
        assert is_subsequence(kept, joined)


def reply_text(content: str) -> str:
    """The reply a content holds: an envelope's text, else the content itself."""
    if content.startswith("{"):
        return str(json.loads(content)["text"])
    return content


@given(ROWS)
def test_property_in_a_default_run_only_an_exact_token_changes(row: dict[str, Any]) -> None:
    row = {**row, "turn_context": {"run_kind": "chat"}}
    out = sanitize_silent_reply(row)
    content = row["content"]
    if not isinstance(content, str):
        assert out["content"] is None
    elif row["role"] == "assistant" and reply_text(content).strip() in SILENT_REPLY_TOKENS:
        assert reply_text(out["content"]) == ""
    else:
        assert out["content"] == content
