"""Compaction racing other writers, each through its own SessionStorage on one database
(both backends). The summariser runs outside any transaction, so the commit must re-check
the transcript itself: one compaction wins, and no appended message is ever lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.fallback import fallback_chunk_summary

KEY = "agent:main:race"
WAIT = 120.0  # a hang guard: every wait below is for an event the other side must set


class HookedSummarizer:
    """Fallback text, but the first chunk first runs ``hook`` (a rendezvous or an append)."""

    source = "fallback"

    def __init__(self, hook: Callable[[], Awaitable[None]]) -> None:
        self.hook = hook
        self.calls = 0

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        if self.calls == 1:
            await self.hook()
        return fallback_chunk_summary(chunk, identifier_policy="strict")


async def seed(manager: SessionManager, count: int = 6) -> list[str]:
    await manager.create(KEY)
    message_ids = []
    for index in range(count):
        entry = await manager.append_message(KEY, "user", f"seed {index}", token_count=200)
        message_ids.append(entry.message_id)
    return message_ids


async def test_two_compactions_mid_summary_only_one_commits(
    managers: list[SessionManager],
) -> None:
    """Without the cross-process lease (``lease_seconds=0``) both read the same transcript
    and are summarising at once; the second commit finds the transcript changed and writes
    nothing. (With the lease, the default, the second waits: test_compaction_lease.py.)"""
    first, second, reader = managers
    appended = await seed(first)
    both_summarising = asyncio.Event()
    arrived = 0

    async def rendezvous() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_summarising.set()
        await asyncio.wait_for(both_summarising.wait(), WAIT)

    unleased = CompactionConfig(lease_seconds=0)
    results = await asyncio.gather(
        first.compact_with_result(KEY, 1000, unleased, summarizer=HookedSummarizer(rendezvous)),
        second.compact_with_result(KEY, 1000, unleased, summarizer=HookedSummarizer(rendezvous)),
    )

    assert arrived == 2
    reasons = sorted(str(r.skip_reason) for r in results)
    assert reasons == ["None", "stale_preimage"]
    winner = next(r for r in results if r.skip_reason is None)
    loser = next(r for r in results if r.skip_reason == "stale_preimage")
    assert winner.removed_count > 0 and loser.removed_count == 0
    assert loser.summary == "" and loser.summary_source == "skipped"
    summaries = await reader.get_summaries(KEY)
    assert [s.summary_text for s in summaries] == [winner.summary]
    node = await reader.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    assert len(await reader.get_context_states(KEY)) == 1
    canonical = await reader.get_canonical_transcript(KEY)
    assert [e.message_id for e in canonical] == appended
    live = await reader.get_transcript(KEY)
    assert [e.message_id for e in live] == appended[-len(winner.kept_entries) :]


async def test_append_during_summary_survives_and_the_compaction_commits(
    managers: list[SessionManager],
) -> None:
    """No caller lock: the commit checks that the planned rows are still the transcript's
    prefix, so the message appended meanwhile stays live with its id and the compaction
    still commits (docs/semantics.md#compaction-source)."""
    compactor, writer, reader = managers
    appended = await seed(compactor)
    before = {e.message_id: e.id for e in await reader.get_transcript(KEY)}
    late: list[str] = []
    late_ids: list[int | None] = []

    async def append_elsewhere() -> None:
        entry = await writer.append_message(KEY, "user", "landed mid-summary", token_count=3)
        late.append(entry.message_id)
        late_ids.append(entry.id)

    result = await compactor.compact_with_result(
        KEY, 1000, summarizer=HookedSummarizer(append_elsewhere)
    )

    assert result.skip_reason is None and result.removed_count > 0
    assert [s.summary_text for s in await reader.get_summaries(KEY)] == [result.summary]
    node = await reader.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    live = await reader.get_transcript(KEY)
    kept = appended[result.removed_count :]
    assert [e.message_id for e in live] == [*kept, *late]
    assert [e.id for e in live] == [*(before[m] for m in kept), *late_ids]
    assert [e.message_id for e in await reader.get_canonical_transcript(KEY)] == [
        *appended,
        *late,
    ]


@pytest.mark.parametrize("position", ["switch_off", "caller_lock"])
async def test_append_during_summary_is_stale_in_the_exact_position(
    database: str, position: str
) -> None:
    """``commit_against_source=False``, or the default with a caller ``mutation_context``
    (the contract's position): an append seen at the commit makes the compaction stale."""
    stores = [SessionStorage(database) for _ in range(2)]
    for store in stores:
        await store.connect()
    try:
        switch = False if position == "switch_off" else None
        compactor = SessionManager(
            stores[0], inject_time_prefix=False, commit_against_source=switch
        )
        writer = SessionManager(stores[1], inject_time_prefix=False)
        appended = await seed(compactor)
        late: list[str] = []

        async def append_elsewhere() -> None:
            entry = await writer.append_message(KEY, "user", "landed mid-summary", token_count=3)
            late.append(entry.message_id)

        @contextlib.asynccontextmanager
        async def lock() -> AsyncIterator[None]:
            yield

        result = await compactor.compact_with_result(
            KEY,
            1000,
            summarizer=HookedSummarizer(append_elsewhere),
            mutation_context=lock if position == "caller_lock" else None,
        )

        assert result.skip_reason == "stale_preimage"
        assert result.removed_count == 0 and result.summary == ""
        assert result.kept_entries[-1]["content"] == "landed mid-summary"
        assert await writer.get_summaries(KEY) == []
        node = await writer.get_session(KEY)
        assert node is not None and node.compaction_count == 0
        live = await writer.get_transcript(KEY)
        assert [e.message_id for e in live] == [*appended, *late]
    finally:
        for store in stores:
            await store.close()


async def test_appends_racing_compactions_lose_nothing(managers: list[SessionManager]) -> None:
    """A stream of appends from one storage while another keeps compacting.

    Two points of the race are forced, the rest runs freely: the writer starts only once
    the first compaction is summarising, and that compaction waits for the first append
    (which it must keep live, committing all the same); halfway the writer waits until some
    compaction has committed (so the later appends land on a rewritten transcript)."""
    compactor, writer, reader = managers
    appended = await seed(compactor, 10)
    first_summarising, first_landed = asyncio.Event(), asyncio.Event()
    committed, done = asyncio.Event(), asyncio.Event()

    async def held_until_overtaken() -> None:
        first_summarising.set()
        await asyncio.wait_for(first_landed.wait(), WAIT)

    async def yield_a_little() -> None:
        await asyncio.sleep(0.005)

    async def keep_appending() -> None:
        try:
            await asyncio.wait_for(first_summarising.wait(), WAIT)
            for index in range(15):
                if index == 8:
                    await asyncio.wait_for(committed.wait(), WAIT)
                entry = await writer.append_message(KEY, "user", f"live {index}", token_count=150)
                appended.append(entry.message_id)
                first_landed.set()
                await asyncio.sleep(0)
        finally:
            done.set()

    async def keep_compacting() -> list[str | None]:
        reasons = []
        while not done.is_set():
            hook = yield_a_little if reasons else held_until_overtaken
            result = await compactor.compact_with_result(
                KEY, 1000, summarizer=HookedSummarizer(hook)
            )
            reasons.append(result.skip_reason)
            if result.skip_reason is None and result.removed_count > 0:
                committed.set()
        return reasons

    _, reasons = await asyncio.gather(keep_appending(), keep_compacting())
    settled = await compactor.compact_with_result(KEY, 1000)  # no writer left to race

    assert reasons[0] is None, "the compaction overtaken mid-summary did not commit"
    # A compaction committed while the writer was still at it, so the assertions below
    # check a transcript rewritten under the writer's feet, not an untouched one.
    assert any(reason is None for reason in reasons), reasons
    reasons.append(settled.skip_reason)
    canonical = await reader.get_canonical_transcript(KEY)
    assert [e.message_id for e in canonical] == appended
    live = await reader.get_transcript(KEY)
    assert [e.message_id for e in live] == appended[len(appended) - len(live) :]
    node = await reader.get_session(KEY)
    assert node is not None
    assert node.compaction_count == len(await reader.get_summaries(KEY))
    assert node.compaction_count == sum(reason is None for reason in reasons)
