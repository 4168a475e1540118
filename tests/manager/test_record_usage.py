"""``record_usage``: atomic increments of a session's counters, fenced by the generation
(issue 28, item 7; docs/semantics.md#usage-counters). Both backends."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos.session_usage import SessionUsage
from opensquilla.session.errors import (
    InvalidInputError,
    SessionNotFoundError,
    StaleEpochError,
)
from opensquilla.session.models import INT64_MAX
from tests.helpers import table_snapshot

KEY = "agent:main:usage"


@contextmanager
def gated_increment(monkeypatch: pytest.MonkeyPatch, gate: Any) -> Iterator[list[int]]:
    """Every usage UPDATE waits for ``await gate()`` first, inside its transaction."""
    original = SessionUsage.add_usage
    entered: list[int] = []

    async def add_usage(self: SessionUsage, *args: Any, **kwargs: Any) -> Any:
        entered.append(1)
        await gate()
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SessionUsage, "add_usage", add_usage)
    yield entered


async def test_usage_adds_to_the_counters_and_returns_the_row(manager: SessionManager) -> None:
    created = await manager.create(KEY)
    node = await manager.record_usage(
        KEY, input_tokens=100, output_tokens=20, cache_read=70, cache_write=5
    )
    assert (node.input_tokens, node.output_tokens, node.total_tokens) == (100, 20, 120)
    assert (node.cache_read, node.cache_write) == (70, 5)
    assert node.total_tokens_fresh is True
    assert node.cost_source == "none" and node.total_cost_usd == 0.0
    assert node.missing_cost_entries == 0
    assert node.updated_at >= created.updated_at
    assert await manager.get_session(KEY) == node
    again = await manager.record_usage(KEY, input_tokens=1, output_tokens=2)
    assert (again.input_tokens, again.output_tokens, again.total_tokens) == (101, 22, 123)


async def test_an_append_with_turn_usage_adds_nothing_and_usage_comes_through_record_usage(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "hi", token_count=3)
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 3 and node.total_tokens_fresh is False
    usage = {"input_tokens": 40, "output_tokens": 9}
    await manager.append_message(KEY, "assistant", "hello", token_count=9, turn_usage=usage)
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 3  # the contract's rule
    node = await manager.record_usage(KEY, input_tokens=40, output_tokens=9)
    assert node.total_tokens == 52 and node.total_tokens_fresh is True
    await manager.append_message(KEY, "user", "more", token_count=2)
    node = await manager.get_session(KEY)
    assert node is not None and node.total_tokens == 54 and node.total_tokens_fresh is False


async def test_cost_goes_to_its_component_and_the_source_rolls_up(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    node = await manager.record_usage(KEY, cost_usd=0.25, cost_source="provider_billed")
    assert node.cost_source == "provider_billed"
    assert (node.billed_cost_usd, node.estimated_cost_component_usd) == (0.25, 0.0)
    assert (node.total_cost_usd, node.estimated_cost_usd) == (0.25, 0.25)
    assert node.total_tokens_fresh is False  # no tokens were added
    node = await manager.record_usage(KEY, cost_usd=0.5, cost_source="provider_billed")
    assert node.cost_source == "provider_billed" and node.billed_cost_usd == 0.75
    node = await manager.record_usage(
        KEY, input_tokens=10, cost_usd=0.125, cost_source="opensquilla_estimate"
    )
    assert node.cost_source == "mixed"
    assert (node.billed_cost_usd, node.estimated_cost_component_usd) == (0.75, 0.125)
    assert node.total_cost_usd == node.billed_cost_usd + node.estimated_cost_component_usd
    assert node.estimated_cost_usd == node.total_cost_usd == 0.875
    node = await manager.record_usage(KEY, input_tokens=1, cost_source="unavailable")
    assert node.missing_cost_entries == 1 and node.cost_source == "mixed"
    assert node.total_cost_usd == 0.875
    # An int cost is a float in the row.
    node = await manager.record_usage(KEY, cost_usd=1, cost_source="opensquilla_estimate")
    assert type(node.total_cost_usd) is float and node.total_cost_usd == 1.875


@pytest.mark.parametrize(
    ("first", "second", "source"),
    [
        ("unavailable", "unavailable", "unavailable"),
        ("opensquilla_estimate", "opensquilla_estimate", "opensquilla_estimate"),
        ("unavailable", "provider_billed", "mixed"),
        ("provider_billed", "unavailable", "mixed"),
    ],
)
async def test_the_row_source_is_the_one_kind_recorded_else_mixed(
    manager: SessionManager, first: str, second: str, source: str
) -> None:
    await manager.create(KEY)
    for kind in (first, second):
        cost = None if kind == "unavailable" else 0.0
        node = await manager.record_usage(KEY, cost_usd=cost, cost_source=kind)  # type: ignore[arg-type]
    assert node.cost_source == source


async def test_a_reset_zeroes_the_counters_and_usage_goes_on_in_the_new_generation(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.record_usage(KEY, input_tokens=5, cost_usd=0.1, cost_source="provider_billed")
    await manager.reset(KEY)  # through this manager: its cache follows
    node = await manager.record_usage(KEY, output_tokens=3)
    assert (node.input_tokens, node.output_tokens, node.total_tokens) == (0, 3, 3)
    assert node.cost_source == "none" and node.total_cost_usd == 0.0 and node.epoch == 1


async def test_a_reset_by_another_writer_makes_it_stale_and_adds_nothing(
    storage: SessionStorage,
) -> None:
    ours = SessionManager(storage, inject_time_prefix=False)
    theirs = SessionManager(storage, inject_time_prefix=False)
    await ours.create(KEY)
    await ours.record_usage(KEY, input_tokens=1)  # our cache: generation 0
    await theirs.reset(KEY)
    before = await table_snapshot(storage)
    with pytest.raises(StaleEpochError, match="no usage was recorded"):
        await ours.record_usage(KEY, input_tokens=7, cost_usd=1.0, cost_source="provider_billed")
    assert await table_snapshot(storage) == before
    # The stale generation was dropped: the next call reads the current one.
    node = await ours.record_usage(KEY, input_tokens=2)
    assert node.input_tokens == 2 and node.epoch == 1


async def test_a_reset_between_the_read_and_the_update_makes_it_stale(
    storage: SessionStorage, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read and the UPDATE in one transaction: a reset committing between them (on
    PostgreSQL the read takes no lock; SQLite's write transaction keeps every other writer
    out, so there the reset waits and the usage lands first) never gets the usage."""
    reader = SessionManager(storage, inject_time_prefix=False)
    await reader.create(KEY)
    read_done, reset_done = asyncio.Event(), asyncio.Event()

    async def gate() -> None:
        read_done.set()
        if storage.uow.is_postgres:
            await reset_done.wait()

    async with SessionStorage(database) as other:
        resetter = SessionManager(other, inject_time_prefix=False)

        async def reset() -> None:
            await read_done.wait()
            await resetter.reset(KEY)
            reset_done.set()

        with gated_increment(monkeypatch, gate):
            # A fresh manager: no generation cached, so the call reads the row first.
            fresh = SessionManager(storage, inject_time_prefix=False)
            outcome = await asyncio.gather(
                fresh.record_usage(KEY, input_tokens=11), reset(), return_exceptions=True
            )
    node = await reader.storage.get_session(KEY)
    assert node is not None and node.epoch == 1 and node.input_tokens == 0
    if storage.uow.is_postgres:
        assert isinstance(outcome[0], StaleEpochError), outcome
    else:
        assert not isinstance(outcome[0], BaseException), outcome  # landed, then reset


