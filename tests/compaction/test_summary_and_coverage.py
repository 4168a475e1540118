"""What a compaction writes down (SEMANTICS §8.4-8.7): the fallback text, merged parts,
the obligations a summary owes, its coverage, the structured v1 payload and the quality
report. Pure: no database.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    compact_entries,
    entry_tokens,
    estimate_tokens,
    finish_compaction,
    plan_compaction,
)
from opensquilla.session.compaction import obligations as ob
from opensquilla.session.compaction.fallback import (
    IDENTIFIER_INSTRUCTION,
    budget_tokens_for,
    fallback_chunk_summary,
    fallback_summary,
    merge_chunk_summaries,
)
from opensquilla.session.compaction.obligations import (
    Obligation,
    check_coverage,
    extract_obligations,
)
from opensquilla.session.compaction.payload import build_payload


def msg(role: str, content: str | None, tokens: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "token_count": tokens, **extra}


def kinds(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o.kind, o.value) for o in extract_obligations(entries)]


# -- fallback text ---------------------------------------------------------------------


def test_strict_fallback_starts_with_the_identifier_line() -> None:
    text = fallback_chunk_summary([msg("user", "hello"), msg("assistant", "hi")])

    assert text.splitlines() == [
        IDENTIFIER_INSTRUCTION,
        "[Summary of 2 messages]",
        "  [user]: hello",
        "  [assistant]: hi",
    ]
    assert "identifiers" in IDENTIFIER_INSTRUCTION.lower()


@pytest.mark.parametrize("policy", ["custom", "off"])
def test_other_policies_omit_the_identifier_line(policy: str) -> None:
    text = fallback_chunk_summary([msg("user", "hello")], identifier_policy=policy)

    assert text == "[Summary of 1 message]\n  [user]: hello"  # singular


def test_preview_is_cut_at_200_characters() -> None:
    long_text = "a" * 199 + "b" + "TAIL-NOT-SHOWN"
    exact = "c" * 200

    lines = fallback_summary(
        [msg("user", long_text), msg("user", exact)], budget_tokens=1000
    ).splitlines()

    assert lines[-2] == "  [user]: " + "a" * 199 + "b..."
    assert lines[-1] == "  [user]: " + exact  # exactly 200: no ellipsis


def test_previews_shorten_to_fit_the_budget() -> None:
    entries = [msg("user", f"{i} " + "w" * 300) for i in range(4)]

    wide = fallback_summary(entries, identifier_policy="off", budget_tokens=1000)
    narrow = fallback_summary(entries, identifier_policy="off", budget_tokens=100)

    assert max(len(line) for line in wide.splitlines()) == len("  [user]: ") + 203
    assert len(narrow) <= 100 * 4
    assert narrow.count("  [user]: ") == 4  # all four, each shorter
    assert max(len(line) for line in narrow.splitlines()) < 100


def test_no_empty_role_lines() -> None:
    """A message with nothing to show has no line; a bare tool call shows its tool's name."""
    entries = [
        msg("user", "book it"),
        msg("assistant", "", tool_calls=[{"id": "c1", "function": {"name": "book_table"}}]),
        msg("tool", '{"ok": true}', tool_call_id="c1"),
        msg("assistant", None),
        msg("assistant", "   "),
        msg("assistant", "done"),
    ]

    lines = fallback_summary(entries, identifier_policy="off").splitlines()

    assert lines == [
        "[Summary of 6 messages]",
        "  [user]: book it",
        "  [assistant]: (called book_table)",
        '  [tool]: {"ok": true}',
        "  [assistant]: done",
    ]
    assert not [line for line in lines if line.rstrip().endswith("]:")]


def test_missing_content_has_no_line() -> None:
    assert fallback_chunk_summary([msg("assistant", None)], identifier_policy="off") == (
        "[Summary of 1 message]"
    )


def test_attachment_envelope_is_reduced_to_text_and_names() -> None:
    envelope = json.dumps(
        {
            "text": "look at these",
            "attachments": [
                {"name": "plan.pdf", "type": "application/pdf", "data": "QUJD" * 100},
                {"name": "shot.png", "type": "image/png"},
            ],
        }
    )

    line = fallback_chunk_summary([msg("user", envelope)]).splitlines()[-1]

    assert line == (
        "  [user]: look at these [user attached: plan.pdf (application/pdf), shot.png (image/png)]"
    )


