"""Verified backfill (``CompactionConfig.verified_backfill``, HEAD-FEATURES §5.9): the summary
becomes the structured payload rendered as sections, and under ``coverage_blocking`` only a
fact that rendering still lacks blocks. Off (the default), the contract's coverage holds:
the prose alone is checked, misses are carried forward or block.

The engine tests are pure; the manager tests run on both backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    CompactionResult,
    compact_entries,
    finish_compaction,
    plan_compaction,
)
from opensquilla.session.compaction import obligations as ob
from opensquilla.session.compaction.coverage import (
    cover_summary,
    pending_call_ids,
    removed_obligations,
    render_structured_summary,
    select_obligations,
)
from opensquilla.session.compaction.summary_replay import (
    MAX_REPLAY_CHARS,
    STRUCTURED_HEADER,
    format_compaction_summary_context,
    split_sections,
)
from opensquilla.session.errors import ConfigurationError
from opensquilla.session.usecases.compaction.flight import config_fingerprint
from tests.helpers import table_snapshot

KEY = "agent:main:strict"
LATE_PATH = "lib/ledger/late_critical_module.py"
VERIFIED = CompactionConfig(safety_margin=1.0, coverage_blocking=True, verified_backfill=True)


def msg(role: str, content: str, tokens: int, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "token_count": tokens, **extra}


def late_path_entries() -> list[dict[str, Any]]:
    """One long user turn whose file path lies past what the fallback shows, then a tail."""
    goal = "Goal: keep the ledger whole. " + ("filler " * 50) + LATE_PATH
    return [msg("user", goal, 650)] + [msg("assistant", f"tail {i}", 20) for i in range(4)]


def workset_entries() -> list[dict[str, Any]]:
    """A goal and constraint, a failed command with its call, and a call never answered."""
    return [
        msg(
            "user",
            "Goal: repair the nightly export.\nConstraint: never drop rows.\n"
            "Touch jobs/export/nightly.py.",
            250,
        ),
        msg(
            "assistant",
            "Next I will run uv run pytest tests/export -q.",
            250,
            tool_calls=[{"id": "call_run_1", "type": "function"}],
        ),
        msg(
            "tool",
            "Command failed: uv run pytest tests/export -q\nExit code 1",
            250,
            tool_call_id="call_run_1",
        ),
        msg(
            "assistant",
            "Next step: ask for approval to rerun.",
            250,
            tool_calls=[{"id": "call_wait_2", "type": "function", "name": "approval"}],
        ),
    ] + [msg("assistant", f"later {i}", 20) for i in range(8)]


def compact(entries: list[dict[str, Any]], window: int, **config: Any) -> CompactionResult:
    settings = CompactionConfig(safety_margin=1.0, **config)
    return compact_entries(CompactionRequest("s", entries, window, config=settings))


# -- the switch -------------------------------------------------------------------------


def test_verified_backfill_is_off_by_default_and_validated() -> None:
    assert CompactionConfig().verified_backfill is False
    assert CompactionConfig().coverage_blocking is False
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigurationError, match="verified_backfill"):
            CompactionConfig(verified_backfill=bad)  # type: ignore[arg-type]


def test_verified_backfill_is_part_of_the_flight_key() -> None:
    """Calls that differ only in this switch never share one run."""
    assert config_fingerprint(CompactionConfig()) != config_fingerprint(
        CompactionConfig(verified_backfill=True)
    )


# -- the contract's behaviour stays the default -------------------------------------------


def test_default_blocks_when_the_prose_misses_a_fact() -> None:
    result = compact(late_path_entries(), 300, coverage_blocking=True)

    assert result.skip_reason == "coverage_blocked"
    assert result.coverage_status == "fail_blocked"
    assert result.removed_count == 0
    assert f"file_path: {LATE_PATH}" in (result.missing_obligations or [])


def test_default_backfills_and_reports_without_blocking() -> None:
    result = compact(workset_entries(), 500)

    assert result.coverage_status == "pass_with_backfill"
    assert "tool_result_id: call_run_1" in (result.missing_obligations or [])
    assert result.critical_carry_forward == result.missing_obligations
    assert not result.summary.startswith(STRUCTURED_HEADER)  # the prose, not rewritten
    payload = result.summary_payload or {}
    assert payload["user_goal"] == "repair the nightly export."
    assert payload["open_steps"] == []
    assert "executed_commands_and_tests" not in payload
    assert "pending_tool_and_approval_ids" not in payload


# -- under the switch ----------------------------------------------------------------------


def test_strict_coverage_installs_the_verified_backfill() -> None:
    result = compact(late_path_entries(), 300, coverage_blocking=True, verified_backfill=True)

    assert result.skip_reason is None
    assert result.removed_count == 1
    assert result.coverage_status == "pass"
    assert result.missing_obligations == []
    assert result.critical_carry_forward == []
    payload = result.summary_payload or {}
    assert payload["critical_carry_forward"] == [f"file_path: {LATE_PATH}"]  # the initial list
    assert {"path": LATE_PATH} in payload["files_and_artifacts"]
    assert payload["source_coverage"]["status"] == "pass"
    assert result.summary == render_structured_summary(payload)
    assert LATE_PATH in result.summary


def test_structured_summary_backfills_missing_obligations_without_blocking() -> None:
    blocking = compact(workset_entries(), 500, coverage_blocking=True, verified_backfill=True)
    reporting = compact(workset_entries(), 500, verified_backfill=True)

    assert blocking.coverage_status == "pass"
    assert blocking.missing_obligations == [] and blocking.critical_carry_forward == []
    carried = (blocking.summary_payload or {})["critical_carry_forward"]
    assert "tool_result_id: call_run_1" in carried
    assert "Critical Carry Forward:\n- tool_result_id: call_run_1" in blocking.summary
    # Without blocking the prose check decides, as in the contract, and the labels stay.
    assert reporting.coverage_status == "pass_with_backfill"
    assert reporting.removed_count == blocking.removed_count > 0
    assert reporting.missing_obligations == carried
    assert reporting.critical_carry_forward == carried
    assert reporting.summary == blocking.summary


def _two_goals(prose: str) -> tuple[list[ob.Obligation], str]:
    older = ob.Obligation(ob.USER_GOAL, "tidy the old queue", "user", 1)
    newer = ob.Obligation(ob.USER_GOAL, "ship the new queue", "user", 2)
    return [older, newer], f"We will tidy the old queue. {prose}"


def test_structured_summary_coverage_checks_the_replayed_backfill() -> None:
    """The re-check reads the rendering as a request replays it: when the prose (the only
    place the older goal is) is too long to replay, that goal is missing and blocks."""
    short_goals, short_prose = _two_goals("Done.")
    long_goals, long_prose = _two_goals("x " * MAX_REPLAY_CHARS)

    short = cover_summary(short_prose, short_goals, blocking=True, verified=True)
    long = cover_summary(long_prose, long_goals, blocking=True, verified=True)

    assert short.coverage.status == "pass"
    assert long_prose.casefold().count("tidy the old queue") == 1  # the prose covers it...
    replay = format_compaction_summary_context([long.summary]) or ""
    assert "tidy the old queue" not in replay  # ...the replay does not
    assert long.coverage.status == "fail_blocked"
    assert long.coverage.missing == ["user_goal: tidy the old queue"]
    assert long.payload["source_coverage"]["status"] == "fail_blocked"
    # The rendering is one a request replays by sections.
    assert split_sections(long.summary) is not None


def test_structured_summary_blocks_when_bounded_replay_still_misses_critical_facts() -> None:
    goals = [msg("user", f"Goal: ship independent objective {i:02d}", 100) for i in range(40)]
    entries = goals + [msg("assistant", f"tail {i}", 10) for i in range(4)]
    plan = plan_compaction(CompactionRequest("s", entries, 1000, config=VERIFIED))
    removed_goals = [f"user_goal: ship independent objective {i:02d}" for i in range(plan.cut)]

    result = finish_compaction(plan, ["A short model summary."] * len(plan.chunks), ["llm"] * 6)

    assert plan.cut > ob.MAX_CARRY_FORWARD + 1
    assert result.skip_reason == "coverage_blocked"
    assert result.coverage_status == "fail_blocked"
    assert result.removed_count == 0
    assert result.kept_entries == entries
    # The Goal section holds the newest, the carry-forward the first 32: the rest block.
    assert result.missing_obligations == removed_goals[ob.MAX_CARRY_FORWARD : plan.cut - 1]


def test_structured_summary_exposes_command_and_pending_tool_workset() -> None:
    result = compact(workset_entries(), 500, coverage_blocking=True, verified_backfill=True)
    payload = result.summary_payload or {}

    assert result.removed_count == 4
    assert payload["executed_commands_and_tests"] == [
        "uv run pytest tests/export -q.",  # as the plan wrote it
        "uv run pytest tests/export -q",  # as the failure reported it
    ]
    assert payload["pending_tool_and_approval_ids"] == ["call_wait_2"]
    assert payload["open_steps"] == [
        "Next I will run uv run pytest tests/export -q.",
        "Next step: ask for approval to rerun.",
    ]
    assert "Pending Tool and Approval IDs:\n- call_wait_2" in result.summary
    assert "Executed Commands and Tests:\n- uv run pytest tests/export -q." in result.summary


def test_pending_ids_are_calls_no_entry_answers() -> None:
    call = [{"id": "call_late", "type": "function"}, {"id": "call_open", "type": "function"}]
    removed = [msg("assistant", "two calls", 10, tool_calls=call)]
    entries = [*removed, msg("tool", "done", 10, tool_call_id="call_late")]

    assert pending_call_ids(removed, removed) == ["call_late", "call_open"]
    assert pending_call_ids(removed, entries) == ["call_open"]


def test_obligation_extraction_prioritises_goals_when_bounded() -> None:
    entries = [msg("user", "Constraint: stay on one node.", 10)]
    entries += [msg("user", f"Goal: objective {i}", 10) for i in range(10)]
    entries += [
        msg("assistant", "calling", 10, tool_calls=[{"id": "call_open_9", "type": "function"}])
    ]
    entries += [msg("user", f"see pkg/part_{i:03d}.py", 10) for i in range(100)]

    chosen, pending = removed_obligations(entries, None, entries, verified=True)

    assert pending == ["call_open_9"]
    assert len(chosen) == ob.MAX_OBLIGATIONS
    kinds = [o.kind for o in chosen]
    assert kinds.count(ob.USER_GOAL) == 10 and kinds.count(ob.USER_CONSTRAINT) == 1
    assert ob.Obligation(ob.TOOL_RESULT_ID, "call_open_9", "assistant") in chosen
    paths = [o.value for o in chosen if o.kind == ob.FILE_PATH]
    assert paths == [f"pkg/part_{i:03d}.py" for i in range(48, 100)]  # the newest
    # The contract's extraction keeps the oldest paths instead.
    seed, no_pending = removed_obligations(entries, None, entries, verified=False)
    assert no_pending == []
    assert next(o.value for o in seed if o.kind == ob.FILE_PATH) == "pkg/part_000.py"


def test_selection_reserves_the_newest_goal_constraint_and_pending_ids() -> None:
    def many(kind: str, count: int) -> list[ob.Obligation]:
        return [ob.Obligation(kind, f"{kind} {i}") for i in range(count)]

    found = many(ob.USER_GOAL, 5) + many(ob.USER_CONSTRAINT, 5) + many(ob.TOOL_RESULT_ID, 5)

    chosen = select_obligations(found, ["tool_result_id 0", "tool_result_id 1"], limit=4)

    assert [o.value for o in chosen] == [
        "user_goal 4",
        "user_constraint_or_preference 4",
        "tool_result_id 0",
        "tool_result_id 1",
    ]
    payload = cover_summary("", chosen, blocking=False, verified=True).payload
    assert payload["user_goal"] == "user_goal 4"  # the newest (the contract: the first)


def test_rendering_leaves_out_empty_sections_in_payload_order() -> None:
    payload: Mapping[str, Sequence[Any] | str | None] = {
        "user_goal": "g",
        "current_status": "line one\nline two",
        "next_action": None,
        "files_and_artifacts": [{"path": "a/b.py"}, {"artifact": "r.pdf"}],
        "critical_carry_forward": ["command: make"],
        "open_steps": [],
    }

    assert render_structured_summary(payload) == (
        f"{STRUCTURED_HEADER}\n\nGoal:\ng\n\nCurrent Status:\nline one\nline two\n\n"
        "Files and Artifacts:\n- path: a/b.py\n- artifact: r.pdf\n\n"
        "Critical Carry Forward:\n- command: make"
    )


# -- through the manager, both backends ------------------------------------------------------


async def _append_late_path(manager: SessionManager) -> None:
    await manager.create(KEY)
    for entry in late_path_entries():
        await manager.append_message(
            KEY, entry["role"], entry["content"], token_count=entry["token_count"]
        )


async def test_manager_installs_the_verified_backfill(manager: SessionManager) -> None:
    await _append_late_path(manager)

    result = await manager.compact_with_result(KEY, 300, config=VERIFIED)

    assert result.removed_count == 1 and result.coverage_status == "pass"
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_text == result.summary
    assert row.summary_text.startswith(STRUCTURED_HEADER)
    assert row.coverage_status == "pass"
    assert row.missing_obligations == [] and row.critical_carry_forward == []
    assert row.summary_payload is not None
    assert row.summary_payload["critical_carry_forward"] == [f"file_path: {LATE_PATH}"]
    assert {"path": LATE_PATH} in row.summary_payload["files_and_artifacts"]
    (state,) = await manager.get_context_states(KEY)
    assert state.payload["critical_carry_forward"] == [f"file_path: {LATE_PATH}"]
    assert len(await manager.get_transcript(KEY)) == 4
    assert len(await manager.get_canonical_transcript(KEY)) == 5


async def test_manager_default_strict_coverage_still_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _append_late_path(manager)
    before = await table_snapshot(storage)

    result = await manager.compact_with_result(
        KEY, 300, config=CompactionConfig(safety_margin=1.0, coverage_blocking=True)
    )

    assert result.skip_reason == "coverage_blocked"
    assert result.coverage_status == "fail_blocked"
    assert any(LATE_PATH in label for label in result.missing_obligations or [])
    assert await table_snapshot(storage) == before
