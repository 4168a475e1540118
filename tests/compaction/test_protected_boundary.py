"""``compact_with_result(..., protected_boundary_message_id=...)`` (HEAD-FEATURES §5.2,
docs/semantics.md#protected-boundary): the row carrying that message id and every later
one stay live; a boundary no live row carries skips before anything is called or written.
Both backends."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import InvalidInputError, SessionManager, SessionStorage
from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    compact_entries,
)
from opensquilla.session.compaction.engine import bound_to_boundary
from opensquilla.session.compaction.fallback import fallback_chunk_summary
from opensquilla.session.usecases.compaction.flight import running_flights
from opensquilla.session.usecases.compaction.source import compaction_input
from tests.compaction.test_single_flight import WAIT, BlockingSummarizer, callers, until
from tests.helpers import table_snapshot

KEY = "agent:main:boundary"
WINDOW = 1000  # six rows of 200 tokens: the budget alone keeps the newest two


class CountingSummarizer:
    """The fallback text, counting calls and keeping the config each call was handed."""

    source = "fallback"

    def __init__(self) -> None:
        self.calls = 0
        self.configs: list[CompactionConfig] = []

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        self.configs.append(config)
        return fallback_chunk_summary(chunk)


async def seed(manager: SessionManager, count: int) -> None:
    """``count`` user rows of 200 tokens with message ids ``m0``, ``m1``, ..."""
    await manager.create(KEY)
    for index in range(count):
        await manager.append_message(
            KEY, "user", f"row {index} " + "w" * 300, token_count=200, message_id=f"m{index}"
        )


@pytest.mark.parametrize(
    ("count", "config", "boundary", "protected"),
    [
        (6, CompactionConfig(protected_recent_messages=1), 4, 2),  # explicit 1 -> 2
        (6, CompactionConfig(protected_recent_messages=1), 2, 4),  # past the budget's cut
        (6, CompactionConfig(protected_recent_messages=3), 4, 3),  # the explicit value wins
        (20, CompactionConfig(compaction_profile="coding"), 17, 12),  # the profile's 12
    ],
)
async def test_compact_with_result_recomputes_bound_to_tail_protection(
    manager: SessionManager, count: int, config: CompactionConfig, boundary: int, protected: int
) -> None:
    await seed(manager, count)
    untouched = copy.deepcopy(config)
    summarizer = CountingSummarizer()

    result = await manager.compact_with_result(
        KEY,
        WINDOW,
        config,
        summarizer=summarizer,
        protected_boundary_message_id=f"m{boundary}",
    )

    assert result.skip_reason is None and summarizer.calls > 0
    assert result.quality_report["protected_recent_messages"] == protected
    assert {seen.protected_recent_messages for seen in summarizer.configs} == {protected}
    assert config == untouched  # the caller's config is never the one changed
    live = [entry.message_id for entry in await manager.get_transcript(KEY)]
    assert live == [f"m{index}" for index in range(count - protected, count)]
    assert f"m{boundary}" in live


@pytest.mark.parametrize("archived", [False, True])
async def test_compact_with_result_missing_protected_boundary_fails_closed(
    manager: SessionManager, storage: SessionStorage, archived: bool
) -> None:
    """Never written, or already compacted away: no summariser call, no write, every row
    kept, ``protected_boundary_missing``."""
    await seed(manager, 6)
    if archived:
        await manager.compact_with_result(KEY, WINDOW)  # archives m0..m3
        assert (await manager.get_transcript(KEY))[0].message_id == "m4"
    boundary = "m0" if archived else "never-written"
    live = await manager.get_transcript(KEY)
    before = await table_snapshot(storage)
    summarizer = CountingSummarizer()

    result = await manager.compact_with_result(
        KEY, 100, summarizer=summarizer, protected_boundary_message_id=boundary
    )

    assert summarizer.calls == 0
    assert result.summary == "" and result.removed_count == 0
    assert result.summary_source == "skipped"
    assert result.skip_reason == "protected_boundary_missing"
    assert result.chunks_processed == 0
    assert result.kept_entries == compaction_input(live)  # the engine's input, as it was
    assert result.tokens_after == result.tokens_before == 200 * len(live)
    assert await table_snapshot(storage) == before
    assert running_flights(storage.uow) == {}


@pytest.mark.parametrize("bad", [42, b"m1", "m\x001"])
async def test_a_boundary_that_is_not_an_identifier_is_refused_before_reading(
    manager: SessionManager, storage: SessionStorage, bad: object
) -> None:
    await seed(manager, 6)
    before = await table_snapshot(storage)

    with pytest.raises(InvalidInputError, match="protected_boundary_message_id"):
        await manager.compact_with_result(KEY, WINDOW, protected_boundary_message_id=bad)
    assert await table_snapshot(storage) == before


async def test_different_boundaries_run_separate_flights(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``m4`` and ``m5`` protect the same rows under an explicit 2, so the planned configs
    are equal; the boundaries still keep the calls in separate flights (in-process flights
    only: under the database lease they would take turns)."""
    await seed(manager, 6)
    config = CompactionConfig(protected_recent_messages=2, lease_seconds=0)
    summarizer = BlockingSummarizer()
    calls = [
        asyncio.create_task(
            manager.compact_with_result(
                KEY, WINDOW, config, summarizer=summarizer, protected_boundary_message_id=boundary
            )
        )
        for boundary in ("m4", "m5")
    ]
    await until(lambda: callers(storage) == 2)
    assert len(running_flights(storage.uow)) == 2
    summarizer.gate.set()
    one, two = await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    assert one is not two and summarizer.runs == 2
    assert sorted(str(result.skip_reason) for result in (one, two)) == ["None", "stale_preimage"]


async def test_equal_boundaries_share_one_flight(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await seed(manager, 6)
    summarizer = BlockingSummarizer()
    calls = [
        asyncio.create_task(
            manager.compact_with_result(
                KEY, WINDOW, summarizer=summarizer, protected_boundary_message_id="m3"
            )
        )
        for _ in range(2)
    ]
    await until(lambda: callers(storage) == 2)
    assert len(running_flights(storage.uow)) == 1
    summarizer.gate.set()
    one, two = await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    assert one is two and summarizer.runs == 1
    assert one.quality_report["protected_recent_messages"] == 3


def _request(config: CompactionConfig, boundary: str | None) -> CompactionRequest:
    entries = [{"role": "user", "content": f"e{i}", "token_count": 200} for i in range(5)]
    return CompactionRequest(
        "s-1",
        entries,
        WINDOW,
        config,
        entry_message_ids=["a", "b", "c", "b", "d"],
        protected_boundary_message_id=boundary,
    )


def test_the_engine_binds_the_tail_at_the_first_row_carrying_the_boundary() -> None:
    """A message id on two live rows (an upsert cannot make that, an old store could):
    the earlier row bounds the tail, so every row carrying the id stays."""
    config = CompactionConfig()
    request = _request(config, "b")

    bound = bound_to_boundary(request)

    assert bound is not None and bound is not request
    assert bound.config.protected_recent_messages == 4 and bound.config is not config
    assert config.protected_recent_messages == 0
    assert bound_to_boundary(_request(config, "zz")) is None
    unbound = _request(config, None)
    assert bound_to_boundary(unbound) is unbound
    without_ids = CompactionRequest(
        "s-1", unbound.entries, WINDOW, config, protected_boundary_message_id="b"
    )
    result = compact_entries(without_ids)  # no ids to look in: fails closed too
    assert result.skip_reason == "protected_boundary_missing"
