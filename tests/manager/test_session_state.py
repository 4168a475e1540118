"""Session state (issue 28, item 5): ``get_state`` / ``update_state`` with a compare-and-set
revision, what reset, fork and deletion do with it, and the races (forced: one writer holds
its transaction open while the other arrives)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.util import await_only

from opensquilla.session import (
    SessionManager,
    SessionNotFoundError,
    SessionState,
    SessionStorage,
    StaleStateError,
)
from opensquilla.session.db import uow_writes
from opensquilla.session.db.repos.states import session_states
from opensquilla.session.errors import InvalidInputError, SessionStoreError
from opensquilla.session.models import state as state_model
from opensquilla.session.usecases import state as state_usecase
from tests.storage.direct_paths import force_path

KEY = "agent:main:stateful"
EXACT: dict[str, Any] = {
    "zeta": 1,
    "alpha": {"nested": [1, 2.5, None, True, {"y": "x", "b": []}]},
    "ünïcode ✓": "日本語",
    "nul": "a\x00b",
    "marker": "\ufdd0 \\0",
    "huge": 2**70,
    "float": 1e16,
    "zero": -0.0,
}


def _same(got: Any, want: Any) -> None:
    """Equal, key order and the sign of a zero included (``==`` ignores both)."""
    assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)


async def _state_rows(storage: SessionStorage) -> list[tuple[Any, ...]]:
    async with storage.engine.connect() as conn:
        query = sa.select(session_states).order_by(session_states.c.session_key)
        return [tuple(row) for row in await conn.execute(query)]


@pytest.fixture
async def other(database: str) -> AsyncIterator[SessionManager]:
    """A second manager over its own storage (its own pool) on the same database: what
    another process looks like to the store."""
    async with SessionStorage(database) as storage:
        yield SessionManager(storage, inject_time_prefix=False)


# -- reads and updates ---------------------------------------------------------------------


async def test_a_missing_session_is_not_found_and_nothing_is_written(
    manager: SessionManager,
) -> None:
    with pytest.raises(SessionNotFoundError, match="agent:main:absent"):
        await manager.get_state("agent:Main:absent")
    with pytest.raises(SessionNotFoundError, match="nothing was written"):
        await manager.update_state("agent:main:absent", {"a": 1})
    assert await _state_rows(manager.storage) == []


async def test_updates_merge_shallowly_in_order_and_count_revisions(
    manager: SessionManager,
) -> None:
    node = await manager.create(KEY)
    fresh = await manager.get_state(KEY)
    assert fresh == SessionState(
        session_key=KEY, session_id=node.session_id, state={}, revision=0, updated_at=None
    )
    assert await manager.update_state(KEY, {"a": 1, "b": {"x": 1}}) == 1
    assert await manager.update_state("agent:MAIN:stateful", {"c": 3, "a": 2}) == 2
    got = await manager.get_state(KEY)
    _same(got.state, {"a": 2, "b": {"x": 1}, "c": 3})  # a keeps its place, c goes last
    assert got.revision == 2 and got.updated_at is not None
    # Shallow: a nested object is replaced whole; None is a value, remove drops a key.
    assert await manager.update_state(KEY, {"b": {"y": 2}, "n": None}, remove=["c", "gone"]) == 3
    _same((await manager.get_state(KEY)).state, {"a": 2, "b": {"y": 2}, "n": None})
    # An empty update is an update: the revision moves (a compare-and-set "touch").
    assert await manager.update_state(KEY, {}) == 4
    assert await manager.update_state(KEY, {}, remove=("a", "b", "n")) == 5
    assert (await manager.get_state(KEY)).state == {}


async def test_state_round_trips_exactly_as_json_text(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.update_state(KEY, EXACT)
    _same((await manager.get_state(KEY)).state, EXACT)
    [row] = await _state_rows(manager.storage)
    async with manager.storage.engine.connect() as conn:
        text = (
            await conn.execute(sa.select(sa.type_coerce(session_states.c.state, sa.Text)))
        ).scalar_one()
    assert text.startswith('{"zeta":1,"alpha":{"nested":[1,2.5,null,true,')
    assert row[3] == 1  # revision


async def test_a_compare_and_set_refuses_a_moved_revision_and_writes_nothing(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    assert await manager.update_state(KEY, {"a": 1}, expected_revision=0) == 1
    assert await manager.update_state(KEY, {"a": 2}, 1) == 2
    before = await _state_rows(manager.storage)
    with pytest.raises(StaleStateError) as raised:
        await manager.update_state(KEY, {"a": 3}, expected_revision=1, remove=["b"])
    error = raised.value
    assert (error.target, error.expected_revision, error.actual_revision) == (
        f"session {KEY!r}",
        1,
        2,
    )
    assert isinstance(error, SessionStoreError)
    assert KEY in str(error) and "nothing was written" in str(error)
    assert await _state_rows(manager.storage) == before
    with pytest.raises(StaleStateError):
        await manager.update_state(KEY, {}, expected_revision=7)
    assert await _state_rows(manager.storage) == before


@pytest.mark.parametrize(
    ("changes", "remove", "expected", "message"),
    [
        ([("a", 1)], (), None, "changes must be a dict"),
        ({1: "a"}, (), None, "key of type int"),
        ({"a": {"b": {2: 1}}}, (), None, "key of type int"),
        ({"a": float("nan")}, (), None, "not JSON"),
        ({"a": (1, 2)}, (), None, "not a JSON value"),
        ({"a": {1, 2}}, (), None, "not a JSON value"),
        ({"a": b"x"}, (), None, "not a JSON value"),
        ({"a": "\ud800"}, (), None, "unpaired surrogate"),
        ({"\udfff": 1}, (), None, "unpaired surrogate"),
        ({"a": 1}, "a", None, "remove must be a list"),
        ({"a": 1}, [1], None, "remove"),
        ({"a": 1}, ["a"], None, "changes sets too"),
        ({}, (), -1, "expected_revision"),
        ({}, (), True, "expected_revision"),
        ({}, (), "1", "expected_revision"),
        ({}, (), 2**63, "expected_revision"),
        ({}, (), 1.0, "expected_revision"),
    ],
)
async def test_hostile_arguments_are_refused_with_nothing_written(
    manager: SessionManager, changes: Any, remove: Any, expected: Any, message: str
) -> None:
    await manager.create(KEY)
    await manager.update_state(KEY, {"kept": True})
    before = await _state_rows(manager.storage)
    with pytest.raises(InvalidInputError, match=message):
        await manager.update_state(KEY, changes, expected, remove=remove)
    assert await _state_rows(manager.storage) == before


async def test_depth_and_size_are_bounded(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    deep: Any = 1
    for _ in range(state_model.MAX_STATE_DEPTH):
        deep = [deep]
    with pytest.raises(InvalidInputError, match="nested more than"):
        await manager.update_state(KEY, {"deep": deep})
    await manager.update_state(KEY, {"deep": deep[0]})  # one level less fits
    monkeypatch.setattr(state_model, "MAX_STATE_BYTES", 1000)
    monkeypatch.setattr(state_usecase, "MAX_STATE_BYTES", 1000)
    await manager.update_state(KEY, {}, remove=["deep"])
    with pytest.raises(InvalidInputError, match="larger than 1000 bytes"):
        await manager.update_state(KEY, {"big": "x" * 1000})
    assert await manager.update_state(KEY, {"one": "x" * 600}) == 3
    before = await _state_rows(manager.storage)
    with pytest.raises(InvalidInputError, match="would be larger than 1000 bytes"):
        await manager.update_state(KEY, {"two": "y" * 600})  # each fits, the merge does not
    assert await _state_rows(manager.storage) == before


# -- races -----------------------------------------------------------------------------------


@pytest.fixture
def held_state_write(monkeypatch: pytest.MonkeyPatch) -> dict[str, asyncio.Event]:
    """Once ``armed`` is set, the next state update (of any storage) waits, its read done
    and its compare-and-set not yet sent, until ``release`` is set; ``entered`` tells it
    is there. On both paths the update decides its write in SQLAlchemy's greenlet, which
    awaits the event there."""
    events = {"armed": asyncio.Event(), "entered": asyncio.Event(), "release": asyncio.Event()}
    original = uow_writes.DirectWrites.compare_and_set_state

    async def compare_and_set_state(
        self: Any, row: Any, next_write: Any, **kwargs: Any
    ) -> int | None:
        def held(found: Any) -> Any:
            if events["armed"].is_set():
                events["armed"].clear()
                events["entered"].set()
                await_only(events["release"].wait())
            return next_write(found)

        return await original(self, row, held, **kwargs)

    monkeypatch.setattr(uow_writes.DirectWrites, "compare_and_set_state", compare_and_set_state)
    return events


@pytest.fixture(params=[True, False], ids=["direct", "connection"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both paths of an update: the pool connection's, and the ``Connection``'s forced."""
    force_path(monkeypatch, request.param)
    return bool(request.param)