def test_plain_json_without_attachments_is_left_alone() -> None:
    content = '{"text": "just json"}'

    assert fallback_chunk_summary([msg("user", content)]).endswith(content)


def test_tool_payloads_and_reasoning_never_reach_the_fallback() -> None:
    secret_payload = "PAYLOAD-" + "p" * 300
    secret_thought = "THOUGHT-hidden-chain"
    entry = msg(
        "assistant",
        "visible words",
        tool_calls=[{"id": "call_q", "input": {"blob": secret_payload}}],
        reasoning_content=secret_thought,
    )

    text = fallback_chunk_summary([entry, msg("tool", "ok", tool_call_id="call_q")])

    assert "visible words" in text
    assert "PAYLOAD-" not in text
    assert secret_thought not in text
    assert "call_q" not in text  # a finished call's id is tool data


def test_pending_tool_calls_are_kept_with_their_names() -> None:
    entries = [
        msg("user", "write the page"),
        msg(
            "assistant",
            "",
            tool_calls=[
                {"type": "tool_use", "tool_use_id": "write-1", "name": "write_file", "input": {}},
                {"id": "call_done", "function": {"name": "read_file"}},
            ],
        ),
        msg("tool", "read ok", tool_call_id="call_done"),
    ]

    text = fallback_summary(entries)

    assert "Pending tool calls: write-1 (write_file)" in text
    assert "call_done" not in text