async def test_concurrent_usage_sums_exactly(
    storage: SessionStorage, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks on two storages (two pools; on PostgreSQL two connections and more) record at
    once: on PostgreSQL every transaction is open and has read before any UPDATE runs (a
    barrier inside them); on SQLite, whose write transactions exclude each other, they start
    together (a barrier before the call)."""
    per_storage = 3
    tasks = 2 * per_storage
    await SessionManager(storage).create(KEY)
    postgres = storage.uow.is_postgres
    inside = asyncio.Barrier(tasks)
    before = asyncio.Barrier(tasks)

    async def gate() -> None:
        if postgres:
            await asyncio.wait_for(inside.wait(), 10)

    async with SessionStorage(database) as other:
        managers = [SessionManager(s) for s in (storage, other) for _ in range(per_storage)]

        async def one(manager: SessionManager, n: int) -> None:
            await before.wait()
            await manager.record_usage(
                KEY,
                input_tokens=n,
                output_tokens=2 * n,
                cache_read=1,
                cost_usd=0.5,
                cost_source="provider_billed" if n % 2 else "opensquilla_estimate",
            )

        with gated_increment(monkeypatch, gate) as entered:
            await asyncio.gather(*(one(m, n) for n, m in enumerate(managers, start=1)))
        assert len(entered) == tasks
    node = await storage.get_session(KEY)
    assert node is not None
    total = sum(range(1, tasks + 1))
    assert (node.input_tokens, node.output_tokens) == (total, 2 * total)
    assert node.total_tokens == 3 * total and node.cache_read == tasks
    assert node.billed_cost_usd == 0.5 * per_storage
    assert node.estimated_cost_component_usd == 0.5 * per_storage
    assert node.total_cost_usd == node.estimated_cost_usd == 0.5 * tasks
    assert node.cost_source == "mixed"


async def test_a_full_counter_is_refused_whole(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.update(KEY, input_tokens=INT64_MAX - 1, total_tokens=10)
    before = await table_snapshot(manager.storage)
    with pytest.raises(InvalidInputError, match=r"input_tokens.*nothing was written"):
        await manager.record_usage(KEY, input_tokens=2, output_tokens=1)
    await manager.update(KEY, input_tokens=0, total_tokens=INT64_MAX)
    before = await table_snapshot(manager.storage)
    with pytest.raises(InvalidInputError, match="total_tokens"):
        await manager.record_usage(KEY, output_tokens=1)
    assert await table_snapshot(manager.storage) == before
    await manager.update(KEY, total_tokens=0, total_cost_usd=1.7e308)
    before = await table_snapshot(manager.storage)
    with pytest.raises(InvalidInputError, match="total_cost_usd"):
        await manager.record_usage(KEY, cost_usd=1e308, cost_source="opensquilla_estimate")
    assert await table_snapshot(manager.storage) == before
    # Exactly to the ceiling is room enough.
    node = await manager.record_usage(KEY, output_tokens=INT64_MAX)
    assert node.total_tokens == INT64_MAX


BAD_ARGUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"input_tokens": -1}, "input_tokens"),
    ({"output_tokens": True}, "output_tokens"),
    ({"cache_read": 1.0}, "cache_read"),
    ({"cache_write": "3"}, "cache_write"),
    ({"input_tokens": 2**63}, "input_tokens"),
    ({"input_tokens": INT64_MAX, "output_tokens": 1}, "total_tokens"),
    ({"cost_usd": math.nan, "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": math.inf, "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": -0.01, "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": "0.1", "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": False, "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": 10**400, "cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": 0.1}, "cost_source"),
    ({"cost_usd": 0.1, "cost_source": "billed"}, "cost_source"),
    ({"cost_source": "mixed"}, "cost_source"),
    ({"cost_source": "none"}, "cost_source"),
    ({"cost_source": ["provider_billed"]}, "cost_source"),
    ({"cost_source": "provider_billed"}, "cost_usd"),
    ({"cost_usd": 0.1, "cost_source": "unavailable"}, "unavailable"),
]


@pytest.mark.parametrize(("arguments", "named"), BAD_ARGUMENTS)
async def test_bad_arguments_are_refused_before_anything_is_written(
    manager: SessionManager, arguments: dict[str, Any], named: str
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(manager.storage)
    with pytest.raises(InvalidInputError, match=named) as raised:
        await manager.record_usage(KEY, **arguments)
    assert "nothing was written" in str(raised.value) or "must be" in str(raised.value)
    assert await table_snapshot(manager.storage) == before


async def test_a_missing_session_is_not_found(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError):
        await manager.record_usage("agent:main:absent", input_tokens=1)
    await manager.create(KEY)
    await manager.record_usage(KEY, input_tokens=1)
    await manager.storage.delete_session(KEY)  # behind the manager's back: its cache stays
    with pytest.raises(SessionNotFoundError):
        await manager.record_usage(KEY, input_tokens=1)
