"""Compaction through the manager, on both backends (SEMANTICS §8.1, §8.9-8.10, §10).

The summary is stored out of band, the removed rows move to the compacted archive (so the
canonical transcript stays whole), and every write of a compaction commits together or
not at all.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionIntent, SessionManager, SessionStorage
from opensquilla.session.cli.demo import DEMO_WINDOW_TOKENS
from opensquilla.session.compaction import (
    CompactionConfig,
    entry_dict,
    entry_tokens,
    estimate_tokens,
)
from opensquilla.session.compaction.fallback import IDENTIFIER_INSTRUCTION
from tests.cli.support import append_script
from tests.helpers import table_snapshot

KEY = "agent:main:work"
BIG = "x" * 500


async def fill(manager: SessionManager, count: int, label: str = "msg", key: str = KEY) -> None:
    """``count`` user messages of 200 reported tokens each: a 1000-token window compacts."""
    for index in range(count):
        await manager.append_message(key, "user", f"{label} {index} {BIG}", token_count=200)


async def contents(manager: SessionManager, key: str = KEY, canonical: bool = False) -> list[Any]:
    read = manager.get_canonical_transcript if canonical else manager.get_transcript
    return [entry.content for entry in await read(key)]


@contextlib.contextmanager
def failing_write(storage: SessionStorage, verb: str, table: str) -> Iterator[dict[str, bool]]:
    """Make the first ``verb`` statement on ``table`` raise, as a crash mid-commit would."""
    pattern = re.compile(rf'^\s*{verb}\s+(?:INTO\s+|FROM\s+)?"?{table}"?[\s(]', re.IGNORECASE)
    state = {"fired": False}

    def before(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if not state["fired"] and pattern.match(statement):
            state["fired"] = True
            raise RuntimeError("injected write failure")

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", before)
    try:
        yield state
    finally:
        event.remove(engine, "before_cursor_execute", before)


# -- the basic outcome -------------------------------------------------------------------


async def test_small_context_needs_no_compaction(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "hello", token_count=5)

    assert await manager.compact(KEY, context_window_tokens=100_000) == ""

    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 0
    assert await manager.get_summaries(KEY) == []
    assert await contents(manager) == ["hello"]


async def test_compaction_moves_the_oldest_rows_out_of_band(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, 20)
    original = await manager.get_transcript(KEY)

    summary = await manager.compact(KEY, context_window_tokens=1000)

    assert summary
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    summaries = await manager.get_summaries(KEY)
    assert [s.summary_text for s in summaries] == [summary]
    live = await manager.get_transcript(KEY)
    assert 0 < len(live) < len(original)
    assert all(entry.role != "system" for entry in live)
    assert [e.message_id for e in live] == [e.message_id for e in original[-len(live) :]]
    canonical = await manager.get_canonical_transcript(KEY)
    assert [(e.message_id, e.content) for e in canonical] == [
        (e.message_id, e.content) for e in original
    ]
    # Only the archived prefix is deleted: surviving rows keep their ids (stable cursors).
    assert [(e.id, e.created_at) for e in live] == [
        (e.id, e.created_at) for e in original[-len(live) :]
    ]
    assert summaries[0].compaction_id and summaries[0].compaction_id.startswith("cmp_")


async def test_summary_row_mirrors_the_result(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, 20)
    original = await manager.get_transcript(KEY)

    result = await manager.compact_with_result(
        KEY, 1000, trigger_reason="preflight_compaction", compaction_id="cmp_mirror"
    )

    assert result.summary_source == "fallback"
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_text == result.summary
    assert row.summary_format == "structured_v1"
    assert row.summary_source == result.summary_source
    assert row.summary_payload == result.summary_payload
    assert row.summary_payload is not None and row.summary_payload["schema_version"] == 1
    assert row.coverage_status == result.coverage_status
    assert row.missing_obligations == result.missing_obligations
    assert row.critical_carry_forward == result.critical_carry_forward
    assert (row.tokens_before, row.tokens_after) == (result.tokens_before, result.tokens_after)
    assert row.removed_count == result.removed_count == 18
    assert row.kept_count == len(result.kept_entries) == 2
    assert row.chunk_count == result.chunks_processed == 6
    assert row.compaction_id == "cmp_mirror"
    assert row.trigger_reason == "preflight_compaction"
    assert row.compaction_index == 0
    assert row.flush_receipt_status == "unknown"
    assert row.covered_through_id == original[17].id


async def test_refusals_write_nothing(manager: SessionManager, storage: SessionStorage) -> None:
    """A missing session is a KeyError; overlong instructions a ValueError, before any read."""
    await manager.create(KEY)
    await fill(manager, 20)
    before = await table_snapshot(storage)

    with pytest.raises(KeyError, match="Session not found"):
        await manager.compact("agent:main:nobody", 1000)
    with pytest.raises(ValueError, match="custom compaction instructions are too long"):
        await manager.compact(KEY, 1000, custom_instructions="z" * 2001)
    with pytest.raises(ValueError, match="too long"):
        await manager.compact("agent:main:nobody", 1000, custom_instructions="z" * 2001)

    assert await table_snapshot(storage) == before


# -- the preimage check ------------------------------------------------------------------


async def test_append_on_second_lock_entry_makes_the_compaction_stale(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The caller's lock is entered twice; a message that lands in between wins."""
    await manager.create(KEY)
    await fill(manager, 20)
    original = await contents(manager)
    entries = 0

    @contextlib.asynccontextmanager
    async def lock() -> AsyncIterator[None]:
        nonlocal entries
        entries += 1
        if entries == 2:
            await manager.append_message(KEY, "user", "arrived while summarising", token_count=3)
        yield

    result = await manager.compact_with_result(KEY, 1000, mutation_context=lock)

    assert entries == 2
    assert result.skip_reason == "stale_preimage"
    assert (result.summary, result.summary_source, result.removed_count) == ("", "skipped", 0)
    assert result.chunks_processed == 0
    assert result.tokens_after == result.tokens_before
    assert [e["content"] for e in result.kept_entries][-1] == "arrived while summarising"
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 0
    assert await manager.get_summaries(KEY) == []
    assert await manager.get_context_states(KEY) == []
    assert await contents(manager) == [*original, "arrived while summarising"]
    assert await storage.get_compacted_transcript_entries(node.session_id) == []


