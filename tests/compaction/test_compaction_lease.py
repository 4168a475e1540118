"""The cross-process compaction lease (revision 0005, docs/semantics.md#compaction-lease).

Storage instances on one database (the ``managers`` fixture) stand for worker processes:
each has its own in-process flight registry, so they meet only through the lease in the
database. (Four real processes: tests/reliability/test_compaction_lease_processes.py.) Both
backends; every interleaving is forced by events, or by what the database shows."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from opensquilla.session import ConfigurationError, SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig, CompactionResult
from opensquilla.session.compaction.result import result_document, result_from_document
from opensquilla.session.usecases.compaction.flight import flight_key
from opensquilla.session.usecases.compaction.lease import WAIT_MESSAGE
from opensquilla.session.usecases.compaction.source import source_preimage

from .test_single_flight import KEY, WAIT, WINDOW, BlockingSummarizer, seed, until

LEASED = CompactionConfig(lease_seconds=30)


def _waiting(caplog: pytest.LogCaptureFixture) -> Callable[[], bool]:
    return lambda: any(record.msg == WAIT_MESSAGE for record in caplog.records)


async def test_a_second_worker_waits_and_receives_the_first_ones_result(
    managers: list[SessionManager], caplog: pytest.LogCaptureFixture
) -> None:
    first, second, _ = managers
    caplog.set_level(logging.INFO, logger="opensquilla.session.compactor")
    await seed(first)
    owner_summarizer, other_summarizer = BlockingSummarizer(), BlockingSummarizer()
    owner = asyncio.create_task(
        first.compact_with_result(KEY, WINDOW, LEASED, summarizer=owner_summarizer)
    )
    await asyncio.wait_for(owner_summarizer.entered.wait(), WAIT)
    waiter = asyncio.create_task(
        second.compact_with_result(KEY, WINDOW, LEASED, summarizer=other_summarizer)
    )
    await until(_waiting(caplog))
    owner_summarizer.gate.set()
    owned, received = await asyncio.wait_for(asyncio.gather(owner, waiter), WAIT)

    assert owner_summarizer.runs == 1 and other_summarizer.calls == 0
    assert owned.removed_count > 0 and owned.skip_reason is None
    assert received is not owned
    assert result_document(received) == result_document(owned)
    live = await second.get_transcript(KEY)
    assert [e["content"] for e in received.kept_entries] == [e.content for e in live]
    assert [s.summary_text for s in await second.get_summaries(KEY)] == [owned.summary]


async def test_different_inputs_take_turns_and_the_later_one_plans_again(
    managers: list[SessionManager], caplog: pytest.LogCaptureFixture
) -> None:
    """A waiter whose inputs differ (another window) does not take the result: once the
    holder is done it plans on the transcript as it now is, rather than fail as stale."""
    first, second, _ = managers
    caplog.set_level(logging.INFO, logger="opensquilla.session.compactor")
    await seed(first)
    summarizer = BlockingSummarizer()
    owner = asyncio.create_task(
        first.compact_with_result(KEY, WINDOW, LEASED, summarizer=summarizer)
    )
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)
    waiter = asyncio.create_task(
        second.compact_with_result(KEY, WINDOW // 2, LEASED, summarizer=summarizer)
    )
    await until(_waiting(caplog))
    summarizer.gate.set()
    owned, later = await asyncio.wait_for(asyncio.gather(owner, waiter), WAIT)

    assert owned.removed_count > 0 and owned.skip_reason is None
    assert later.skip_reason != "stale_preimage"
    committed = [r for r in (owned, later) if r.removed_count > 0 and r.skip_reason is None]
    assert len(await second.get_summaries(KEY)) == len(committed)
    node = await second.get_session(KEY)
    assert node is not None and node.compaction_count == len(committed)


async def test_a_lease_whose_holder_stopped_renewing_it_lapses(
    managers: list[SessionManager], storage: SessionStorage, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that crashed mid-run leaves its lease; another worker waits for it until it
    lapses (here: its expiry is moved into the past once the waiter is seen waiting, which
    is what the clock would do), then plans again and compacts."""
    first, _, _ = managers
    caplog.set_level(logging.INFO, logger="opensquilla.session.compactor")
    await seed(first)
    assert await storage.acquire_compaction_lease(KEY, "sid", "crashed-run", "gone", 600_000)
    summarizer = BlockingSummarizer()
    summarizer.gate.set()
    waiter = asyncio.create_task(
        first.compact_with_result(KEY, WINDOW, LEASED, summarizer=summarizer)
    )
    await until(_waiting(caplog))
    assert not waiter.done() and summarizer.calls == 0
    async with storage.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE compaction_leases SET expires_at = 0"))

    result = await asyncio.wait_for(waiter, WAIT)
    assert result.removed_count > 0 and result.skip_reason is None
    lease = await storage.read_compaction_lease(KEY)
    assert lease is not None and lease.state == "done" and lease.holder != "gone"


async def test_a_cancelled_holder_gives_its_lease_up(
    managers: list[SessionManager], storage: SessionStorage
) -> None:
    first, second, _ = managers
    await seed(first)
    summarizer = BlockingSummarizer()
    owner = asyncio.create_task(
        first.compact_with_result(KEY, WINDOW, LEASED, summarizer=summarizer)
    )
    await asyncio.wait_for(summarizer.entered.wait(), WAIT)
    lease = await storage.read_compaction_lease(KEY)
    assert lease is not None and lease.running
    owner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owner
    assert await storage.read_compaction_lease(KEY) is None
    # The next worker takes the lease at once and compacts.
    summarizer.gate.set()
    result = await asyncio.wait_for(
        second.compact_with_result(KEY, WINDOW, LEASED, summarizer=summarizer), WAIT
    )
    assert result.removed_count > 0 and result.skip_reason is None


