"""Compaction's public calls, manager and storage: each warmed call checks out exactly one
connection (one unit of work), or the documented number of a multi-phase operation
(issue 27; usecases/compaction/run.py and persist.py say why).

A compaction is read (one unit), summarised outside any transaction, then committed fenced
(one unit); with the cross-process lease on (the default) the lease's take and finish are a
unit each. Storing a summary the caller already has is a read and the commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from opensquilla.session import (
    CompactionSourceSnapshot,
    SessionManager,
    SessionStorage,
    SessionSummary,
)
from opensquilla.session.compaction import CompactionConfig

from .conftest import CheckoutCounter

KEY = "agent:main:one-unit-compaction"
WINDOW = 2_000
UNLEASED = CompactionConfig(lease_seconds=0)
LEASED = CompactionConfig(lease_seconds=30)


@dataclass
class World:
    manager: SessionManager
    storage: SessionStorage
    summary: SessionSummary | None = None
    source: CompactionSourceSnapshot | None = None


Call = Callable[[World], Awaitable[object]]


async def _session(world: World, messages: int = 0) -> None:
    await world.manager.create(KEY)
    for index in range(messages):
        role = "user" if index % 2 == 0 else "assistant"
        content = f"message {index}: " + "words of a long turn " * 40
        await world.manager.append_message(KEY, role, content, token_count=200)
    await world.manager.get_session(KEY)  # the generation cache holds the key


async def _long(world: World) -> None:
    await _session(world, 24)


async def _short(world: World) -> None:
    await _session(world, 2)


async def _compacted(world: World) -> None:
    """A session with one stored summary whose flush receipt needs repair."""
    await _session(world, 4)
    assert await world.manager.persist_compaction_result(
        KEY,
        "condensed",
        [{"role": "assistant", "content": "kept"}],
        compaction_id="cmp_one_unit",
        flush_receipt_status="degraded_forensic",
    )
    world.summary = await world.manager.get_latest_summary(KEY)
    assert world.summary is not None


async def _leased(world: World) -> None:
    await _session(world)
    node = await world.storage.get_session(KEY)
    assert node is not None
    assert await world.storage.acquire_compaction_lease(KEY, node.session_id, "f", "h", 60_000)


async def _compacts(world: World, config: CompactionConfig) -> None:
    result = await world.manager.compact_with_result(KEY, WINDOW, config)
    assert result.removed_count > 0 and result.skip_reason is None  # it did compact


async def _skips(world: World) -> None:
    result = await world.manager.compact_with_result(KEY, WINDOW, UNLEASED)
    assert result.removed_count == 0  # the plan skipped: nothing to fold away


async def _decides(world: World, compacts: bool) -> None:
    decision = await world.manager.needs_compaction(KEY, WINDOW, LEASED)
    assert decision.should_compact is compacts  # a read, whatever the lease setting


async def _captured(world: World) -> None:
    await _long(world)
    world.source = await world.manager.capture_compaction_source(KEY)


async def _against_source(world: World) -> None:
    source = world.source
    assert source is not None
    with_source: dict[str, object] = {
        "source_entries": list(source.entries),
        "source_preimage": source.preimage,
        "removed_count": 2,
    }
    assert await world.manager.persist_compaction_result(KEY, "s", [], **with_source)  # type: ignore[arg-type]


def _summary(world: World) -> SessionSummary:
    assert world.summary is not None
    return world.summary


# name: (setup, the warmed call, the units of work it opens)
MANAGER: dict[str, tuple[Call, Call, int]] = {
    "compact (skipped)": (_short, lambda w: w.manager.compact(KEY, WINDOW, UNLEASED), 1),
    "compact (no lease)": (_long, lambda w: w.manager.compact(KEY, WINDOW, UNLEASED), 2),
    "compact (lease)": (_long, lambda w: w.manager.compact(KEY, WINDOW, LEASED), 4),
    "compact_with_result (skipped)": (_short, _skips, 1),
    "compact_with_result (no lease)": (_long, lambda w: _compacts(w, UNLEASED), 2),
    "compact_with_result (lease)": (_long, lambda w: _compacts(w, LEASED), 4),
    "needs_compaction (within budget)": (_short, lambda w: _decides(w, False), 1),
    "needs_compaction (would compact)": (_long, lambda w: _decides(w, True), 1),
    "persist_compaction_result (positional)": (
        _long,
        lambda w: w.manager.persist_compaction_result(KEY, "s", [{"role": "user"}]),
        2,
    ),
    "persist_compaction_result (source)": (_captured, _against_source, 2),
    "capture_compaction_source": (_long, lambda w: w.manager.capture_compaction_source(KEY), 1),
    "get_summaries": (_compacted, lambda w: w.manager.get_summaries(KEY), 1),
    "get_latest_summary": (_compacted, lambda w: w.manager.get_latest_summary(KEY), 1),
    "list_degraded_compactions": (_compacted, lambda w: w.manager.list_degraded_compactions(), 1),
    "get_compaction": (_compacted, lambda w: w.manager.get_compaction(_summary(w).id or 0), 1),
    "get_compaction_preimage": (
        _compacted,
        lambda w: w.manager.get_compaction_preimage(_summary(w)),
        1,
    ),
    "mark_compaction_repair_status": (
        _compacted,
        lambda w: w.manager.mark_compaction_repair_status(_summary(w), "repaired"),
        1,
    ),
    "mark_compaction_flush_receipt_status": (
        _compacted,
        lambda w: w.manager.mark_compaction_flush_receipt_status(KEY, "cmp_one_unit", "ok"),
        1,
    ),
}


def _summary_row(world: World) -> SessionSummary:
    summary = _summary(world)
    return SessionSummary(
        session_id=summary.session_id, session_key=KEY, summary_text="another summary"
    )


STORAGE: dict[str, tuple[Call, Call]] = {
    "save_summary": (_compacted, lambda w: w.storage.save_summary(_summary_row(w))),
    "get_all_summaries": (
        _compacted,
        lambda w: w.storage.get_all_summaries(_summary(w).session_id),
    ),
    "get_latest_summary": (
        _compacted,
        lambda w: w.storage.get_latest_summary(_summary(w).session_id),
    ),
    "get_summary": (_compacted, lambda w: w.storage.get_summary(_summary(w).id or 0)),
    "delete_summaries": (_compacted, lambda w: w.storage.delete_summaries(_summary(w).session_id)),
    "list_degraded_summaries": (_compacted, lambda w: w.storage.list_degraded_summaries()),
    "update_summary_flush_receipt_status": (
        _compacted,
        lambda w: w.storage.update_summary_flush_receipt_status(_summary(w).id or 0, "ok"),
    ),
    "update_summary_flush_receipt_status_by_compaction": (
        _compacted,
        lambda w: w.storage.update_summary_flush_receipt_status_by_compaction(
            KEY, "cmp_one_unit", "ok"
        ),
    ),
    "get_compacted_transcript_entries": (
        _compacted,
        lambda w: w.storage.get_compacted_transcript_entries(
            _summary(w).session_id, compaction_id="cmp_one_unit"
        ),
    ),
    "read_compaction_lease": (_leased, lambda w: w.storage.read_compaction_lease(KEY)),
    "acquire_compaction_lease": (
        _short,
        lambda w: w.storage.acquire_compaction_lease(KEY, "sid", "f", "h", 60_000),
    ),
    "renew_compaction_lease": (
        _leased,
        lambda w: w.storage.renew_compaction_lease(KEY, "h", 60_000),
    ),
    "finish_compaction_lease": (
        _leased,
        lambda w: w.storage.finish_compaction_lease(KEY, "h", "{}"),
    ),
    "release_compaction_lease": (_leased, lambda w: w.storage.release_compaction_lease(KEY, "h")),
}


@pytest.mark.parametrize("name", sorted(MANAGER))
async def test_a_manager_compaction_call_opens_its_documented_units(
    name: str, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    setup, call, units = MANAGER[name]
    world = World(SessionManager(storage, inject_time_prefix=False), storage)
    await setup(world)
    with checkouts.counting():
        await call(world)
    assert checkouts.count == units, name


@pytest.mark.parametrize("name", sorted(STORAGE))
async def test_a_storage_summary_or_lease_call_opens_one_unit(
    name: str, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    setup, call = STORAGE[name]
    world = World(SessionManager(storage, inject_time_prefix=False), storage)
    await setup(world)
    with checkouts.counting():
        await call(world)
    assert checkouts.count == 1, name


def test_every_compaction_call_is_counted() -> None:
    """A new compaction, summary or lease method must be added above to pass."""
    manager = {name.split(" ")[0] for name in MANAGER}
    assert manager == {
        "compact",
        "compact_with_result",
        "needs_compaction",
        "persist_compaction_result",
        "capture_compaction_source",
        "get_summaries",
        "get_latest_summary",
        "list_degraded_compactions",
        "get_compaction",
        "get_compaction_preimage",
        "mark_compaction_repair_status",
        "mark_compaction_flush_receipt_status",
    }
    storage = {
        name
        for name in dir(SessionStorage)
        if not name.startswith("_") and ("summar" in name or "compact" in name)
    }
    assert storage == set(STORAGE)