async def test_lock_entered_twice_around_a_successful_compaction(manager: SessionManager) -> None:
    entries = 0

    @contextlib.asynccontextmanager
    async def lock() -> AsyncIterator[None]:
        nonlocal entries
        entries += 1
        yield

    await manager.create(KEY)
    await fill(manager, 20)

    result = await manager.compact_with_result(KEY, 1000, mutation_context=lock)

    assert result.removed_count == 18
    assert entries == 2


# -- flush receipts and the repair queue -------------------------------------------------


FLUSH_CASES = [
    (None, "unknown", False),
    ("", "unknown", False),
    ("unsafe", "degraded_forensic", True),
    ("degraded_forensic", "degraded_forensic", True),
    ("failed_retryable", "failed_retryable", True),
    ("noop_no_memory", "noop_no_memory", False),
    ("archive_only", "archive_only", False),
    ("safe", "safe", False),
    ("not_required", "not_required", False),
]


async def test_flush_receipt_status_mapping_and_the_repair_queue(manager: SessionManager) -> None:
    """Only an unsafe flush is renamed; only degraded or retryable ones need repair."""
    expected_queue: list[int | None] = []
    for number, (given, stored, queued) in enumerate(FLUSH_CASES):
        key = f"agent:main:flush-{number}"
        await manager.create(key)
        await fill(manager, 5, label=f"flush {given}", key=key)
        original = await contents(manager, key, canonical=True)

        result = await manager.compact_with_result(key, 1000, flush_receipt_status=given)

        assert result.removed_count > 0
        (row,) = await manager.get_summaries(key)
        assert row.flush_receipt_status == stored, given
        assert await contents(manager, key, canonical=True) == original
        if queued:
            expected_queue.append(row.id)

    queue = await manager.list_degraded_compactions(agent_id="main")
    assert [s.id for s in queue] == expected_queue


# -- obligations -------------------------------------------------------------------------


