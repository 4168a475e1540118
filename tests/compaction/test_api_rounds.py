"""The ``api_rounds`` cut policy and the semantic tail (HEAD-FEATURES §5.3), engine only.

Under ``cut_policy="api_rounds"`` a compaction cuts only between API rounds, and the latest
round stays raw while it is live. Each live case is also run with the tail switched off, so
every test shows that the tail (not the budget) is what kept the rows. The default policy,
the contract's per-entry cut, is pinned in test_tokens_and_planner.py and, through the
manager, in test_manager_rounds.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    CompactionResult,
    api_rounds,
    compact_entries,
)
from opensquilla.session.compaction.rounds import is_live_round
from opensquilla.session.errors import ConfigurationError
from opensquilla.session.usecases.compaction.flight import flight_key
from opensquilla.session.usecases.compaction.source import source_preimage

ROUNDS = CompactionConfig(safety_margin=1.0, cut_policy="api_rounds")
ROUNDS_NO_TAIL = CompactionConfig(
    safety_margin=1.0, cut_policy="api_rounds", protect_semantic_tail=False
)


def msg(role: str, content: str | None, tokens: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "token_count": tokens, **extra}


def chat(pairs: int, tokens: int) -> list[dict[str, Any]]:
    """``pairs`` finished question/answer rounds of ``tokens`` per row."""
    rows = []
    for index in range(pairs):
        rows.append(msg("user", f"question {index}", tokens))
        rows.append(msg("assistant", f"answer {index}", tokens))
    return rows


def run(entries: list[dict[str, Any]], window: int, config: CompactionConfig) -> CompactionResult:
    return compact_entries(CompactionRequest("sess-rounds", entries, window, config))


def call(call_id: str | None, tokens: int = 20, **item: Any) -> dict[str, Any]:
    """An assistant row holding one ``tool_use`` item (no id when ``call_id`` is None)."""
    use = {"type": "tool_use", "name": "exec", **item}
    if call_id is not None:
        use["tool_use_id"] = call_id
    return msg("assistant", "calling exec", tokens, tool_calls=[use])


def call_with_result(call_id: str, result: dict[str, Any], tokens: int) -> dict[str, Any]:
    """One assistant row holding a ``tool_use`` item and its ``tool_result`` item."""
    row = call(call_id, tokens)
    row["tool_calls"].append({"type": "tool_result", "tool_use_id": call_id, **result})
    return row


# -- grouping ------------------------------------------------------------------------------


def test_round_grouping_keeps_a_user_role_tool_result_with_its_call() -> None:
    entries = [
        msg("user", "read the file"),
        msg("assistant", "[Used tool: read_file]"),
        msg("user", "[Tool result (t1): file contents]"),
        msg("assistant", "here it is"),  # the round holds a result: a new round
        msg("user", "and the disk?"),
        msg("assistant", "checking", tool_calls=[{"id": "c1", "type": "function"}]),
        msg("tool", "82% used", tool_call_id="c1"),
        msg("assistant", "82%"),
    ]

    assert api_rounds(entries) == [range(0, 3), range(3, 4), range(4, 7), range(7, 8)]


def test_plain_assistant_closes_a_round_and_canonical_tool_rows_split_rounds() -> None:
    done = {"result": "ok"}
    entries = [
        msg("user", "go"),
        msg("assistant", "first"),
        msg("assistant", "second"),  # after a closed round: its own round
        msg("user", "run two commands"),
        call_with_result("a", done, 5),
        call_with_result("b", done, 5),  # the round already holds a result
        msg("system", "note"),  # other roles join the current round
    ]

    assert api_rounds(entries) == [range(0, 2), range(2, 3), range(3, 5), range(5, 7)]
    assert api_rounds([]) == []


def test_round_cut_never_keeps_a_call_without_the_request_that_opened_it() -> None:
    """The budget reaches into the tool round: entries keeps the call without its request,
    api_rounds drops the whole round."""
    entries = [
        msg("user", "old", 400),
        msg("assistant", "old answer", 400),
        msg("user", "read the file", 200),
        msg("assistant", "[Used tool: read_file]", 5),
        msg("user", "[Tool result (t1): contents]", 5),
        msg("user", "next", 5),
        msg("assistant", "done", 5),
    ]
    config = CompactionConfig(safety_margin=1.0)

    per_entry = run(entries, 60, config)
    by_round = run(entries, 60, ROUNDS)

    assert per_entry.kept_entries[0]["content"] == "[Used tool: read_file]"
    assert by_round.removed_count == 5
    assert [e["content"] for e in by_round.kept_entries] == ["next", "done"]


# -- the semantic tail -----------------------------------------------------------------------


def _assert_tail_stays_raw(tail: list[dict[str, Any]]) -> None:
    """``tail`` (a live latest round bigger than the keep budget) stays raw with the
    semantic tail on, and goes with everything else with it off."""
    history = chat(3, 300)
    entries = history + tail

    kept = run(entries, 1500, ROUNDS)
    without = run(entries, 1500, ROUNDS_NO_TAIL)

    assert kept.removed_count == len(history)
    assert kept.kept_entries == tail
    assert without.removed_count == len(entries) and without.kept_entries == []


LIVE_RESULTS = {
    "running": {"result": "still running", "execution_status": {"status": "running"}},
    "reason": {"result": "held", "execution_status": {"reason": "awaiting_approval"}},
    "ephemeral": {"result": "x", "execution_status": {"preservation_class": "ephemeral"}},
    "top-level": {"result": "queued", "status": "Queued"},
}


@pytest.mark.parametrize("result", LIVE_RESULTS.values(), ids=list(LIVE_RESULTS))
def test_current_live_tool_state_remains_raw(result: dict[str, Any]) -> None:
    _assert_tail_stays_raw(
        [msg("user", "run the current command", 20), call_with_result("live", result, 1000)]
    )


def test_live_status_on_a_tool_row_remains_raw() -> None:
    _assert_tail_stays_raw(
        [
            msg("user", "deploy", 20),
            msg("assistant", "deploying", 20, tool_calls=[{"id": "d1", "type": "function"}]),
            msg("tool", "waiting for approval", 1000, tool_call_id="d1", status="pending"),
        ]
    )


def test_latest_unmatched_tool_call_remains_raw() -> None:
    _assert_tail_stays_raw([msg("user", "run it", 20), call("open-call", 1000)])


def test_latest_legacy_untyped_tool_call_remains_raw() -> None:
    untyped = {"id": "legacy-open", "name": "exec_command", "arguments": {"command": "ls"}}
    _assert_tail_stays_raw(
        [msg("user", "run it", 20), msg("assistant", "starting", 1000, tool_calls=[untyped])]
    )


@pytest.mark.parametrize(
    "open_call",
    [
        msg("assistant", "[Used tool: grep]", 1000),
        msg("assistant", "x [tool_call: ls] y", 1000),
        call(None, 1000),
    ],
    ids=["used-tool-marker", "tool-call-marker", "item-without-id"],
)
def test_latest_unidentified_open_call_remains_raw(open_call: dict[str, Any]) -> None:
    _assert_tail_stays_raw([msg("user", "search", 20), open_call])


def test_latest_unanswered_user_row_remains_raw() -> None:
    _assert_tail_stays_raw([msg("user", "a long new question", 1000)])


def test_a_user_role_result_answers_an_unidentified_call() -> None:
    """A finished legacy exchange is not live: it can be compacted like any other round."""
    assert not is_live_round(
        [
            msg("user", "read"),
            msg("assistant", "[Used tool: read_file]"),
            msg("user", "[Tool result (t1): contents]"),
        ]
    )


def test_historical_unmatched_call_does_not_anchor_later_user_rounds() -> None:
    stale = call("stale-unmatched", 400)
    entries = [msg("user", "old request", 400), stale, *chat(4, 300)]

    result = run(entries, 1500, ROUNDS)

    assert result.removed_count == len(entries) - 2
    assert stale not in result.kept_entries


def test_old_completed_error_does_not_permanently_anchor_semantic_tail() -> None:
    error = {
        "result": "Error: old exact diagnostic",
        "is_error": True,
        "execution_status": {
            "status": "error",
            "reason": "nonzero_exit",
            "preservation_class": "diagnostic",
        },
    }
    old_round = call_with_result("old-error", error, 400)
    entries = [msg("user", "old request", 400), old_round, *chat(4, 300)]

    result = run(entries, 1500, ROUNDS)

    assert result.removed_count == len(entries) - 2
    assert old_round not in result.kept_entries
    starts = {group.start for group in api_rounds(entries)}
    assert result.removed_count in starts


def test_latest_completed_large_error_round_can_be_compacted() -> None:
    error = {"result": "Error: " + "diagnostic " * 200, "is_error": True}
    error["execution_status"] = {"status": "error", "reason": "nonzero_exit"}
    entries = [
        *chat(3, 100),
        msg("user", "run the latest command", 20),
        call_with_result("latest-error", error, 4000),
    ]

    result = run(entries, 1500, ROUNDS)

    assert result.removed_count == len(entries)
    assert result.kept_entries == []
    assert result.summary


def test_latest_completed_assistant_can_compact_when_it_exceeds_window() -> None:
    entries = [
        msg("user", "old question", 400),
        msg("assistant", "old answer", 400),
        msg("assistant", "LATEST_ASSISTANT_RAW", 2000),
    ]

    result = run(entries, 500, ROUNDS)

    assert result.removed_count == len(entries)
    assert result.kept_entries == []
    assert "LATEST_ASSISTANT_RAW" in result.summary


def test_semantic_tail_over_everything_has_no_safe_boundary() -> None:
    result = run([call("only-call", 2000)], 500, ROUNDS)

    assert result.removed_count == 0
    assert result.skip_reason == "no_safe_turn_boundary"


# -- the protected tail --------------------------------------------------------------------


def _tool_round_history(tool_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        msg("user", "ancient request", 1000),
        msg("assistant", "ancient answer", 1000),
        msg("user", "tool request", 400),
        *tool_rows,
        msg("user", "next question", 5),
        msg("assistant", "answer", 5),
    ]


def test_protected_tail_retreats_to_tool_boundary() -> None:
    """Three protected rows start at the user-role result; the cut moves back to the start
    of its round, the user request. Per entry, the request is summarised away."""
    entries = _tool_round_history(
        [
            msg("assistant", "[Used tool: read_file]", 5),
            msg("user", "[Tool result (toolu_1): file contents]", 5),
        ]
    )
    rounds = CompactionConfig(
        safety_margin=1.0, cut_policy="api_rounds", protected_recent_messages=3
    )

    result = run(entries, 600, rounds)
    per_entry = run(entries, 600, CompactionConfig(safety_margin=1.0, protected_recent_messages=3))

    assert result.removed_count == 2
    assert [e["content"] for e in result.kept_entries[:3]] == [
        "tool request",
        "[Used tool: read_file]",
        "[Tool result (toolu_1): file contents]",
    ]
    assert result.quality_report["protected_tail_preserved"] is True
    assert per_entry.kept_entries[0]["content"] == "[Used tool: read_file]"


def test_protected_tail_retreats_over_multi_result_tool_segment() -> None:
    entries = _tool_round_history(
        [
            msg("assistant", "calling tool", 5, tool_calls=[{"id": "call_1", "type": "function"}]),
            msg("tool", "first result", 5, tool_call_id="call_1"),
            msg("tool", "second result", 5, tool_call_id="call_1"),
        ]
    )
    config = CompactionConfig(
        safety_margin=1.0, cut_policy="api_rounds", protected_recent_messages=3
    )

    result = run(entries, 600, config)

    assert result.removed_count == 2
    assert [e["content"] for e in result.kept_entries[:4]] == [
        "tool request",
        "calling tool",
        "first result",
        "second result",
    ]
    assert result.quality_report["protected_tail_preserved"] is True


# -- the switch ------------------------------------------------------------------------------


def test_defaults_keep_the_contracts_per_entry_cut() -> None:
    config = CompactionConfig()

    assert config.cut_policy == "entries"
    assert config.protect_semantic_tail is True  # inert until cut_policy="api_rounds"


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"cut_policy": "rounds"}, "cut_policy"),
        ({"cut_policy": None}, "cut_policy"),
        ({"protect_semantic_tail": "yes"}, "protect_semantic_tail"),
        ({"protect_semantic_tail": 1}, "protect_semantic_tail"),
    ],
)
def test_a_bad_cut_setting_is_refused_by_name(options: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        CompactionConfig(**options)


def test_the_cut_settings_are_part_of_the_flight_key() -> None:
    """Calls that differ only in how they cut never share one run."""

    def key_for(config: CompactionConfig) -> str:
        return flight_key(
            session_key="agent:main:rounds",
            session_id="s-1",
            epoch=0,
            preimage=source_preimage([]),
            context_window_tokens=1000,
            config=config,
            custom_instructions=None,
            flush_receipt_status=None,
            compaction_id=None,
            against_source=True,
            protected_boundary_message_id=None,
            summarizer_identity="default",
        )

    keys = {
        key_for(CompactionConfig()),
        key_for(CompactionConfig(cut_policy="api_rounds")),
        key_for(CompactionConfig(cut_policy="api_rounds", protect_semantic_tail=False)),
    }

    assert len(keys) == 3
