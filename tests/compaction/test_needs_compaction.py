"""``needs_compaction``: the decision ``compact_with_result`` would take, without running it
(issue 28, item 9; docs/compaction.md#needs-compaction). Both backends."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig, CompactionDecision
from opensquilla.session.compaction.decision import threshold_tokens
from opensquilla.session.compaction.tokens import entry_tokens
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError
from tests.helpers import table_snapshot

from .test_properties import transcripts

KEY = "agent:main:needs"
UNLEASED = CompactionConfig(lease_seconds=0)
_keys = itertools.count()


class CountingSummarizer:
    """The fallback (``None`` for every chunk), counting the chunks it was handed."""

    source = "fallback"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        return None


class RefusingSummarizer:
    source = "fallback"

    async def summarize(self, *args: Any, **kwargs: Any) -> str | None:
        raise AssertionError("needs_compaction called the summariser")


async def _long(manager: SessionManager, turns: int = 12) -> None:
    await manager.create(KEY)
    for n in range(turns):
        await manager.append_message(KEY, "user", f"question {n} " + "q" * 400, token_count=100)
        await manager.append_message(KEY, "assistant", f"answer {n} " + "a" * 400, token_count=100)


async def test_a_short_session_is_within_budget(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "hi", token_count=10)
    decision = await manager.needs_compaction(KEY, 1_000)
    sizes = [entry_tokens(e.__dict__) for e in await manager.get_transcript(KEY)]
    assert decision == CompactionDecision(
        should_compact=False,
        skip_reason="within_compaction_budget",
        estimated_tokens=sum(sizes),
        threshold_tokens=833,  # 1000 / 1.2
        context_window_tokens=1_000,
        entry_count=1,
        removable_count=0,
    )
    result = await manager.compact_with_result(KEY, 1_000, UNLEASED)
    assert result.skip_reason == decision.skip_reason
    assert result.tokens_before == decision.estimated_tokens


async def test_a_long_session_needs_it_and_nothing_runs_or_changes(
    storage: SessionStorage,
) -> None:
    manager = SessionManager(storage, inject_time_prefix=False, summarizer=RefusingSummarizer())
    await _long(manager)
    before = await table_snapshot(storage)
    decision = await manager.needs_compaction(KEY, 2_000)
    assert await table_snapshot(storage) == before  # no write, no lease
    assert decision.should_compact and decision.skip_reason is None
    assert decision.estimated_tokens > decision.threshold_tokens == 1_666
    assert 0 < decision.removable_count < decision.entry_count == 24
    counting = CountingSummarizer()
    result = await manager.compact_with_result(KEY, 2_000, UNLEASED, summarizer=counting)
    assert counting.calls > 0 and result.skip_reason is None
    assert result.removed_count == decision.removable_count
    assert result.tokens_before == decision.estimated_tokens
    after = await manager.needs_compaction(KEY, 2_000)
    assert not after.should_compact and after.skip_reason == "within_compaction_budget"


async def test_the_config_and_the_boundary_are_the_plans(manager: SessionManager) -> None:
    await _long(manager)
    roomy = CompactionConfig(safety_margin=1.0)
    decision = await manager.needs_compaction(KEY, 100_000, roomy)
    assert decision.threshold_tokens == 100_000 and not decision.should_compact
    missing = await manager.needs_compaction(KEY, 2_000, protected_boundary_message_id="nope")
    assert missing.skip_reason == "protected_boundary_missing" and not missing.should_compact
    live = await manager.get_transcript(KEY)
    first = await manager.needs_compaction(
        KEY, 2_000, protected_boundary_message_id=live[0].message_id
    )
    assert not first.should_compact and first.skip_reason is not None
    assert (await manager.needs_compaction(KEY, 0)).skip_reason == "no_context_window"


async def test_an_empty_session_and_a_missing_one(manager: SessionManager) -> None:
    await manager.create(KEY)
    decision = await manager.needs_compaction(KEY, 1_000)
    assert decision.skip_reason == "no_entries" and decision.entry_count == 0
    with pytest.raises(SessionNotFoundError):
        await manager.needs_compaction("agent:main:absent", 1_000)


@pytest.mark.parametrize(
    ("window", "config", "instructions", "named"),
    [
        ("1000", None, None, "context_window_tokens"),
        (True, None, None, "context_window_tokens"),
        (1000, {"safety_margin": 1}, None, "config"),
        (1000, None, 5, "custom_instructions"),
        (1000, None, "x" * 2001, "too long"),
    ],
)
async def test_bad_arguments_are_refused(
    manager: SessionManager, window: Any, config: Any, instructions: Any, named: str
) -> None:
    await manager.create(KEY)
    with pytest.raises(InvalidInputError, match=named):
        await manager.needs_compaction(KEY, window, config, instructions)


def test_the_threshold_is_the_largest_size_kept() -> None:
    for window in [0, 1, 2, 5, 6, 100, 999, 1000, 1_000_000]:
        for margin in [1.0, 1.2, 1.5, 3.0, 0.5]:
            tokens = threshold_tokens(window, margin)
            if window:
                assert tokens * margin <= window < (tokens + 1) * margin, (window, margin)
            else:
                assert tokens == 0


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    entries=transcripts,
    window=st.integers(min_value=-5, max_value=3000),
    margin=st.sampled_from([1.0, 1.2]),
    policy=st.sampled_from(["entries", "api_rounds"]),
)
async def test_the_decision_is_what_compact_with_result_then_does(
    storage: SessionStorage,
    entries: list[dict[str, Any]],
    window: int,
    margin: float,
    policy: str,
) -> None:
    """For any transcript, window and config: ``should_compact`` is whether the compaction
    then summarises; a skip is the same skip (same reason, same size), and a compaction that
    commits folds exactly the rows the decision counted."""
    key = f"agent:needs:p{next(_keys)}"
    manager = SessionManager(storage, inject_time_prefix=False)
    await manager.create(key)
    for item in entries:
        fields = {k: item[k] for k in ("tool_calls", "tool_call_id", "token_count") if k in item}
        await manager.append_message(key, item["role"], item["content"], **fields)
    config = CompactionConfig(lease_seconds=0, safety_margin=margin, cut_policy=policy)
    decision = await manager.needs_compaction(key, window, config)
    counting = CountingSummarizer()
    result = await manager.compact_with_result(key, window, config, summarizer=counting)
    assert decision.should_compact == (counting.calls > 0), (decision, result.skip_reason)
    assert decision.entry_count == len(entries)
    if not decision.should_compact:
        assert result.skip_reason == decision.skip_reason
        assert result.removed_count == 0
        assert result.tokens_before == decision.estimated_tokens
    if result.removed_count:
        assert decision.should_compact
        assert result.removed_count == decision.removable_count