@pytest.mark.parametrize("first_write", [True, False], ids=["insert", "update"])
async def test_two_concurrent_compare_and_sets_of_one_revision_exactly_one_wins(
    manager: SessionManager,
    other: SessionManager,
    held_state_write: dict[str, asyncio.Event],
    first_write: bool,
    path: bool,
) -> None:
    """Both read the same revision; the first's write is held until the second's has
    committed (no lock makes the second wait): the first's compare-and-set then finds the
    revision moved, reads again and refuses, naming the revision it found. With and
    without a state row already (the first write of a generation is an INSERT)."""
    await manager.create(KEY)
    base = 0 if first_write else await manager.update_state(KEY, {"who": "warm"})
    held_state_write["armed"].set()
    first = asyncio.ensure_future(manager.update_state(KEY, {"who": "first"}, base))
    await asyncio.wait_for(held_state_write["entered"].wait(), 5)  # first has read `base`
    assert await other.update_state(KEY, {"who": "second"}, base) == base + 1
    held_state_write["release"].set()
    with pytest.raises(StaleStateError) as raised:
        await first
    assert (raised.value.expected_revision, raised.value.actual_revision) == (base, base + 1)
    got = await manager.get_state(KEY)
    assert (got.state["who"], got.revision) == ("second", base + 1)


