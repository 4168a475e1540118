"""Single-flight compaction (HEAD-FEATURES §5.1, docs/semantics.md#single-flight): concurrent
``compact_with_result`` calls of one session with equal inputs share one run and one
commit; a cancelled waiter never cancels the owner; the whole call is bounded by
``total_timeout_seconds``. Both backends; every interleaving is forced by events."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import CompactionTimeoutError, SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.fallback import fallback_chunk_summary
from opensquilla.session.usecases.compaction.flight import (
    config_fingerprint,
    flight_key,
    running_flights,
)
from opensquilla.session.usecases.compaction.source import source_preimage
from tests.helpers import table_snapshot

KEY = "agent:main:single-flight"
WINDOW = 1000
WAIT = 120.0  # a hang guard: every wait below is for something the other side must do
UNLEASED = CompactionConfig(lease_seconds=0)  # in-process flights only


class BlockingSummarizer:
    """Fallback text, after waiting for ``gate``; counts its calls and keeps the configs
    it was handed."""

    source = "fallback"

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.gate = gate if gate is not None else asyncio.Event()
        self.entered = asyncio.Event()
        self.calls = 0
        self.configs: list[CompactionConfig] = []
        self.tasks: list[asyncio.Task[Any] | None] = []

    @property
    def runs(self) -> int:
        """How many compaction runs called it: each run summarises its chunks in its own
        task (the list keeps them alive, so their ids are distinct). The config cannot tell
        runs apart: it is frozen, and a run hands on the caller's own."""
        return len({id(task) for task in self.tasks})

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        self.configs.append(config)
        self.tasks.append(asyncio.current_task())
        self.entered.set()
        await self.gate.wait()  # bounded by each test's hang guard or timeout
        return fallback_chunk_summary(chunk, identifier_policy="strict")


async def seed(manager: SessionManager, count: int = 6) -> None:
    await manager.create(KEY)
    for index in range(count):
        await manager.append_message(KEY, "user", f"seed {index}", token_count=200)


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (what it waits for is a state the other
    tasks reach without any timing; the guard only turns a bug into a failure)."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110 - a state to reach, no event to set
            await asyncio.sleep(0)

    await asyncio.wait_for(poll(), WAIT)


def callers(storage: SessionStorage) -> int:
    return sum(flight.callers for flight in running_flights(storage.uow).values())


@pytest.mark.parametrize("count", [2, 5])
async def test_equal_concurrent_calls_share_one_run_and_one_commit(
    manager: SessionManager, storage: SessionStorage, count: int
) -> None:
    await seed(manager)
    config = CompactionConfig(protected_recent_messages=1)
    untouched = copy.deepcopy(config)
    summarizer = BlockingSummarizer()
    calls = [
        asyncio.create_task(manager.compact_with_result(KEY, WINDOW, config, summarizer=summarizer))
        for _ in range(count)
    ]
    await until(lambda: callers(storage) == count)
    assert len(running_flights(storage.uow)) == 1
    summarizer.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*calls), WAIT)

    first = results[0]
    assert all(result is first for result in results)
    assert first.skip_reason is None and first.removed_count > 0
    assert summarizer.runs == 1 and summarizer.calls == first.chunks_processed
    summaries = await manager.get_summaries(KEY)
    assert [s.summary_text for s in summaries] == [first.summary]
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    # The caller's config is left as it was (frozen: it may be handed on as it is).
    assert config == untouched and repr(config) == repr(untouched)
    assert all(seen == config for seen in summarizer.configs)
    assert running_flights(storage.uow) == {}  # the entry left with its task


async def test_two_managers_over_one_storage_share_the_flight(
    storage: SessionStorage,
) -> None:
    """The registry is per storage instance: front doors over one storage share it."""
    first, second = (SessionManager(storage, inject_time_prefix=False) for _ in range(2))
    await seed(first)
    summarizer = BlockingSummarizer()
    calls = [
        asyncio.create_task(m.compact_with_result(KEY, WINDOW, summarizer=summarizer))
        for m in (first, second)
    ]
    await until(lambda: callers(storage) == 2)
    summarizer.gate.set()
    one, two = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    assert one is two and one.removed_count > 0 and summarizer.runs == 1
    assert len(await first.get_summaries(KEY)) == 1


