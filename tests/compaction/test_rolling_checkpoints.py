"""Rolling checkpoints and the active compaction context (HEAD-FEATURES §5.6,
docs/semantics.md#rolling-checkpoints): ``CompactionConfig.rolling_checkpoints`` (default
off: the contract's independent summaries; on: upstream HEAD's) folds the checkpoints in
force into one replacement summary; :func:`build_compaction_context_records` says which are
in force; the commit re-checks them (``stale_context_state``). Storage-touching tests run on
both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from opensquilla.session import (
    SessionContextState,
    SessionManager,
    SessionStorage,
    SessionSummary,
    build_compaction_context_records,
)
from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    compact_entries,
    estimate_tokens,
)
from opensquilla.session.compaction.coverage import render_structured_summary
from opensquilla.session.compaction.engine import ROLLING_HEADER
from opensquilla.session.compaction.payload import StructuredSummaryV1
from opensquilla.session.compaction.summary_replay import split_sections
from tests.compaction.test_single_flight import WAIT, BlockingSummarizer
from tests.helpers import table_snapshot

KEY = "agent:main:rolling"
WINDOW = 1000  # rows of 200 tokens: each compaction keeps the newest two
ROLLING = CompactionConfig(rolling_checkpoints=True)
PLAIN = CompactionConfig(rolling_checkpoints=False)


async def append_rows(manager: SessionManager, label: str, count: int = 10) -> None:
    for index in range(count):
        await manager.append_message(
            KEY, "user", f"{label} row {index} " + "w" * 500, token_count=200
        )


def structured(
    status: str, *, replaces: bool | None = None, compaction_id: str | None = None
) -> dict[str, Any]:
    """A structured_v1 payload whose Current Status is ``status``."""
    coverage: dict[str, Any] = {"status": "pass"}
    if replaces is not None:
        coverage["replaces_prior_context"] = replaces
        coverage["previous_summary_tokens"] = 10 if replaces else 0
    payload: dict[str, Any] = {"current_status": status, "source_coverage": coverage}
    if compaction_id is not None:
        payload["compaction_id"] = compaction_id
    return payload


def portable_state(
    node_session_id: str, covered: int, payload: dict[str, Any], **fields: Any
) -> SessionContextState:
    values: dict[str, Any] = {
        "provider": "portable",
        "state_kind": "structured_summary_v1",
        "portable": True,
        "cacheable": True,
        **fields,
    }
    return SessionContextState(
        session_id=node_session_id,
        session_key=KEY,
        payload=payload,
        covered_through_id=covered,
        **values,
    )


def text_summary(node_session_id: str, covered: int, text: str) -> SessionSummary:
    """A summary as the older store wrote it: text only, no payload, no metadata."""
    return SessionSummary(
        session_id=node_session_id, session_key=KEY, summary_text=text, covered_through_id=covered
    )


def texts(records: list[Any]) -> list[tuple[str, int, str]]:
    return [(record.source, record.covered_through_id, record.text) for record in records]


# -- the engine ------------------------------------------------------------------------


def engine_request(config: CompactionConfig, previous: str | None) -> CompactionRequest:
    entries = [
        {"role": "user", "content": f"engine row {index} " + "v" * 500, "token_count": 200}
        for index in range(10)
    ]
    return CompactionRequest("s", entries, WINDOW, config=config, previous_summary=previous)


def test_the_engine_folds_the_previous_checkpoint_only_under_the_switch() -> None:
    previous = "Goal: keep the cache warm\nWe tuned the eviction policy."
    plain = compact_entries(engine_request(PLAIN, previous))
    assert plain.summary == compact_entries(engine_request(PLAIN, None)).summary
    rolled = compact_entries(engine_request(ROLLING, previous))
    assert rolled.summary == f"{ROLLING_HEADER}\n{previous}\n\n{plain.summary}"
    assert rolled.summary_payload is not None and plain.summary_payload is not None
    # The previous checkpoint's goal is an obligation of the fold (and is covered by it).
    checked = rolled.summary_payload["source_coverage"]["checked_obligations"]
    assert checked == plain.summary_payload["source_coverage"]["checked_obligations"] + 1
    assert rolled.coverage_status == "pass"
    assert rolled.tokens_before == plain.tokens_before + estimate_tokens(previous)


def test_a_rendered_payload_replays_section_by_section() -> None:
    payload = StructuredSummaryV1.model_validate(
        {
            "user_goal": "ship it",
            "current_status": "half done",
            "files_and_artifacts": [{"path": "src/app.py"}],
            "critical_carry_forward": ["file_path: docs/x.md"],
        }
    )
    text = render_structured_summary(payload.model_dump())
    assert split_sections(text) == [
        ("Goal", "Goal:\nship it"),
        ("Current Status", "Current Status:\nhalf done"),
        ("Files and Artifacts", "Files and Artifacts:\n- path: src/app.py"),
        ("Critical Carry Forward", "Critical Carry Forward:\n- file_path: docs/x.md"),
    ]
    assert render_structured_summary(StructuredSummaryV1().model_dump()) == (
        "[Structured Compaction Summary]"
    )


# -- the projection, pure ----------------------------------------------------------------


def test_states_stand_for_their_summaries_and_the_rest_fall_back_to_text() -> None:
    older = portable_state("s", 5, structured("first checkpoint"), created_at=1, id=1)
    newer_same = portable_state("s", 5, structured("first, restated"), created_at=2, id=2)
    records = build_compaction_context_records(
        context_states=[newer_same, older],  # input order does not matter
        summaries=[text_summary("s", 5, "first as text"), text_summary("s", 9, "second text")],
        now_ms=10,
    )
    assert [(source, covered) for source, covered, _ in texts(records)] == [
        ("context_state", 5),
        ("summary", 9),
    ]
    assert "first, restated" in records[0].text  # the newest state of that covered id
    assert records[0].text.startswith("[Structured Compaction Summary]")
    assert records[1].text == "second text"


@pytest.mark.parametrize(
    "unusable",
    [
        {"valid": False},
        {"expires_at": 10},  # expired at now_ms=10
        {"provider": "anthropic"},
        {"portable": False},
        {"state_kind": "provider_cache"},
        {"payload": {"current_status": ["not", "text"]}},  # does not validate
        {"payload": {"current_status": "   "}},  # renders nothing
    ],
)
def test_a_state_that_does_not_count_suppresses_nothing(unusable: dict[str, Any]) -> None:
    fields = {"created_at": 1, "id": 1, "payload": structured("ignored", replaces=True)}
    fields.update(unusable)
    payload = fields.pop("payload")
    state = portable_state("s", 7, payload, **fields)
    records = build_compaction_context_records(
        context_states=[state], summaries=[text_summary("s", 7, "summary text")], now_ms=10
    )
    assert texts(records) == [("summary", 7, "summary text")]


# -- the projection, stored ----------------------------------------------------------------


async def test_rolling_context_state_supersedes_older_checkpoint_chain(
    manager: SessionManager,
) -> None:
    node = await manager.create(KEY)
    sid = node.session_id
    await manager.storage.save_summary(text_summary(sid, 3, "legacy text before any state"))
    for covered, status in ((5, "chain one"), (8, "chain two")):
        await manager.storage.save_summary(text_summary(sid, covered, f"{status} as text"))
        await manager.save_context_state(portable_state(sid, covered, structured(status)))
    chain = await manager.get_compaction_context_records(KEY)
    assert [record.covered_through_id for record in chain] == [3, 5, 8]
    await manager.save_context_state(
        portable_state(sid, 8, structured("rolled up to eight", replaces=True, compaction_id="c8"))
    )
    await manager.storage.save_summary(text_summary(sid, 12, "a later text summary"))

    records = await manager.get_compaction_context_records(KEY)

    assert [(source, covered) for source, covered, _ in texts(records)] == [
        ("context_state", 8),
        ("summary", 12),
    ]
    assert "rolled up to eight" in records[0].text
    assert records[0].compaction_id == "c8"


async def test_invalid_replacement_state_preserves_prior_context_and_text_fallback(
    manager: SessionManager,
) -> None:
    node = await manager.create(KEY)
    sid = node.session_id
    await manager.storage.save_summary(text_summary(sid, 5, "first as text"))
    await manager.save_context_state(portable_state(sid, 5, structured("first checkpoint")))
    await manager.storage.save_summary(text_summary(sid, 9, "second as text"))
    broken = structured("second", replaces=True)
    broken["important_identifiers"] = "not a list"  # the payload does not validate
    await manager.save_context_state(portable_state(sid, 9, broken))
    await manager.save_context_state(
        portable_state(sid, 9, structured("ignored", replaces=True), valid=False)
    )

    records = await manager.get_compaction_context_records(KEY)

    assert [(source, covered) for source, covered, _ in texts(records)] == [
        ("context_state", 5),
        ("summary", 9),
    ]
    assert "first checkpoint" in records[0].text
    assert records[1].text == "second as text"


async def test_only_the_current_generation_counts(manager: SessionManager) -> None:
    old = await manager.create(KEY)
    await manager.save_context_state(portable_state(old.session_id, 4, structured("old gen")))
    await manager.reset(KEY)
    assert await manager.get_compaction_context_records(KEY) == []


# -- compaction ----------------------------------------------------------------------------


async def test_rolling_summary_replaces_previous_checkpoint(manager: SessionManager) -> None:
    await manager.create(KEY)
    await append_rows(manager, "first")
    first = await manager.compact_with_result(KEY, WINDOW, ROLLING)
    assert first.removed_count > 0
    assert first.summary_payload is not None
    assert first.summary_payload["source_coverage"]["replaces_prior_context"] is False
    assert first.summary_payload["source_coverage"]["previous_summary_tokens"] == 0
    assert not first.summary.startswith(ROLLING_HEADER)
    [checkpoint] = await manager.get_compaction_context_records(KEY)
    raw_before = sum(entry.token_count or 0 for entry in await manager.get_transcript(KEY))
    await append_rows(manager, "second")
    live = await manager.get_transcript(KEY)

    second = await manager.compact_with_result(KEY, WINDOW, ROLLING)

    assert second.removed_count > 0 and second.skip_reason is None
    assert second.summary.startswith(f"{ROLLING_HEADER}\n{checkpoint.text}\n\n")
    assert first.summary in second.summary
    coverage = second.summary_payload["source_coverage"] if second.summary_payload else {}
    assert coverage["replaces_prior_context"] is True
    assert coverage["previous_summary_tokens"] == estimate_tokens(checkpoint.text)
    assert second.tokens_before > raw_before  # the replaced checkpoint counts as context
    summaries = await manager.get_summaries(KEY)
    assert [summary.summary_text for summary in summaries] == [first.summary, second.summary]
    removed_ids = [entry.id or 0 for entry in live[: second.removed_count]]
    assert summaries[1].covered_through_id == max(checkpoint.covered_through_id, *removed_ids)
    [record] = await manager.get_compaction_context_records(KEY)  # one checkpoint in force
    assert record.source == "context_state"
    assert record.compaction_id == summaries[1].compaction_id
    assert first.summary in record.text


class FoldingModel:
    """A model-like summariser (``source = "llm"``): it keeps the chunks it is handed and
    answers with one line naming how many rows it saw."""

    source = "llm"

    def __init__(self) -> None:
        self.chunks: list[list[dict[str, Any]]] = []

    async def summarize(
        self, chunk: Any, *, config: CompactionConfig, custom_instructions: str | None
    ) -> str:
        self.chunks.append(list(chunk))
        return f"Goal: keep going. The model folded {len(chunk)} rows."


async def test_a_model_is_handed_the_checkpoint_and_folds_it(manager: SessionManager) -> None:
    """Under rolling checkpoints a model summariser gets the previous checkpoint as the
    first row of its first chunk, and its answer is the replacement checkpoint itself (no
    deterministic header); the fallback's fold is the test above."""
    await manager.create(KEY)
    await append_rows(manager, "first")
    await manager.compact_with_result(KEY, WINDOW, ROLLING)
    [checkpoint] = await manager.get_compaction_context_records(KEY)
    await append_rows(manager, "second")
    model = FoldingModel()

    second = await manager.compact_with_result(KEY, WINDOW, ROLLING, summarizer=model)

    assert second.removed_count > 0 and second.summary_source == "llm"
    opening = model.chunks[0][0]
    assert opening == {"role": "system", "content": f"{ROLLING_HEADER}\n{checkpoint.text}"}
    assert all(row.get("role") != "system" for chunk in model.chunks[1:] for row in chunk)
    assert not second.summary.startswith(ROLLING_HEADER)
    assert checkpoint.text not in second.summary
    assert second.summary_payload is not None
    assert second.summary_payload["source_coverage"]["replaces_prior_context"] is True
    [record] = await manager.get_compaction_context_records(KEY)
    assert record.compaction_id == (await manager.get_summaries(KEY))[-1].compaction_id