@pytest.mark.parametrize("first_write", [True, False], ids=["insert", "update"])
async def test_two_concurrent_scope_compare_and_sets_of_one_revision_exactly_one_wins(
    manager: SessionManager,
    other: SessionManager,
    held_state_write: dict[str, asyncio.Event],
    first_write: bool,
    path: bool,
) -> None:
    """As for a session's state: a scope's update is a read and a compare-and-set, and the
    one held between them refuses once another committed."""
    base = 0 if first_write else await manager.update_scope_state("user", "u1", {"w": 0})
    held_state_write["armed"].set()
    first = asyncio.ensure_future(manager.update_scope_state("user", "u1", {"w": 1}, base))
    await asyncio.wait_for(held_state_write["entered"].wait(), 5)
    assert await other.update_scope_state("user", "u1", {"w": 2}, base) == base + 1
    held_state_write["release"].set()
    with pytest.raises(StaleStateError) as raised:
        await first
    assert (raised.value.expected_revision, raised.value.actual_revision) == (base, base + 1)
    got = await manager.get_scope_state("user", "u1")
    assert (got.state, got.revision) == ({"w": 2}, base + 1)


async def test_concurrent_updates_without_a_revision_lose_nothing(
    manager: SessionManager,
    other: SessionManager,
    held_state_write: dict[str, asyncio.Event],
    path: bool,
) -> None:
    """The first update is held after its read while three others commit: its
    compare-and-set finds the revision moved, reads again and merges into what they wrote;
    two more follow. Every change is kept, every revision handed out once."""
    await manager.create(KEY)
    held_state_write["armed"].set()
    first = asyncio.ensure_future(manager.update_state(KEY, {"m0": 0}))
    await asyncio.wait_for(held_state_write["entered"].wait(), 5)
    rest = [await other.update_state(KEY, {f"m{n}": n}) for n in range(1, 4)]
    assert rest == [1, 2, 3] and not first.done()
    held_state_write["release"].set()
    later = [asyncio.ensure_future(manager.update_state(KEY, {f"m{n}": n})) for n in (4, 5)]
    revisions = [*rest, *await asyncio.gather(first, *later)]
    assert sorted(revisions) == list(range(1, 7))
    got = await manager.get_state(KEY)
    assert got.revision == 6 and got.state == {f"m{n}": n for n in range(6)}


# -- generations: reset, a whole-row upsert, fork, delete ----------------------------------