def _ordinary_chat(count: int) -> list[dict[str, Any]]:
    topics = ["the weather", "a recipe", "train times", "museums", "a budget", "packing"]
    entries = []
    for i in range(count):
        topic = topics[(i // 2) % len(topics)]
        if i % 2 == 0:
            text = f"Number {i}: what about {topic}? A few concrete, short suggestions please."
        else:
            text = (
                f"About {topic}: check the local listings in the morning, ask at the front "
                "desk, leave slack in the plan for rain, and book ahead on busy weekends."
            )
        entries.append(msg("user" if i % 2 == 0 else "assistant", text))
    return entries


def test_two_hundred_message_chat_compacts_to_a_quarter() -> None:
    """Ordinary chat (no tools, no identifiers): the fallback succeeds and its summary is at
    most 25% of the tokens it replaces; before, it came out larger than them."""
    entries = _ordinary_chat(200)

    result = compact_entries(CompactionRequest("s", entries, 2000))

    assert result.skip_reason is None
    assert result.removed_count > 150
    removed = sum(entry_tokens(e) for e in entries[: result.removed_count])
    summary_tokens = estimate_tokens(result.summary)
    assert summary_tokens <= removed * 0.25
    assert result.tokens_after < result.tokens_before
    lines = result.summary.splitlines()
    assert lines[1] == f"[Summary of {result.removed_count} messages]"
    assert "  [user]: Number 0: what about the weather?" in result.summary  # first request
    last = entries[result.removed_count - 1]["content"]
    assert last[:60] in result.summary  # the last exchange
    assert "messages not shown]" in result.summary


def test_obligations_and_identifiers_are_kept_verbatim_in_a_long_chat() -> None:
    """Goals, constraints, identifiers and decisions from early on survive the budget."""
    trace = "550e8400-e29b-41d4-a716-446655440000"
    commit = "9fceb02d0ae598e95dc970b74767f19372d61af8"
    entries = [
        msg(
            "user",
            "Goal: migrate the billing service.\nConstraint: no downtime during business hours.",
        ),
        msg("assistant", f"Decision: use blue-green deploys. Trace {trace}."),
        *_ordinary_chat(160),
        msg("user", f"The fix landed in {commit}, see the log."),
        *_ordinary_chat(40),
    ]

    result = compact_entries(CompactionRequest("s", entries, 2000))

    assert result.skip_reason is None and result.removed_count > 160
    summary = result.summary
    for kept in (
        "Goal: migrate the billing service.",
        "Constraint: no downtime during business hours.",
        "Decision: use blue-green deploys.",
        trace,
        commit,
    ):
        assert kept in summary
    removed = entries[: result.removed_count]
    found = extract_obligations(removed)
    wanted = [o for o in found if o.kind in (ob.USER_GOAL, ob.USER_CONSTRAINT, ob.IDENTIFIER)]
    assert wanted and check_coverage(summary, wanted, blocking=True).status == "pass"
    assert estimate_tokens(summary) <= sum(entry_tokens(e) for e in removed) * 0.25


def test_identifier_instruction_appears_once_across_parts() -> None:
    plan = _two_chunk_plan()

    all_fallback = finish_compaction(plan, [None] * 5, ["fallback"] * 5)
    mixed = finish_compaction(plan, ["model", None, "model", None, None], ["llm", "x"] * 2 + ["x"])

    assert all_fallback.summary.count(IDENTIFIER_INSTRUCTION) == 1
    assert mixed.summary.count(IDENTIFIER_INSTRUCTION) == 1
    assert mixed.summary.startswith(IDENTIFIER_INSTRUCTION + "\n[Merged context summary]")
    merged = merge_chunk_summaries(
        [fallback_chunk_summary([msg("user", f"t{i}")]) for i in range(3)]
    )
    assert merged.count(IDENTIFIER_INSTRUCTION) == 1
    assert merged.count("[Summary of 1 message]") == 3


def test_coverage_the_seed_preview_had_is_kept() -> None:
    """What a 200-character preview of each message covered, the budgeted summary covers
    too (files and commands early in a message, errors, plans); open questions as the
    budget allows, all of them with room to spare."""
    entries = [
        msg("user", "Keep src/opensquilla/session/models.py and run make check."),
        msg("assistant", "Next I will run uv run pytest tests/test_x.py."),
        msg("tool", "Error: missing summary_payload column", tool_call_id="call_1"),
        *_ordinary_chat(30),
    ]
    removed = entries[:20]
    seed_text = "\n".join(str(e["content"])[:200] for e in removed)
    found = extract_obligations(removed)
    seed_covered = [o for o in found if o.value.casefold() in seed_text.casefold()]

    text = fallback_summary(
        removed, budget_tokens=budget_tokens_for(sum(entry_tokens(e) for e in removed))
    )
    roomy = fallback_summary(removed, budget_tokens=2000)

    not_questions = [o for o in seed_covered if o.kind != ob.QUESTION]
    assert {o.kind for o in not_questions} >= {ob.FILE_PATH, ob.COMMAND, ob.FAILURE}
    assert check_coverage(text, not_questions, blocking=True).status == "pass"
    assert check_coverage(roomy, seed_covered, blocking=True).status == "pass"


def test_one_part_is_its_own_merge() -> None:
    assert merge_chunk_summaries(["only part"]) == "only part"


def test_several_parts_are_numbered() -> None:
    merged = merge_chunk_summaries(["alpha", "beta", "gamma"])

    assert merged == (
        "[Merged context summary]\n\n--- Part 1 ---\nalpha\n\n--- Part 2 ---\nbeta"
        "\n\n--- Part 3 ---\ngamma"
    )


# -- summary source through finish_compaction ------------------------------------------


def _two_chunk_plan() -> Any:
    entries = [msg("user", f"turn {i}", 100) for i in range(11)]
    plan = plan_compaction(CompactionRequest("s", entries, 200))
    assert len(plan.chunks) == 5
    return plan


def test_every_chunk_from_the_model_is_llm() -> None:
    result = finish_compaction(_two_chunk_plan(), ["p"] * 5, ["llm"] * 5)

    assert result.summary_source == "llm"
    assert result.summary.count("--- Part ") == 5


def test_some_chunks_from_the_model_is_mixed_and_gaps_use_the_fallback() -> None:
    plan = _two_chunk_plan()
    texts: list[str | None] = ["model text one", None, "   ", "model text four", None]

    result = finish_compaction(plan, texts, ["llm", "fallback", "llm", "llm", "fallback"])

    assert result.summary_source == "mixed"
    assert "model text one" in result.summary
    assert "[Summary of 2 messages]\n  [user]: turn 2\n  [user]: turn 3" in result.summary
    assert "  [user]: turn 4" in result.summary  # a blank model answer falls back too


def test_no_model_chunks_is_fallback_in_one_summary() -> None:
    result = compact_entries(
        CompactionRequest("s", [msg("user", f"turn {i}", 100) for i in range(11)], 200)
    )

    assert result.summary_source == "fallback"
    assert result.chunks_processed == 5
    assert result.summary.startswith(IDENTIFIER_INSTRUCTION + "\n[Summary of 10 messages]")
    assert "--- Part" not in result.summary


# -- obligations -----------------------------------------------------------------------


def test_user_goal_constraint_and_decision_take_the_text_after_the_colon() -> None:
    found = kinds(
        [
            msg(
                "user",
                "Goal: ship the parser\nConstraints: no new dependencies\n"
                "Rationale: regexes are enough",
            )
        ]
    )

    assert found == [
        (ob.USER_GOAL, "ship the parser"),
        (ob.USER_CONSTRAINT, "no new dependencies"),
        (ob.DECISION, "regexes are enough"),
    ]


def test_goal_and_constraint_only_count_from_the_user() -> None:
    found = kinds([msg("assistant", "Goal: not mine\nConstraint: nor this")])

    assert (ob.USER_GOAL, "not mine") not in found
    assert all(kind != ob.USER_CONSTRAINT for kind, _ in found)


def test_chinese_prefixes_are_recognised() -> None:
    found = kinds([msg("user", "目标: 完成解析器\n要求: 不加依赖\n决定: 用正则")])

    assert found == [
        (ob.USER_GOAL, "完成解析器"),
        (ob.USER_CONSTRAINT, "不加依赖"),
        (ob.DECISION, "用正则"),
    ]


def test_next_action_is_assistant_only_and_whole_line() -> None:
    found = kinds(
        [
            msg("assistant", "Next I will rebuild the index"),
            msg("user", "next step: you tell me"),
        ]
    )

    assert (ob.NEXT_ACTION, "Next I will rebuild the index") in found
    assert all(value != "next step: you tell me" for kind, value in found if kind == ob.NEXT_ACTION)


def test_do_not_repeat_question_and_failure_lines() -> None:
    found = kinds(
        [
            msg(
                "assistant",
                "Don't repeat the slow migration\nShould we retry later?\n"
                "Exit code 2 from the linter",
            )
        ]
    )

    assert (ob.DO_NOT_REPEAT, "Don't repeat the slow migration") in found
    assert (ob.QUESTION, "Should we retry later?") in found
    assert (ob.FAILURE, "Exit code 2 from the linter") in found


def test_artifact_names_need_a_marker_a_known_extension_and_no_slash() -> None:
    found = kinds(
        [
            msg("assistant", "Generated artifact report.pdf, chart.png and out/raw.csv"),
            msg("assistant", "unrelated notes.txt without the marker"),
        ]
    )

    artifacts = [value for kind, value in found if kind == ob.ARTIFACT]
    assert artifacts == ["report.pdf", "chart.png"]


def test_artifact_names_with_spaces_are_kept_whole() -> None:
    """A name after the colon, or quoted, keeps its spaces (it was cut to its last word)."""
    found = kinds(
        [
            msg("user", "Artifact: final continuity report.pdf."),
            msg("assistant", 'Generated artifact "Q3 plan v2.xlsx" and chart.png'),
            msg("assistant", "The artifact: see report.pdf and chart.png"),
        ]
    )

    artifacts = [value for kind, value in found if kind == ob.ARTIFACT]
    assert artifacts == [
        "final continuity report.pdf",
        "Q3 plan v2.xlsx",
        "chart.png",
        "report.pdf",
    ]


def test_capped_extraction_puts_goals_and_constraints_first() -> None:
    """Upstream's case: two slots, and the goal and constraint take them."""
    entries = [
        msg(
            "user",
            "Goal: preserve task continuity.\n"
            "Constraint: keep coverage blocking disabled by default.\n"
            "Touch docs/a.md docs/b.md docs/c.md docs/d.md docs/e.md docs/f.md.",
        )
    ]

    found = extract_obligations(entries, max_obligations=2)

    assert [(o.kind, o.value) for o in found] == [
        (ob.USER_GOAL, "preserve task continuity."),
        (ob.USER_CONSTRAINT, "keep coverage blocking disabled by default."),
    ]


def test_goals_and_constraints_past_the_cap_still_come_first() -> None:
    """Seventy tool results fill the 64 slots before the user states the goal: the goal and
    the constraint lead the capped list, the oldest other obligations make room."""
    entries = [
        *[msg("tool", "x", tool_call_id=f"call_{i}") for i in range(70)],
        msg("user", "Goal: ship the release.\nConstraint: no schema change."),
    ]

    found = extract_obligations(entries)

    assert len(found) == 64
    assert [(o.kind, o.value) for o in found[:2]] == [
        (ob.USER_GOAL, "ship the release."),
        (ob.USER_CONSTRAINT, "no schema change."),
    ]
    assert [o.value for o in found[2:]] == [f"call_{i}" for i in range(62)]


def test_under_the_cap_the_order_is_unchanged() -> None:
    entries = [
        msg("tool", "x", tool_call_id="call_1"),
        msg("user", "Goal: ship it.\nWhy not?"),
    ]

    found = kinds(entries)

    assert found == [
        (ob.TOOL_RESULT_ID, "call_1"),
        (ob.USER_GOAL, "ship it."),
        (ob.QUESTION, "Why not?"),
    ]


def test_tool_ids_and_facts_from_calls_and_results() -> None:
    entries = [
        msg(
            "assistant",
            "working",
            tool_calls=[
                {"id": "call_a", "type": "function"},
                {"tool_use_id": "tu_b", "type": "tool_result", "content": "42 rows matched"},
                {"id": "call_c", "result": "build green"},
            ],
        ),
        msg("tool", "raw output", tool_call_id="call_z"),
    ]

    found = kinds(entries)

    assert [v for k, v in found if k == ob.TOOL_RESULT_ID] == ["call_a", "tu_b", "call_c", "call_z"]
    assert [v for k, v in found if k == ob.TOOL_RESULT_FACT] == ["42 rows matched", "build green"]


def test_identifiers_uuids_and_long_hex_runs() -> None:
    found = kinds(
        [msg("user", "ids 123e4567-e89b-12d3-a456-426614174000, abcdef012345 but not cafe12")]
    )

    identifiers = [v for k, v in found if k == ob.IDENTIFIER]
    assert "123e4567-e89b-12d3-a456-426614174000" in identifiers
    assert "abcdef012345" in identifiers
    assert "cafe12" not in identifiers


def test_a_spaced_second_path_joins_the_first_as_one_value() -> None:
    """The permissive path pattern captures across spaces up to the last extension."""
    found = kinds([msg("user", "Keep src/x/models.py and docs/Long Task Report.md.")])

    assert [v for k, v in found if k == ob.FILE_PATH] == [
        "src/x/models.py and docs/Long Task Report.md"
    ]


@pytest.mark.parametrize(
    "path", ["/etc/app/config.toml", "./build/out.txt", "../shared/notes.md", "C:\\work\\a.py"]
)
def test_absolute_relative_and_drive_paths(path: str) -> None:
    found = kinds([msg("user", f"look in {path} please")])

    assert (ob.FILE_PATH, path) in found


def test_commands_with_and_without_uv_run() -> None:
    found = kinds([msg("tool", "ran uv run pytest tests/unit -q\nthen: cargo build --release")])

    commands = [v for k, v in found if k == ob.COMMAND]
    assert commands == ["uv run pytest tests/unit -q", "cargo build --release"]


def test_go_test_is_a_command() -> None:
    assert (ob.COMMAND, "go test ./...") in kinds([msg("tool", "go test ./...")])


def test_duplicates_are_dropped_case_insensitively() -> None:
    found = kinds(
        [
            msg("user", "Goal: Ship It"),
            msg("user", "goal: ship it"),
            msg("tool", "x", tool_call_id="call_1"),
            msg("tool", "y", tool_call_id="call_1"),
        ]
    )

    assert found == [(ob.USER_GOAL, "Ship It"), (ob.TOOL_RESULT_ID, "call_1")]


def test_values_are_collapsed_and_trimmed() -> None:
    found = kinds([msg("user", "Goal:   `tidy    the   build`;  ")])

    assert found == [(ob.USER_GOAL, "tidy the build")]


def test_long_values_are_cut_to_240_with_an_ellipsis() -> None:
    goal = "g" * 300

    (obligation,) = extract_obligations([msg("user", f"Goal: {goal}")])

    assert obligation.value == "g" * 237 + "..."
    assert len(obligation.value) == 240


def test_at_most_64_obligations() -> None:
    entries = [msg("tool", "x", tool_call_id=f"call_{i}") for i in range(100)]

    found = extract_obligations(entries)

    assert len(found) == 64
    assert found[-1].value == "call_63"


def test_obligations_record_role_and_source_id() -> None:
    found = extract_obligations([msg("tool", "x", tool_call_id="c", id=17)])
    with_ids = extract_obligations([msg("tool", "x", tool_call_id="c")], [42])

    assert (found[0].source_role, found[0].source_id, found[0].critical) == ("tool", 17, True)
    assert with_ids[0].source_id == 42


# -- coverage --------------------------------------------------------------------------


def _obligations(*values: str) -> list[Obligation]:
    return [Obligation(ob.TOOL_RESULT_ID, v) for v in values]


def test_no_obligations_is_unknown() -> None:
    coverage = check_coverage("anything", [], blocking=True)

    assert (coverage.status, coverage.checked, coverage.covered) == ("unknown", 0, 0)
    assert coverage.missing == [] and coverage.carry_forward == []


def test_everything_covered_passes_case_insensitively() -> None:
    coverage = check_coverage(
        "We saw CALL_A and call_b", _obligations("call_a", "Call_B"), blocking=True
    )

    assert coverage.status == "pass"
    assert (coverage.checked, coverage.covered) == (2, 2)
    assert coverage.missing == []


def test_misses_are_backfilled_by_default() -> None:
    coverage = check_coverage("call_a only", _obligations("call_a", "call_b"), blocking=False)

    assert coverage.status == "pass_with_backfill"
    assert coverage.missing == ["tool_result_id: call_b"]
    assert coverage.carry_forward == ["tool_result_id: call_b"]
    assert (coverage.checked, coverage.covered) == (2, 1)


def test_misses_block_under_coverage_blocking() -> None:
    coverage = check_coverage("call_a only", _obligations("call_a", "call_b"), blocking=True)

    assert coverage.status == "fail_blocked"
    assert coverage.carry_forward == ["tool_result_id: call_b"]


def test_misses_without_backfill_are_only_reported() -> None:
    coverage = check_coverage("", _obligations("call_a"), blocking=False, backfill=False)

    assert coverage.status == "fail_reported"
    assert coverage.carry_forward == []


def test_carry_forward_is_capped_at_32() -> None:
    coverage = check_coverage("", _obligations(*[f"id_{i}" for i in range(40)]), blocking=False)

    assert len(coverage.missing) == 40
    assert coverage.carry_forward == coverage.missing[:32]


def test_tool_call_ids_are_backfilled_in_a_real_compaction() -> None:
    """Fallback text never shows tool-call ids, so the id is carried forward, not lost."""
    entries = [
        msg("user", "Goal: fix the flaky test", 250),
        msg("assistant", "checking", 250, tool_calls=[{"id": "call_probe", "type": "function"}]),
        msg("tool", "all good", 250, tool_call_id="call_probe"),
        *[msg("assistant", f"tail {i}", 20) for i in range(8)],
    ]

    result = compact_entries(
        CompactionRequest("s", entries, 500, CompactionConfig(safety_margin=1.0))
    )

    assert result.removed_count == 3
    assert result.coverage_status == "pass_with_backfill"
    assert result.missing_obligations == ["tool_result_id: call_probe"]
    assert result.critical_carry_forward == ["tool_result_id: call_probe"]
    assert result.summary_payload is not None
    assert result.summary_payload["critical_carry_forward"] == ["tool_result_id: call_probe"]
    assert "call_probe" not in result.summary  # backfill does not rewrite the text


def test_plain_messages_leave_coverage_unknown() -> None:
    entries = [msg("user", f"note {i} " + "y" * 500, 200) for i in range(20)]

    result = compact_entries(CompactionRequest("s", entries, 1000))

    assert result.removed_count > 0
    assert result.coverage_status == "unknown"
    assert result.missing_obligations == [] and result.critical_carry_forward == []


# -- payload and quality report --------------------------------------------------------

PAYLOAD_KEYS = [
    "schema_version",
    "user_goal",
    "current_status",
    "next_action",
    "completed_steps",
    "open_steps",
    "files_and_artifacts",
    "tool_results_to_remember",
    "decisions_and_rationale",
    "known_failures",
    "important_identifiers",
    "constraints_and_preferences",
    "do_not_repeat",
    "unresolved_questions",
    "critical_carry_forward",
    "source_coverage",
]


def test_empty_payload_has_every_key_in_order() -> None:
    payload = build_payload("text", [], check_coverage("text", [], blocking=False))

    assert list(payload) == PAYLOAD_KEYS
    assert payload["schema_version"] == 1
    assert payload["user_goal"] == "" and payload["next_action"] is None
    assert payload["current_status"] == "text"
    assert payload["completed_steps"] == [] and payload["open_steps"] == []
    assert payload["source_coverage"] == {
        "status": "unknown",
        "checked_obligations": 0,
        "covered_obligations": 0,
    }


def test_payload_maps_each_kind_to_its_field() -> None:
    entries = [
        msg("user", "Goal: first goal\nGoal: second goal\nConstraint: stay offline"),
        msg(
            "assistant",
            "Next step: wire the cache\nI will then benchmark\nDecided: keep sqlite\n"
            "Do not repeat the reindex\nIs the cache warm?\nFailed to bind port\n"
            "Artifact bench.csv written to out/bench/result.json by make bench\n"
            "hash 0123456789abcdef",
            tool_calls=[{"id": "call_k", "result": "cache ok"}],
        ),
    ]
    obligations = extract_obligations(entries)
    payload = build_payload("S", obligations, check_coverage("S", obligations, blocking=False))

    assert list(payload) == PAYLOAD_KEYS
    assert payload["user_goal"] == "first goal"
    assert payload["next_action"] == "Next step: wire the cache"
    assert payload["files_and_artifacts"] == [
        {"path": "out/bench/result.json"},
        {"artifact": "bench.csv"},
    ]
    assert payload["tool_results_to_remember"] == [{"id": "call_k"}, {"fact": "cache ok"}]
    assert payload["decisions_and_rationale"] == [{"detail": "keep sqlite"}]
    assert payload["known_failures"] == [{"detail": "Failed to bind port"}]
    assert payload["important_identifiers"] == ["0123456789abcdef"]
    assert payload["constraints_and_preferences"] == ["stay offline"]
    assert payload["do_not_repeat"] == ["Do not repeat the reindex"]
    assert payload["unresolved_questions"] == ["Is the cache warm?"]
    assert payload["source_coverage"]["status"] == "pass_with_backfill"
    assert payload["source_coverage"]["checked_obligations"] == len(obligations)
    assert "command: make bench" in payload["critical_carry_forward"]  # checked, not mapped
    assert "make bench" not in json.dumps(
        {k: v for k, v in payload.items() if k != "critical_carry_forward"}
    )


def test_quality_report_keys_and_values() -> None:
    entries = [msg("user", f"m{i}", 100) for i in range(14)]

    result = compact_entries(
        CompactionRequest("s", entries, 500, CompactionConfig(compaction_profile="coding"))
    )

    report = result.quality_report
    assert set(report) == {
        "profile",
        "protected_recent_messages",
        "protected_tail_preserved",
        "compression_ratio",
        "fits_context_window",
        "passes_structural_gate",
    }
    assert report["profile"] == "coding"
    assert report["protected_recent_messages"] == 12
    assert report["protected_tail_preserved"] is True
    assert report["compression_ratio"] == pytest.approx(result.tokens_after / 1400)
    assert report["fits_context_window"] is (result.tokens_after * 1.2 <= 500)
    assert report["passes_structural_gate"] is True


def test_payload_current_status_is_the_full_summary() -> None:
    entries = [msg("user", f"m{i}", 100) for i in range(11)]

    result = compact_entries(CompactionRequest("s", entries, 200))

    assert result.summary_payload is not None
    assert result.summary_payload["current_status"] == result.summary
    assert result.summary_format == "structured_v1"