async def test_independent_summaries_are_the_default(manager: SessionManager) -> None:
    """No config, or ``CompactionConfig()``: the contract's independent summaries (SEMANTICS
    §8.6, §8.9). The first compaction's ``source_coverage`` holds its three keys only, the
    second summary is the plain fallback (``[Summary of N messages]``, no fold), a summariser
    is handed no ``system`` row, and every checkpoint stays in force. (Rolling checkpoints,
    upstream HEAD's behaviour, are opt-in: docs/semantics.md#rolling-checkpoints.)"""
    assert CompactionConfig().rolling_checkpoints is False
    await manager.create(KEY)
    await append_rows(manager, "first")
    first = await manager.compact_with_result(KEY, WINDOW)
    await append_rows(manager, "second")
    model = FoldingModel()

    second = await manager.compact_with_result(KEY, WINDOW, summarizer=model)
    await append_rows(manager, "third")
    third = await manager.compact_with_result(KEY, WINDOW)

    assert first.removed_count > 0 and second.removed_count > 0 and third.removed_count > 0
    assert first.summary_payload is not None
    assert set(first.summary_payload["source_coverage"]) == {
        "status",
        "checked_obligations",
        "covered_obligations",
    }
    assert model.chunks and all(row["role"] != "system" for c in model.chunks for row in c)
    assert "[Summary of " in third.summary and ROLLING_HEADER not in third.summary
    assert first.summary not in third.summary
    assert len(await manager.get_compaction_context_records(KEY)) == 3