async def test_separate_storages_run_separate_flights(database: str) -> None:
    """Another storage instance is another registry: without the database lease
    (``lease_seconds=0``) both summarise, one commits and the other finds its source
    compacted. (With the lease they take turns: test_compaction_lease.py.)"""
    stores = [SessionStorage(database) for _ in range(2)]
    for store in stores:
        await store.connect()
    try:
        managers = [SessionManager(store, inject_time_prefix=False) for store in stores]
        await seed(managers[0])
        summarizer = BlockingSummarizer()
        calls = [
            asyncio.create_task(m.compact_with_result(KEY, WINDOW, UNLEASED, summarizer=summarizer))
            for m in managers
        ]
        await until(lambda: summarizer.runs == 2)
        summarizer.gate.set()
        results = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
        assert sorted(str(r.skip_reason) for r in results) == ["None", "stale_preimage"]
        assert len(await managers[1].get_summaries(KEY)) == 1
    finally:
        for store in stores:
            await store.close()


async def test_cancelled_waiter_does_not_cancel_the_owner(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await seed(manager)
    summarizer = BlockingSummarizer()
    owner = asyncio.create_task(manager.compact_with_result(KEY, WINDOW, summarizer=summarizer))
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)
    waiter = asyncio.create_task(manager.compact_with_result(KEY, WINDOW, summarizer=summarizer))
    await until(lambda: callers(storage) == 2)

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not owner.done()
    assert callers(storage) == 1

    summarizer.gate.set()
    result = await asyncio.wait_for(owner, WAIT)
    assert result.skip_reason is None and result.removed_count > 0
    assert summarizer.runs == 1
    assert [s.summary_text for s in await manager.get_summaries(KEY)] == [result.summary]


