"""``record_usage`` on its two paths (``uow.add_usage_in_one_statement``): one ``UPDATE ...
RETURNING`` in autocommit on the pool's DBAPI connection while nothing listens for
statements, through a ``Connection`` once a listener is attached. The same rows either way
(every counter, the floats as floats), the same refusals (a moved generation, a full
counter) with nothing written, and one statement per call on the cached path."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import uow_writes
from opensquilla.session.errors import InvalidInputError, StaleEpochError
from opensquilla.session.models import INT64_MAX
from tests.storage.direct_paths import listening

KEY = "agent:main:direct-usage"

# Three calls of different shapes: tokens with a billed cost, an estimate of zero cost
# (no room condition for it), and cache tokens with no cost known.
CALLS: list[dict[str, Any]] = [
    {
        "input_tokens": 1200,
        "output_tokens": 300,
        "cache_read": 800,
        "cost_usd": 0.0042,
        "cost_source": "provider_billed",
    },
    {"cost_usd": 0, "cost_source": "opensquilla_estimate"},
    {"cache_write": 64, "cost_source": "unavailable"},
]
COUNTERS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cache_read",
    "cache_write",
    "missing_cost_entries",
    "total_cost_usd",
    "estimated_cost_usd",
    "billed_cost_usd",
    "estimated_cost_component_usd",
    "cost_source",
    "total_tokens_fresh",
)


def _direct_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each increment run on the pool's DBAPI connection returned."""
    returned: list[int] = []
    original = uow_writes.rows_and_keys

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows, keys = original(*args, **kwargs)
        returned.append(len(rows))
        return rows, keys

    monkeypatch.setattr(uow_writes, "rows_and_keys", counted)
    return returned


def _counters(node: Any) -> dict[str, Any]:
    return {name: getattr(node, name) for name in COUNTERS}


async def _record_all(manager: SessionManager, key: str) -> list[dict[str, Any]]:
    return [_counters(await manager.record_usage(key, **call)) for call in CALLS]


async def test_both_paths_return_the_same_rows(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct_key, watched_key = KEY + "-a", KEY + "-b"
    await manager.create(direct_key)
    await manager.create(watched_key)
    returned = _direct_calls(monkeypatch)
    direct = await _record_all(manager, direct_key)
    seen: list[str] = []
    with listening(storage, "before_cursor_execute", lambda *a: seen.append(a[2])):
        watched = await _record_all(manager, watched_key)
    assert returned == [1, 1, 1]  # the watched calls never took the direct path
    # One statement a call (the generation cached by the create): the UPDATE alone.
    assert [s.split(None, 2)[:2] for s in seen] == [["UPDATE", "sessions"]] * len(CALLS)
    assert direct == watched
    assert direct[-1]["cost_source"] == "mixed"
    assert direct[-1]["total_tokens"] == 1500 and direct[-1]["missing_cost_entries"] == 1
    for row in direct:  # REAL columns read as floats on both backends (0.0, not 0)
        assert all(type(row[name]) is float for name in COUNTERS if name.endswith("_usd"))
    stored = await manager.get_session(direct_key)
    assert stored is not None and _counters(stored) == direct[-1]


@pytest.mark.parametrize("watched", [False, True], ids=["direct", "connection"])
async def test_a_reset_since_the_cached_generation_is_refused_with_nothing_added(
    manager: SessionManager, storage: SessionStorage, watched: bool
) -> None:
    await manager.create(KEY)
    await manager.record_usage(KEY, input_tokens=5)  # the generation is now cached
    other = SessionManager(storage)
    await other.reset(KEY)
    seen: list[str] = []
    listener = listening(storage, "before_cursor_execute", lambda *a: seen.append(a[2]))
    with (
        listener if watched else contextlib.nullcontext(),
        pytest.raises(StaleEpochError, match="no usage was recorded"),
    ):
        await manager.record_usage(KEY, input_tokens=7, cost_source="unavailable")
    assert bool(seen) is watched
    node = await other.get_session(KEY)
    assert node is not None and node.input_tokens == 0 and node.missing_cost_entries == 0
    # The cached generation was dropped: the next call reads the current one and counts.
    after = await manager.record_usage(KEY, input_tokens=7)
    assert after.input_tokens == 7 and after.epoch == node.epoch


@pytest.mark.parametrize("watched", [False, True], ids=["direct", "connection"])
async def test_a_counter_without_room_is_refused_with_nothing_added(
    manager: SessionManager, storage: SessionStorage, watched: bool
) -> None:
    await manager.create(KEY)
    await manager.record_usage(KEY, cache_read=INT64_MAX - 1, output_tokens=1)
    listener = listening(storage, "before_cursor_execute", lambda *a: None)
    with (
        listener if watched else contextlib.nullcontext(),
        pytest.raises(InvalidInputError, match="cache_read"),
    ):
        await manager.record_usage(KEY, cache_read=2, output_tokens=5)
    node = await manager.get_session(KEY)
    assert node is not None and node.cache_read == INT64_MAX - 1 and node.output_tokens == 1
