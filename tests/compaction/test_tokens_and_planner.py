"""The pure compaction engine's sizing and planning (SEMANTICS §8.2-8.4, §8.7-8.8).

No database: token estimates, entry sizes, every skip reason the engine itself produces,
the cut point around tool exchanges and protected tails, chunking, and the custom
instruction rules. These decide what a compaction removes, so each is pinned exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    CompactionResult,
    compact_entries,
    entry_tokens,
    estimate_tokens,
    finish_compaction,
    is_assistant_tool_call,
    is_tool_result,
    normalize_instructions,
    plan_compaction,
)
from opensquilla.session.compaction.planner import chunk

WIDE = 100_000


def msg(role: str, content: str | None, tokens: int | None = None, **extra: Any) -> dict[str, Any]:
    """A transcript dict as the manager hands it to the engine."""
    return {"role": role, "content": content, "token_count": tokens, **extra}


def run(
    entries: list[dict[str, Any]],
    window: int,
    config: CompactionConfig | None = None,
    instructions: str | None = None,
) -> CompactionResult:
    return compact_entries(
        CompactionRequest("sess-1", entries, window, config or CompactionConfig(), instructions)
    )


def tool_exchange_transcript() -> list[dict[str, Any]]:
    """Big old user turn, then a call/result pair and a short question and answer."""
    return [
        msg("user", "ancient background", 300),
        msg("assistant", "looking it up", 4, tool_calls=[{"id": "call_9", "type": "function"}]),
        msg("tool", "lookup output", 4, tool_call_id="call_9"),
        msg("user", "and then?", 3),
        msg("assistant", "done", 3),
    ]


# -- token estimation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 1), (None, 1), ("abc", 1), ("abcd", 1), ("a" * 8, 2), ("a" * 401, 100)],
)
def test_estimate_is_a_quarter_of_the_length_and_at_least_one(
    text: str | None, expected: int
) -> None:
    """One deterministic estimator (len // 4, min 1) so cut points never depend on extras."""
    assert estimate_tokens(text) == expected


def test_estimate_of_a_huge_text_stays_linear() -> None:
    """Texts over 100 000 characters are still len // 4."""
    assert estimate_tokens("z" * 200_004) == 50_001


def test_entry_size_takes_a_reported_count_above_the_estimate() -> None:
    """A reported count larger than the content estimate is the content's size."""
    assert entry_tokens(msg("user", "x" * 40, 70)) == 70


def test_entry_size_never_trusts_an_underreported_count() -> None:
    """The content estimate is a floor: a count of 7 cannot make 4000 characters small."""
    assert entry_tokens(msg("user", "x" * 4000, 7)) == 1000


def test_entry_size_estimates_content_when_no_count_is_reported() -> None:
    assert entry_tokens(msg("user", "x" * 400)) == 100
    assert entry_tokens(msg("user", "x" * 400, 0)) == 100  # a reported 0 counts as missing


def test_entry_without_content_or_extras_is_free() -> None:
    assert entry_tokens(msg("assistant", None)) == 0
    assert entry_tokens(msg("assistant", "")) == 0


def test_tool_call_json_is_counted_on_top_of_an_underreported_count() -> None:
    """A count of 1 cannot hide a 5000-character tool payload."""
    calls = [
        {
            "type": "tool_use",
            "tool_use_id": "w-1",
            "name": "write_file",
            "input": {"path": "page.html", "content": "y" * 5000},
        }
    ]
    as_json = json.dumps(calls, sort_keys=True, ensure_ascii=False)

    size = entry_tokens(msg("assistant", "short", 1, tool_calls=calls))

    assert size == 1 + len(as_json) // 4
    assert size > 1250


def test_tool_call_id_and_reasoning_are_counted_newline_joined() -> None:
    calls = [{"id": "c1"}]
    entry = msg(
        "assistant", "hi", 10, tool_calls=calls, tool_call_id="c1", reasoning_content="r" * 80
    )
    joined = "\n".join([json.dumps(calls, sort_keys=True), "c1", "r" * 80])

    assert entry_tokens(entry) == 10 + len(joined) // 4


def test_tool_call_id_alone_adds_its_own_estimate() -> None:
    assert entry_tokens(msg("tool", "out", 4, tool_call_id="call_1")) == 5


def test_reasoning_alone_is_added() -> None:
    assert entry_tokens(msg("assistant", "hi", 10, reasoning_content="q" * 400)) == 110


def test_non_ascii_tool_arguments_are_measured_unescaped() -> None:
    """JSON keeps non-ASCII text: 400 'é' must not be measured as 400 '\\u00e9' escapes."""
    calls = [{"arg": "é" * 400}]

    assert entry_tokens(msg("assistant", None, None, tool_calls=calls)) < 110


# -- classification --------------------------------------------------------------------


def test_assistant_tool_call_by_calls_or_by_markers() -> None:
    assert is_assistant_tool_call(msg("assistant", None, tool_calls=[{"id": "a"}]))
    assert is_assistant_tool_call(msg("assistant", "x [tool_call: ls] y"))
    assert is_assistant_tool_call(msg("assistant", "[Used tool: grep]"))
    assert not is_assistant_tool_call(msg("assistant", "plain answer"))
    assert not is_assistant_tool_call(msg("user", "[tool_call: ls]", tool_calls=[{"id": "a"}]))


def test_tool_result_by_role_id_or_prefix() -> None:
    assert is_tool_result(msg("tool", "out"))
    assert is_tool_result(msg("user", "out", tool_call_id="c"))
    assert is_tool_result(msg("user", "   [Tool result for ls] a.txt"))
    assert not is_tool_result(msg("user", "see [Tool result later"))


# -- skip reasons ----------------------------------------------------------------------


def test_empty_transcript_is_skipped_as_no_entries() -> None:
    result = run([], 300)

    assert result.skip_reason == "no_entries"
    assert (result.summary, result.removed_count, result.chunks_processed) == ("", 0, 0)
    assert result.summary_source == "skipped"
    assert result.kept_entries == []
    assert (result.tokens_before, result.tokens_after) == (0, 0)
    assert result.remaining_budget_tokens == 300


def test_small_context_is_within_budget() -> None:
    """5 tokens in a 100 000 window: nothing to do, everything kept and accounted."""
    entries = [msg("user", "hi", 5)]

    result = run(entries, WIDE)

    assert result.skip_reason == "within_compaction_budget"
    assert result.summary == "" and result.removed_count == 0
    assert [e["content"] for e in result.kept_entries] == ["hi"]
    assert (result.tokens_before, result.tokens_after) == (5, 5)
    assert result.remaining_budget_tokens == WIDE - 5


def test_within_budget_uses_the_safety_margin() -> None:
    """100 tokens in a 110 window fit at margin 1.0 but not at the default 1.2."""
    entries = [msg("user", f"m{i}", 25) for i in range(4)]

    assert run(entries, 110, CompactionConfig(safety_margin=1.0)).skip_reason == (
        "within_compaction_budget"
    )
    assert run(entries, 110).skip_reason != "within_compaction_budget"


def test_lone_tool_exchange_has_no_safe_boundary() -> None:
    """A call and its result cannot be split, and there is nothing before them."""
    entries = [
        msg("assistant", "calling", 300, tool_calls=[{"id": "t1", "type": "function"}]),
        msg("tool", "result", 10, tool_call_id="t1"),
    ]

    result = run(entries, 100)

    assert result.skip_reason == "no_safe_turn_boundary"
    assert result.removed_count == 0 and result.summary == ""
    assert len(result.kept_entries) == 2


def test_protected_tail_can_exhaust_the_window() -> None:
    """Under a coding profile the last 12 are untouchable; 5 messages leave nothing to cut."""
    entries = [msg("user", f"m{i}", 100) for i in range(5)]

    result = run(entries, 100, CompactionConfig(compaction_profile="coding"))

    assert result.skip_reason == "protected_tail_exhausts_compaction_window"
    assert result.removed_count == 0


def test_explicit_protected_count_overrides_the_profile() -> None:
    entries = [msg("user", f"m{i}", 100) for i in range(6)]

    result = run(entries, 100, CompactionConfig(protected_recent_messages=4))

    assert result.removed_count == 2
    assert [e["content"] for e in result.kept_entries] == ["m2", "m3", "m4", "m5"]
    assert result.quality_report["protected_recent_messages"] == 4


@pytest.mark.parametrize("profile", ["coding", "research", "support"])
def test_profiles_with_a_protected_tail(profile: str) -> None:
    assert CompactionConfig(compaction_profile=profile).protected_tail == 12


def test_conversation_profile_protects_nothing() -> None:
    assert CompactionConfig().protected_tail == 0


def test_missing_obligations_block_under_coverage_blocking() -> None:
    """A path past the 200-character preview never reaches the fallback text: it is
    missing, so nothing is removed. (The goal, cut at 240 characters, is kept verbatim.)"""
    late_path = "lib/engine/critical_state_machine.py"
    entries = [
        msg("user", "Goal: keep every invariant. " + ("filler " * 40) + late_path, 650),
        *[msg("assistant", f"tail {i}", 20) for i in range(4)],
    ]

    result = run(entries, 300, CompactionConfig(safety_margin=1.0, coverage_blocking=True))

    assert result.skip_reason == "coverage_blocked"
    assert result.coverage_status == "fail_blocked"
    assert result.summary == "" and result.removed_count == 0
    assert len(result.kept_entries) == len(entries)
    assert result.tokens_after == result.tokens_before == 730
    assert result.remaining_budget_tokens == 0
    assert result.chunks_processed == 1
    assert result.summary_format == "structured_v1"
    assert result.summary_payload is not None
    missing = result.missing_obligations or []
    assert any(late_path in label for label in missing)
    assert not any(label.startswith("user_goal: ") for label in missing)


def test_same_transcript_without_blocking_compacts() -> None:
    """The blocking flag alone decides: the same misses are only carried forward."""
    entries = [
        msg("user", "Goal: keep every invariant. " + ("filler " * 40) + "lib/a/b.py", 650),
        *[msg("assistant", f"tail {i}", 20) for i in range(4)],
    ]

    result = run(entries, 300, CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 1
    assert result.coverage_status == "pass_with_backfill"
    assert result.skip_reason is None


def test_summary_bigger_than_what_it_replaces_fails_the_quality_gate() -> None:
    """Three 1-token messages in a 2-token window: the fallback text is larger."""
    entries = [msg("user", f"m{i}", 1) for i in range(3)]

    result = run(entries, 2)

    assert result.skip_reason == "quality_gate_failed"
    assert result.summary == "" and result.removed_count == 0
    assert len(result.kept_entries) == 3
    assert result.summary_payload is not None
    assert result.quality_report["passes_structural_gate"] is False
    assert result.tokens_after == result.tokens_before == 3


# -- cut point -------------------------------------------------------------------------


def test_boundary_cut_keeps_the_tool_call_with_its_result() -> None:
    """Window 100, margin 1.0: keep budget 50 fits the last four, so one entry goes."""
    result = run(tool_exchange_transcript(), 100, CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 1
    first, second = result.kept_entries[:2]
    assert first["role"] == "assistant"
    assert first["tool_calls"] == [{"id": "call_9", "type": "function"}]
    assert second["role"] == "tool" and second["tool_call_id"] == "call_9"
    assert result.summary_source == "fallback"


def test_budget_that_would_split_a_pair_moves_the_cut_before_the_call() -> None:
    """The budget alone would keep only the tool result; the call must come along."""
    entries = [
        msg("user", "start", 100),
        msg("assistant", "calling", 100, tool_calls=[{"id": "k", "type": "function"}]),
        msg("tool", "r", 30, tool_call_id="k"),
    ]

    result = run(entries, 80)

    assert result.removed_count == 1
    assert [e["role"] for e in result.kept_entries] == ["assistant", "tool"]


def test_run_of_several_results_stays_with_its_call() -> None:
    entries = [
        msg("user", "start", 200),
        msg("assistant", "two calls", 60, tool_calls=[{"id": "a"}, {"id": "b"}]),
        msg("tool", "ra", 10, tool_call_id="a"),
        msg("tool", "rb", 10, tool_call_id="b"),
        msg("assistant", "summary of both", 10),
    ]

    result = run(entries, 80)

    assert result.removed_count == 1
    assert [e["role"] for e in result.kept_entries] == ["assistant", "tool", "tool", "assistant"]


def test_budget_keeps_only_a_contiguous_newest_suffix() -> None:
    """The walk back stops at the first entry that does not fit, even if older ones would."""
    entries = [msg("user", "tiny old", 1), msg("user", "huge", 500), msg("user", "new", 10)]

    result = run(entries, 100)

    assert result.removed_count == 2
    assert [e["content"] for e in result.kept_entries] == ["new"]


def test_coding_profile_keeps_twelve_of_fourteen() -> None:
    entries = [msg("user", f"line {i}", 100) for i in range(14)]

    result = run(entries, 500, CompactionConfig(compaction_profile="coding"))

    assert result.removed_count == 2
    assert len(result.kept_entries) == 12
    assert result.kept_entries[0]["content"] == "line 2"
    assert result.quality_report["protected_tail_preserved"] is True


def test_kept_entries_are_the_callers_entries_with_all_their_keys() -> None:
    """Not re-projected onto ENTRY_KEYS: no ``None`` added, no key (``turn_context``) lost."""
    kept_entry = msg("user", "new", 5, provenance_kind="x", turn_context={"cwd": "/srv"})
    entries = [msg("user", "old", 300), kept_entry]

    result = run(entries, 100)

    assert result.kept_entries == [
        {
            "role": "user",
            "content": "new",
            "token_count": 5,
            "provenance_kind": "x",
            "turn_context": {"cwd": "/srv"},
        }
    ]
    assert list(result.kept_entries[0]) == list(kept_entry)  # same keys, same order


def test_skipped_compaction_returns_the_callers_entries() -> None:
    entries = [msg("user", "hi", 5, turn_context={"a": 1}), msg("assistant", "yo", 5, extra=2)]

    result = run(entries, 100_000)

    assert result.skip_reason == "within_compaction_budget"
    assert result.kept_entries == entries


def test_tokens_after_is_summary_plus_kept() -> None:
    entries = [msg("user", f"m{i}", 100) for i in range(6)]

    result = run(entries, 400)

    assert result.tokens_before == 600
    assert result.tokens_after == estimate_tokens(result.summary) + 100 * len(result.kept_entries)
    assert result.remaining_budget_tokens == max(400 - result.tokens_after, 0)


# -- chunking --------------------------------------------------------------------------


@pytest.mark.parametrize(("removed", "chunks"), [(3, 3), (18, 6), (20, 5), (1, 1)])
def test_chunk_count_with_default_ratio(removed: int, chunks: int) -> None:
    """Chunk size is max(1, int(n * 0.2)): the count the summary row records."""
    assert len(chunk([{}] * removed, CompactionConfig().chunk_ratio)) == chunks

    entries = [msg("user", f"m{i}", 100) for i in range(removed + 1)]
    result = run(entries, 200)  # keep budget 100: exactly the newest survives
    assert result.removed_count == removed
    assert result.chunks_processed == chunks


def test_chunks_are_consecutive_slices_in_order() -> None:
    parts = chunk([{"n": i} for i in range(7)], 0.3)

    assert [[e["n"] for e in p] for p in parts] == [[0, 1], [2, 3], [4, 5], [6]]


def test_chunk_ratio_has_a_floor() -> None:
    assert CompactionConfig().chunk_ratio == pytest.approx(0.2)
    assert CompactionConfig(default_parts=10).chunk_ratio == pytest.approx(0.15)
    assert CompactionConfig(default_parts=1).chunk_ratio == pytest.approx(0.4)


def test_plan_exposes_the_chunks_to_summarise() -> None:
    entries = [msg("user", f"m{i}", 100) for i in range(11)]

    plan = plan_compaction(CompactionRequest("s", entries, 200))

    assert plan.skipped is None
    assert plan.cut == 10
    assert [[e["content"] for e in part] for part in plan.chunks] == [
        ["m0", "m1"],
        ["m2", "m3"],
        ["m4", "m5"],
        ["m6", "m7"],
        ["m8", "m9"],
    ]


# -- custom instructions ---------------------------------------------------------------


def test_overlong_instructions_are_refused_before_anything_else() -> None:
    """Even an empty transcript (which would skip) raises first."""
    with pytest.raises(ValueError, match="custom compaction instructions are too long"):
        run([], 100, instructions="i" * 2001)


def test_instruction_length_is_measured_after_trimming() -> None:
    assert normalize_instructions("  " + "i" * 2000 + "\n\n") == ("i" * 2000, None)


def test_blank_instructions_are_none() -> None:
    assert normalize_instructions("   \n ") == (None, None)
    assert normalize_instructions(None) == (None, None)


def test_previous_summary_marker_is_split_off() -> None:
    assert normalize_instructions("__prev_summary__: we did A\nfocus on B") == (
        "focus on B",
        "we did A",
    )
    assert normalize_instructions("focus on B\n__prev_summary__: no") == (
        "focus on B\n__prev_summary__: no",
        None,
    )


def test_previous_summary_is_prepended_to_the_merged_text() -> None:
    entries = [msg("user", "old words", 300), msg("user", "new", 5)]

    plan = plan_compaction(
        CompactionRequest("s", entries, 100, custom_instructions="__prev_summary__: earlier bits")
    )
    result = finish_compaction(plan, ["fresh part"], ["llm"])

    assert result.summary == "[Previous context]\nearlier bits\n\n[New context]\nfresh part"