async def test_without_the_switch_a_model_never_sees_a_checkpoint(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await append_rows(manager, "first")
    await manager.compact_with_result(KEY, WINDOW, PLAIN)
    await append_rows(manager, "second")
    model = FoldingModel()
    await manager.compact_with_result(KEY, WINDOW, PLAIN, summarizer=model)
    assert model.chunks and all(row["role"] != "system" for c in model.chunks for row in c)


async def test_without_the_switch_summaries_stay_independent(manager: SessionManager) -> None:
    await manager.create(KEY)
    await append_rows(manager, "first")
    first = await manager.compact_with_result(KEY, WINDOW, PLAIN)
    await append_rows(manager, "second")
    live = await manager.get_transcript(KEY)

    second = await manager.compact_with_result(KEY, WINDOW, PLAIN)

    assert second.removed_count > 0
    assert first.summary not in second.summary
    assert not second.summary.startswith(ROLLING_HEADER)
    assert second.summary_payload is not None
    assert set(second.summary_payload["source_coverage"]) == {
        "status",
        "checked_obligations",
        "covered_obligations",
    }
    summaries = await manager.get_summaries(KEY)
    assert summaries[1].covered_through_id == max(
        entry.id or 0 for entry in live[: second.removed_count]
    )
    assert len(await manager.get_compaction_context_records(KEY)) == 2


@pytest.mark.parametrize("rolling", [True, False])
async def test_legacy_summary_database_compacts_and_replays_after_restart(
    database: str, rolling: bool
) -> None:
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        node = await manager.create(KEY)
        await storage.save_summary(
            text_summary(node.session_id, 0, "Legacy summary: Goal: ship the parser")
        )
        await append_rows(manager, "after legacy")
        result = await manager.compact_with_result(
            KEY, WINDOW, CompactionConfig(rolling_checkpoints=rolling)
        )
        assert result.removed_count > 0
        assert ("Legacy summary" in result.summary) is rolling

    async with SessionStorage(database) as storage:  # a restart: a new storage, same database
        records = await SessionManager(storage).get_compaction_context_records(KEY)

    if rolling:
        [record] = records  # the legacy text is superseded by the rolling checkpoint
        assert record.source == "context_state"
        assert "Legacy summary: Goal: ship the parser" in record.text
    else:
        assert [record.source for record in records] == ["summary", "context_state"]
        assert records[0].text == "Legacy summary: Goal: ship the parser"


# -- the race: a checkpoint saved while the summariser runs --------------------------------


@pytest.mark.parametrize(
    ("config", "provider", "stale"),
    [
        (ROLLING, "portable", True),  # the projection changed: the summary is stale
        (ROLLING, "anthropic", False),  # not part of the projection: commits
        (PLAIN, "portable", False),  # without the switch the summary depends on no state
    ],
)
async def test_a_context_state_saved_during_summarising_is_a_stale_context_state(
    manager: SessionManager,
    storage: SessionStorage,
    config: CompactionConfig,
    provider: str,
    stale: bool,
) -> None:
    node = await manager.create(KEY)
    await append_rows(manager, "raced")
    summarizer = BlockingSummarizer()
    task = asyncio.create_task(
        manager.compact_with_result(KEY, WINDOW, config, summarizer=summarizer)
    )
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)  # planned on the read snapshot
    state = portable_state(node.session_id, 2, structured("saved meanwhile"))
    state.provider = provider
    await manager.save_context_state(state)
    before = await table_snapshot(storage)
    summarizer.gate.set()

    result = await asyncio.wait_for(task, WAIT)

    if stale:
        assert result.skip_reason == "stale_context_state"
        assert result.removed_count == 0 and result.summary == ""
        assert await table_snapshot(storage) == before  # nothing written
    else:
        assert result.skip_reason is None and result.removed_count > 0
        assert len(await manager.get_summaries(KEY)) == 1