async def test_missing_obligations_are_carried_forward(manager: SessionManager) -> None:
    """Fallback text never names tool-call ids: the id travels in the carry-forward list,
    and the paths of the removed messages land in the payload."""
    await manager.create(KEY)
    await manager.append_message(
        KEY,
        "user",
        "Goal: migrate the billing jobs.\nConstraint: keep the old cron running.\n"
        "Touch lib/billing/jobs.py and notes/Cut Over Plan.md.",
        token_count=250,
    )
    await manager.append_message(
        KEY,
        "assistant",
        "Next I will run make migrate-billing.",
        tool_calls=[{"id": "call_mig_7", "type": "function"}],
        token_count=250,
    )
    await manager.append_message(
        KEY,
        "tool",
        "Migration failed: make migrate-billing\nExit code 2",
        tool_call_id="call_mig_7",
        token_count=250,
    )
    for index in range(8):
        await manager.append_message(KEY, "assistant", f"later note {index}", token_count=20)

    result = await manager.compact_with_result(KEY, 500, config=CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 3
    (row,) = await manager.get_summaries(KEY)
    assert row.coverage_status == "pass_with_backfill"
    assert row.missing_obligations == ["tool_result_id: call_mig_7"]
    assert row.critical_carry_forward == ["tool_result_id: call_mig_7"]
    assert row.summary_payload is not None
    assert {"path": "lib/billing/jobs.py and notes/Cut Over Plan.md"} in row.summary_payload[
        "files_and_artifacts"
    ]
    assert {"id": "call_mig_7"} in row.summary_payload["tool_results_to_remember"]
    assert row.summary_payload["user_goal"] == "migrate the billing jobs."
    assert len(await manager.get_transcript(KEY)) == 8


async def test_coverage_blocking_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    path = "services/ledger/reconcile_core.py"
    await manager.create(KEY)
    await manager.append_message(
        KEY, "user", "Goal: never lose ledger rows. " + ("pad " * 60) + path, token_count=650
    )
    for index in range(4):
        await manager.append_message(KEY, "assistant", f"later note {index}", token_count=20)
    before = await table_snapshot(storage)

    result = await manager.compact_with_result(
        KEY, 300, config=CompactionConfig(safety_margin=1.0, coverage_blocking=True)
    )

    assert result.skip_reason == "coverage_blocked"
    assert result.coverage_status == "fail_blocked"
    assert result.removed_count == 0
    assert any(path in label for label in result.missing_obligations or [])
    assert await table_snapshot(storage) == before


# -- the portable context state ----------------------------------------------------------


async def test_portable_state_carries_the_payload(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(
        KEY, "user", "Goal: portable memory. See lib/state/portable.py.", token_count=250
    )
    notes = [
        await manager.append_message(KEY, "assistant", f"later note {index}", token_count=20)
        for index in range(8)
    ]

    result = await manager.compact_with_result(KEY, 300, config=CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 2  # keep budget 150 holds the newest seven notes
    (state,) = await manager.get_context_states(KEY)
    (row,) = await manager.get_summaries(KEY)
    assert (state.provider, state.model, state.state_kind) == (
        "portable",
        None,
        "structured_summary_v1",
    )
    payload = dict(state.payload)
    assert payload.pop("compaction_id") == row.compaction_id
    assert payload == result.summary_payload
    assert state.covered_through_id == row.covered_through_id == notes[0].id
    assert state.covered_through_id > 0
    assert (state.portable, state.cacheable, state.valid) == (True, True, True)
    assert state.session_id == row.session_id


async def test_older_states_stay_valid_after_another_compaction(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, 20, label="first")
    await manager.compact_with_result(KEY, 1000)
    await fill(manager, 20, label="second")

    await manager.compact_with_result(KEY, 1000)

    states = await manager.get_context_states(KEY)
    assert len(states) == 2
    assert all(state.valid for state in states)
    assert len({state.covered_through_id for state in states}) == 2


# -- tool pairs and hidden payloads ------------------------------------------------------


async def test_tool_pair_at_the_boundary_stays_live_together(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "long preamble", token_count=300)
    await manager.append_message(
        KEY,
        "assistant",
        "checking disk",
        tool_calls=[{"id": "call_df", "type": "function"}],
        token_count=4,
    )
    await manager.append_message(KEY, "tool", "82% used", tool_call_id="call_df", token_count=4)
    await manager.append_message(KEY, "user", "ok?", token_count=3)
    await manager.append_message(KEY, "assistant", "fine", token_count=3)

    result = await manager.compact_with_result(KEY, 100, config=CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 1
    call, output, *_ = await manager.get_transcript(KEY)
    assert call.role == "assistant"
    assert call.tool_calls == [{"id": "call_df", "type": "function"}]
    assert output.role == "tool" and output.tool_call_id == "call_df"
    assert await contents(manager, canonical=True) == [
        "long preamble",
        "checking disk",
        "82% used",
        "ok?",
        "fine",
    ]


async def test_underreported_count_does_not_hide_a_tool_payload(manager: SessionManager) -> None:
    payload = "q" * 5000
    await manager.create(KEY)
    await manager.append_message(
        KEY,
        "assistant",
        "wrote the page",
        tool_calls=[
            {
                "type": "tool_use",
                "tool_use_id": "write-1",
                "name": "write_file",
                "input": {"path": "site/index.html", "content": payload},
            }
        ],
        token_count=1,
    )

    result = await manager.compact_with_result(KEY, 50, config=CompactionConfig(safety_margin=1.0))

    assert result.removed_count == 1
    assert result.summary and payload not in result.summary
    assert "q" * 100 not in result.summary
    (row,) = await manager.get_summaries(KEY)
    assert "q" * 100 not in row.summary_text
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    assert await manager.get_transcript(KEY) == []
    (archived,) = await manager.get_canonical_transcript(KEY)
    assert archived.tool_calls is not None
    assert archived.tool_calls[0]["input"]["content"] == payload


# -- summarisers -------------------------------------------------------------------------


class FixedSummarizer:
    """A stand-in model: always answers with the same text."""

    source = "llm"

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.calls = 0

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        return self.text


class BrokenSummarizer(FixedSummarizer):
    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        raise ConnectionError("model unreachable")


async def test_given_summarizer_is_used_for_every_chunk(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, 20)
    model = FixedSummarizer("condensed by the model")

    result = await manager.compact_with_result(KEY, 1000, summarizer=model)

    assert model.calls == result.chunks_processed == 6
    assert result.summary_source == "llm"
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_source == "llm"
    assert row.summary_text.count("condensed by the model") == 6


async def test_failing_summarizer_falls_back_to_one_summary(manager: SessionManager) -> None:
    """Every chunk failed: one fallback summary of all 18 removed messages, not six."""
    await manager.create(KEY)
    await fill(manager, 20)
    broken = BrokenSummarizer(None)

    result = await manager.compact_with_result(KEY, 1000, summarizer=broken)

    assert broken.calls == result.chunks_processed == 6
    assert result.removed_count == 18
    assert result.summary_source == "fallback"
    assert "[Summary of 18 messages]" in result.summary
    assert "--- Part" not in result.summary
    assert result.summary.count(IDENTIFIER_INSTRUCTION) == 1


def _ratio(result: Any, removed: Sequence[Any]) -> float:
    removed_tokens = sum(entry_tokens(entry_dict(entry)) for entry in removed)
    return estimate_tokens(result.summary) / removed_tokens


async def test_ordinary_chat_compacts_without_a_model(manager: SessionManager) -> None:
    """The issue's case: 200 messages of ordinary chat (about 13,000 tokens), a 4,000-token
    window, no model. The fallback used to come out larger than what it replaced
    (quality_gate_failed); now the compaction commits and the summary is <= 25%."""
    await manager.create(KEY)
    for i in range(200):
        if i % 2 == 0:
            text = f"Question {i}: what should I see in Lisbon on day {i // 2}? Keep it short."
        else:
            text = (
                f"For day {i // 2}: walk through Alfama early, take tram 28 before the crowds, "
                "eat at a tasca near the river, and watch the sunset from a miradouro. "
                "Book museums ahead on weekends, and carry a light jacket for the evening wind."
            )
        await manager.append_message(KEY, "user" if i % 2 == 0 else "assistant", text)
    before = await manager.get_transcript(KEY)

    result = await manager.compact_with_result(KEY, 4000)

    assert result.skip_reason is None
    assert result.summary_source == "fallback"
    assert result.removed_count > 100
    assert _ratio(result, before[: result.removed_count]) <= 0.25
    assert "  [assistant]: \n" not in result.summary + "\n"
    (row,) = await manager.get_summaries(KEY)
    assert row.summary_text == result.summary
    assert len(await manager.get_transcript(KEY)) == 200 - result.removed_count


async def test_demo_conversation_compacts_without_a_model(manager: SessionManager) -> None:
    """The demo's tool-using conversation: one identifier instruction, no empty role lines,
    no "1 messages", and a summary <= 25% of what it replaced."""
    await manager.create(KEY)
    entries = await append_script(manager, KEY)

    result = await manager.compact_with_result(KEY, DEMO_WINDOW_TOKENS, CompactionConfig())

    assert result.skip_reason is None and result.removed_count > 0
    assert _ratio(result, entries[: result.removed_count]) <= 0.25
    assert result.summary.count(IDENTIFIER_INSTRUCTION) == 1
    assert "[assistant]: (called get_weather)" in result.summary
    assert not [line for line in result.summary.splitlines() if line.rstrip().endswith("]:")]
    assert "1 messages" not in result.summary
    assert "TBL-58213" in result.summary


# -- history: repeated compactions, branches and resets ----------------------------------


async def test_repeated_compactions_archive_with_increasing_index(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await fill(manager, 20, label="round one")
    await manager.compact_with_result(KEY, 1000, compaction_id="cmp_r1")
    await fill(manager, 20, label="round two")

    await manager.compact_with_result(KEY, 1000, compaction_id="cmp_r2")

    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 2
    summaries = await manager.get_summaries(KEY)
    assert [(s.compaction_id, s.compaction_index) for s in summaries] == [
        ("cmp_r1", 0),
        ("cmp_r2", 1),
    ]
    archived = await storage.get_compacted_transcript_entries(node.session_id)
    by_index: dict[Any, int] = {}
    for row in archived:
        by_index[(row.compaction_id, row.compaction_index)] = (
            by_index.get((row.compaction_id, row.compaction_index), 0) + 1
        )
    assert by_index == {("cmp_r1", 0): 18, ("cmp_r2", 1): 20}
    assert len(await manager.get_canonical_transcript(KEY)) == 40


async def test_full_branch_of_a_compacted_session(manager: SessionManager) -> None:
    """A full fork starts from the whole history: archive, live rows and summaries."""
    await manager.create(KEY)
    await fill(manager, 20)
    await manager.compact_with_result(KEY, 1000, compaction_id="cmp_before_fork")
    parent = await manager.get_canonical_transcript(KEY)

    await manager.branch(KEY, "agent:main:fork", fork_transcript=True)

    child = await manager.get_canonical_transcript("agent:main:fork")
    assert [(e.role, e.content, e.created_at) for e in child] == [
        (e.role, e.content, e.created_at) for e in parent
    ]
    assert len(await manager.get_transcript("agent:main:fork")) == 2
    child_summaries = await manager.get_summaries("agent:main:fork")
    assert [s.compaction_id for s in child_summaries] == ["cmp_before_fork"]


async def test_reset_archive_holds_the_canonical_transcript(
    manager: SessionManager, tmp_path: Path
) -> None:
    await manager.create(KEY)
    await fill(manager, 20)
    await manager.compact_with_result(KEY, 1000, compaction_id="cmp_before_reset")
    canonical = await contents(manager, canonical=True)
    old = await manager.get_session(KEY)

    renewed, rotated = await manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY)

    assert rotated and old is not None and renewed.session_id != old.session_id
    (archive_file,) = (tmp_path / "archives").glob("*.json")
    document = json.loads(archive_file.read_text(encoding="utf-8"))
    assert [e["content"] for e in document["transcript_entries"]] == canonical
    assert [s["compaction_id"] for s in document["summaries"]] == ["cmp_before_reset"]
    assert await manager.get_canonical_transcript(KEY) == []
    assert await manager.get_summaries(KEY) == []


# -- atomicity ---------------------------------------------------------------------------


COMPACTION_WRITES = [
    ("INSERT", "session_summaries"),
    ("INSERT", "compacted_transcript_entries"),
    ("DELETE", "transcript_entries"),
    ("INSERT", "session_context_states"),
    ("UPDATE", "sessions"),
]


async def test_failed_compaction_write_leaves_every_table_untouched(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Whichever statement of the commit fails, the error surfaces as raised and no table
    shows any trace of the attempt."""
    await manager.create(KEY)
    await fill(manager, 20)
    before = await table_snapshot(storage)

    for verb, table in COMPACTION_WRITES:
        with failing_write(storage, verb, table) as state, pytest.raises(RuntimeError) as caught:
            await manager.compact(KEY, 1000)

        assert state["fired"], (verb, table)
        assert type(caught.value) is RuntimeError
        assert str(caught.value) == "injected write failure"
        assert await table_snapshot(storage) == before, (verb, table)

    assert await manager.compact(KEY, 1000)  # and the same compaction then succeeds


async def test_failed_persist_write_leaves_every_table_untouched(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    for index in range(4):
        await manager.append_message(KEY, "user", f"msg {index}", token_count=5)
    before = await table_snapshot(storage)

    for verb in ("DELETE", "INSERT"):
        with (
            failing_write(storage, verb, "transcript_entries") as state,
            pytest.raises(RuntimeError, match="injected write failure"),
        ):
            await manager.persist_compaction_result(
                KEY, "condensed", [{"role": "assistant", "content": "latest reply"}]
            )

        assert state["fired"], verb
        assert await table_snapshot(storage) == before, verb