async def test_a_result_the_database_does_not_show_is_not_taken(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A finished lease with this run's very key reports a commit the session row does not
    show (a database restored from a backup taken before it): the run compacts itself."""
    await seed(manager)
    node = await manager.get_session(KEY)
    assert node is not None
    summarizer = BlockingSummarizer()
    summarizer.gate.set()
    key = flight_key(
        session_key=KEY,
        session_id=node.session_id,
        epoch=node.epoch,
        preimage=source_preimage(await manager.get_transcript(KEY)),
        context_window_tokens=WINDOW,
        config=LEASED,
        custom_instructions=None,
        flush_receipt_status=None,
        compaction_id=None,
        against_source=True,
        protected_boundary_message_id=None,
        summarizer_identity=f"class:{BlockingSummarizer.__module__}.BlockingSummarizer",
        portable=True,
    )
    ghost = CompactionResult(
        summary="never stored", kept_entries=[], removed_count=3, chunks_processed=1
    )
    assert await storage.acquire_compaction_lease(KEY, node.session_id, key, "ghost", 60_000)
    assert await storage.finish_compaction_lease(KEY, "ghost", result_document(ghost))

    result = await asyncio.wait_for(
        manager.compact_with_result(KEY, WINDOW, LEASED, summarizer=summarizer), WAIT
    )
    assert summarizer.runs == 1 and result.summary != "never stored"
    assert [s.summary_text for s in await manager.get_summaries(KEY)] == [result.summary]


async def test_lease_statements_take_renew_finish_and_release(storage: SessionStorage) -> None:
    take = storage.acquire_compaction_lease
    assert await take("k", "sid", "flight-a", "h1", 60_000)
    assert not await take("k", "sid", "flight-a", "h2", 60_000)  # held and unexpired
    assert not await storage.renew_compaction_lease("k", "h2", 60_000)
    assert await storage.renew_compaction_lease("k", "h1", 60_000)
    held = await storage.read_compaction_lease("k")
    assert held is not None and held.running and held.holder == "h1"
    assert held.expires_at - held.now > 50_000  # the database's clock, both sides
    assert not await storage.finish_compaction_lease("k", "h2", "{}")
    assert await storage.finish_compaction_lease("k", "h1", '{"summary": "s"}')
    done = await storage.read_compaction_lease("k")
    assert done is not None and not done.running and done.finished_within(60_000)
    assert done.result == '{"summary": "s"}'
    assert await take("k", "sid", "flight-b", "h2", 60_000)  # a finished lease is free
    await storage.release_compaction_lease("k", "h1")  # not h1's any more: kept
    assert await storage.read_compaction_lease("k") is not None
    await storage.release_compaction_lease("k", "h2")
    assert await storage.read_compaction_lease("k") is None


async def test_an_expired_lease_can_be_taken(storage: SessionStorage) -> None:
    """Expiry is judged by the database's clock: once it shows the lease lapsed, another
    holder takes it."""
    assert await storage.acquire_compaction_lease("k", "sid", "flight", "h1", 1)
    for _ in range(int(WAIT / 0.005)):
        lease = await storage.read_compaction_lease("k")
        assert lease is not None and lease.holder == "h1"
        if not lease.running:
            break
        await asyncio.sleep(0.005)
    assert await storage.acquire_compaction_lease("k", "sid", "flight", "h2", 60_000)
    lease = await storage.read_compaction_lease("k")
    assert lease is not None and lease.holder == "h2" and lease.running


def test_the_lease_key_is_equal_across_processes_and_holds_no_api_key() -> None:
    """The in-process key folds the API key in under a per-process HMAC; the lease key
    leaves it out, so workers of one deployment agree on it."""
    common: dict[str, object] = {
        "session_key": KEY,
        "session_id": "sid",
        "epoch": 0,
        "preimage": source_preimage([]),
        "context_window_tokens": WINDOW,
        "custom_instructions": None,
        "flush_receipt_status": None,
        "compaction_id": None,
        "against_source": True,
        "protected_boundary_message_id": None,
        "summarizer_identity": "default",
        "portable": True,
    }
    keys = {
        api_key: flight_key(config=CompactionConfig(model="m", api_key=api_key), **common)  # type: ignore[arg-type]
        for api_key in ("sk-one", "sk-two")
    }
    assert keys["sk-one"] == keys["sk-two"]
    other_model = flight_key(config=CompactionConfig(model="other", api_key="sk-one"), **common)  # type: ignore[arg-type]
    assert other_model != keys["sk-one"]


def test_a_result_document_round_trips_without_kept_entries() -> None:
    result = CompactionResult(
        summary="s",
        kept_entries=[{"role": "user", "content": "kept"}],
        removed_count=3,
        chunks_processed=1,
        summary_payload={"goal": "g"},
        quality_report={"ok": True},
    )
    text = result_document(result)
    assert "kept" not in text
    again = result_from_document(text, [{"role": "user", "content": "now"}])
    assert again.summary == "s" and again.removed_count == 3
    assert again.summary_payload == {"goal": "g"} and again.quality_report == {"ok": True}
    assert again.kept_entries == [{"role": "user", "content": "now"}]


@pytest.mark.parametrize("value", [-1, float("nan"), "30"])
def test_lease_seconds_must_be_zero_or_positive(value: object) -> None:
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        CompactionConfig(lease_seconds=value)  # type: ignore[arg-type]