async def test_cancelled_owner_caller_leaves_the_run_to_its_waiter(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The run belongs to every caller: cancelling the first one while another waits
    leaves the run going, and the waiter gets the committed result."""
    await seed(manager)
    summarizer = BlockingSummarizer()
    owner = asyncio.create_task(manager.compact_with_result(KEY, WINDOW, summarizer=summarizer))
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)
    waiter = asyncio.create_task(manager.compact_with_result(KEY, WINDOW, summarizer=summarizer))
    await until(lambda: callers(storage) == 2)

    owner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owner
    summarizer.gate.set()
    result = await asyncio.wait_for(waiter, WAIT)
    assert result.skip_reason is None and result.removed_count > 0
    assert len(await manager.get_summaries(KEY)) == 1


async def test_cancelling_the_only_caller_before_the_commit_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await seed(manager)
    before = await table_snapshot(storage)
    summarizer = BlockingSummarizer()
    only = asyncio.create_task(manager.compact_with_result(KEY, WINDOW, summarizer=summarizer))
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)
    only.cancel()
    with pytest.raises(asyncio.CancelledError):
        await only
    assert running_flights(storage.uow) == {}
    summarizer.gate.set()  # the run was cancelled: nothing is left to release
    assert await table_snapshot(storage) == before
    # A later call starts a fresh flight and commits.
    result = await manager.compact_with_result(KEY, WINDOW, summarizer=summarizer)
    assert result.removed_count > 0 and summarizer.runs == 2


def _different(
    variant: str, summarizer: BlockingSummarizer
) -> tuple[int, CompactionConfig, str | None, dict[str, Any]]:
    """The second call's arguments: equal to the first's except in ``variant`` (both
    without the database lease, under which different flights of one session take turns:
    test_compaction_lease.py)."""
    if variant == "window":
        return WINDOW - 100, UNLEASED, None, {"summarizer": summarizer}
    if variant == "summarizer":
        return WINDOW, UNLEASED, None, {"summarizer": BlockingSummarizer(summarizer.gate)}
    if variant == "instructions":
        return WINDOW, UNLEASED, "keep the numbers", {"summarizer": summarizer}
    if variant == "config":
        other = CompactionConfig(safety_margin=1.3, lease_seconds=0)
        return WINDOW, other, None, {"summarizer": summarizer}
    if variant == "flush_receipt_status":
        return WINDOW, UNLEASED, None, {"summarizer": summarizer, "flush_receipt_status": "ok"}
    assert variant == "compaction_id"
    return WINDOW, UNLEASED, None, {"summarizer": summarizer, "compaction_id": "cmp-explicit"}


@pytest.mark.parametrize(
    "variant",
    ["window", "summarizer", "instructions", "config", "flush_receipt_status", "compaction_id"],
)
async def test_different_inputs_run_separate_flights(
    manager: SessionManager, storage: SessionStorage, variant: str
) -> None:
    await seed(manager)
    summarizer = BlockingSummarizer()
    window, config, instructions, options = _different(variant, summarizer)
    second = options["summarizer"]
    calls = [
        asyncio.create_task(
            manager.compact_with_result(KEY, WINDOW, UNLEASED, summarizer=summarizer)
        ),
        asyncio.create_task(
            manager.compact_with_result(KEY, window, config, instructions, **options)
        ),
    ]
    await until(lambda: len(running_flights(storage.uow)) == 2)
    summarizer.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
    assert results[0] is not results[1]
    runs = summarizer.runs + (second.runs if second is not summarizer else 0)
    assert runs == 2
    # Both planned on the same rows: one commits, the other finds its source compacted.
    assert sorted(str(r.skip_reason) for r in results) == ["None", "stale_preimage"]
    assert len(await manager.get_summaries(KEY)) == 1


async def test_total_timeout_raises_and_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await seed(manager)
    before = await table_snapshot(storage)
    summarizer = BlockingSummarizer()  # its gate is never set: only the bound ends the call
    # Long enough for the read and the lease on a busy machine; the summariser never ends.
    config = CompactionConfig(total_timeout_seconds=2.0)
    calls = [
        asyncio.create_task(manager.compact_with_result(KEY, WINDOW, config, summarizer=summarizer))
        for _ in range(2)
    ]
    outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
    for outcome in outcomes:
        assert isinstance(outcome, CompactionTimeoutError)
        assert isinstance(outcome, TimeoutError)
        assert outcome.phase == "summarize" and outcome.timeout == 2.0
    assert outcomes[0] is outcomes[1]  # one shared run timed out once
    assert summarizer.calls == 1  # the first chunk was still waiting when the bound hit
    assert running_flights(storage.uow) == {}
    assert await table_snapshot(storage) == before


async def test_a_timeout_inside_the_summariser_is_not_the_compaction_timeout(
    manager: SessionManager,
) -> None:
    """A summariser's own ``TimeoutError`` is a failed chunk (the fallback takes over), not
    the total bound."""
    await seed(manager)

    class TimingOut:
        source = "llm"

        async def summarize(self, chunk: Any, **_: Any) -> str | None:
            raise TimeoutError("the endpoint did not answer")

    result = await manager.compact_with_result(KEY, WINDOW, summarizer=TimingOut())
    assert result.skip_reason is None and result.summary_source == "fallback"


def test_flight_key_is_credential_aware_and_holds_no_secret() -> None:
    """Another API key is another flight; the key itself never reveals one."""

    def key_for(config: CompactionConfig) -> str:
        return flight_key(
            session_key=KEY,
            session_id="s-1",
            epoch=0,
            preimage=source_preimage([]),
            context_window_tokens=WINDOW,
            config=config,
            custom_instructions="secret instructions",
            flush_receipt_status=None,
            compaction_id=None,
            against_source=True,
            summarizer_identity="default",
            protected_boundary_message_id=None,
        )

    one = CompactionConfig(model="m", api_key="sk-first-secret")
    same = CompactionConfig(model="m", api_key="sk-first-secret")
    other = CompactionConfig(model="m", api_key="sk-second-secret")
    assert key_for(one) == key_for(same)
    assert key_for(one) != key_for(other)
    assert key_for(one) != key_for(CompactionConfig(model="m2", api_key="sk-first-secret"))
    shown = json.dumps(config_fingerprint(one))
    assert "sk-first-secret" not in shown and "secret" not in key_for(one)