async def test_a_reset_starts_an_empty_state_above_every_old_revision(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.update_state(KEY, {"a": 1})
    await manager.update_state(KEY, {"b": 2})
    renewed = await manager.reset(KEY)
    got = await manager.get_state(KEY)
    assert (got.session_id, got.state, got.revision) == (renewed.session_id, {}, 3)
    with pytest.raises(StaleStateError):  # read before the reset: refused
        await manager.update_state(KEY, {"late": True}, expected_revision=2)
    assert await manager.update_state(KEY, {"c": 3}, expected_revision=3) == 4
    # A session that never had a state: the reset still moves it past 0.
    await manager.create("agent:main:plain")
    node, _ = await manager.apply_intent("agent:main:plain", "reset_same_key")
    plain = await manager.get_state("agent:main:plain")
    assert (plain.session_id, plain.state, plain.revision) == (node.session_id, {}, 1)
    with pytest.raises(StaleStateError):
        await manager.update_state("agent:main:plain", {"x": 1}, expected_revision=0)


async def test_a_row_of_another_generation_reads_as_empty_one_revision_on(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A generation change the store did not make (a whole-row upsert of a new session id,
    as a prepared reset applied by its caller): the old row is not the new generation's."""
    node = await manager.create(KEY)
    await manager.update_state(KEY, {"old": True})
    await manager.update_state(KEY, {"older": True})
    plan = await manager.prepare_intent(KEY, "reset_same_key")
    await storage.upsert_session(plan.node)
    assert plan.node.session_id != node.session_id
    got = await manager.get_state(KEY)
    assert (got.session_id, got.state, got.revision) == (plan.node.session_id, {}, 3)
    with pytest.raises(StaleStateError):
        await manager.update_state(KEY, {}, expected_revision=2)
    assert await manager.update_state(KEY, {"new": 1}, expected_revision=3) == 4
    got = await manager.get_state(KEY)
    assert (got.state, got.revision) == ({"new": 1}, 4)
    # A reset then moves past it again.
    await manager.reset(KEY)
    assert (await manager.get_state(KEY)).revision == 5


async def test_a_fork_copies_the_parent_state_at_revision_0(manager: SessionManager) -> None:
    parent = await manager.create(KEY)
    await manager.append_message(KEY, "user", "one")
    entry = await manager.append_message(KEY, "user", "two")
    await manager.update_state(KEY, EXACT)
    await manager.update_state(KEY, {"more": 1})
    full = await manager.branch(KEY, "agent:main:full", fork_transcript=True)
    prefix = await manager.branch(
        KEY, "agent:main:prefix", fork_transcript=True, fork_before_message_id=entry.message_id
    )
    plain = await manager.branch(KEY, "agent:main:plain")
    for child in (full, prefix):
        got = await manager.get_state(child.session_key)
        assert (got.session_id, got.revision) == (child.session_id, 0)
        _same(got.state, {**EXACT, "more": 1})
    assert (await manager.get_state(plain.session_key)).state == {}
    # The copies are the child's own: updating one leaves the parent as it was.
    assert await manager.update_state("agent:main:full", {"more": 2}, 0) == 1
    parent_state = await manager.get_state(KEY)
    assert parent_state.revision == 2 and parent_state.state["more"] == 1
    assert parent_state.session_id == parent.session_id


async def test_deleting_pruning_and_capping_remove_the_state_rows(
    manager: SessionManager,
) -> None:
    for name in ("a", "b", "c", "d"):
        await manager.create(f"agent:main:{name}")
        await manager.update_state(f"agent:main:{name}", {"name": name})
    assert await manager.delete("agent:main:a")
    keys = [row[0] for row in await _state_rows(manager.storage)]
    assert keys == ["agent:main:b", "agent:main:c", "agent:main:d"]
    assert await manager.cap_entries(1) == 2
    assert [row[0] for row in await _state_rows(manager.storage)] == ["agent:main:d"]
    await asyncio.sleep(0.01)
    assert await manager.prune_stale(1) == 1
    assert await _state_rows(manager.storage) == []
    # A session created again under a deleted key starts from nothing.
    await manager.create("agent:main:a")
    assert (await manager.get_state("agent:main:a")).revision == 0
