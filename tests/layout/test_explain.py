"""On a partitioned database every statement the store runs for one session's operation
touches one partition (docs/scaling.md#the-partitioned-layout): the statements are captured
with a ``before_cursor_execute`` listener and each is planned with ``EXPLAIN (FORMAT JSON)``
and its own parameters; the partitions named in the plan are counted."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import layout, migrate
from opensquilla.session.usecases.overview import unmigrated

pytestmark = pytest.mark.postgres_only

KEY = "agent:main:explain"
PARTITION = re.compile(r"^(?P<table>[a-z_]+)_p(?P<n>\d+)$")
PLANNED = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def _relations(plan: Any) -> Iterator[str]:
    if isinstance(plan, dict):
        name = plan.get("Relation Name")
        if isinstance(name, str):
            yield name
        for value in plan.values():
            yield from _relations(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _relations(value)


async def _partitions_per_statement(
    target: str, manager: SessionManager, storage: SessionStorage, op: Callable[[], Awaitable[Any]]
) -> list[tuple[str, set[str]]]:
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if PLANNED.match(statement):
            captured.append((statement, parameters))

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        await op()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    dsn = make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    found = []
    try:
        for statement, parameters in captured:
            plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *(parameters or ()))
            names = {n for n in _relations(json.loads(plan)) if PARTITION.match(n)}
            found.append((statement, {PARTITION.match(n)["n"] for n in names}))  # type: ignore[index]
    finally:
        await conn.close()
    assert found, "no statement captured"
    return found


PARTITIONS = 8


@pytest.fixture
async def partitioned(empty_database: str) -> str:
    async with unmigrated(empty_database) as storage:
        await migrate.upgrade(storage.engine, layout=layout.Layout(PARTITIONS))
    return empty_database


OPERATIONS: dict[str, Callable[[SessionManager], Awaitable[Any]]] = {
    "append": lambda m: m.append_message(KEY, "user", "one more"),
    "transcript page": lambda m: m.get_canonical_transcript_page(KEY, limit=3),
    "context view": lambda m: m.get_context_view(KEY, max_tokens=10_000),
    "recent tail": lambda m: m.get_recent_transcript(KEY, 3),
    "transcript lines": lambda m: m.get_transcript_lines(KEY, summary=True),
    "transcript lines, metadata, tail": lambda m: m.get_transcript_lines(
        KEY, 3, summary=True, metadata_only=True
    ),
    "compaction": lambda m: m.persist_compaction_result(
        KEY, "summary", [{"role": "user", "content": "m5"}]
    ),
    "reset": lambda m: m.reset(KEY),
}


async def _history(manager: SessionManager) -> None:
    await manager.create(KEY)
    for n in range(6):
        await manager.append_message(KEY, "user" if n % 2 == 0 else "assistant", f"m{n}")


@pytest.mark.parametrize("name", list(OPERATIONS))
async def test_one_sessions_statements_each_touch_one_partition(
    partitioned: str, name: str
) -> None:
    async with SessionStorage(partitioned) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _history(manager)
        found = await _partitions_per_statement(
            partitioned, manager, storage, lambda: OPERATIONS[name](manager)
        )
    wide = [(" ".join(s.split())[:160], sorted(p)) for s, p in found if len(p) > 1]
    assert wide == [], f"{name}: statements touching more than one partition: {wide}"


async def _partition_of(target: str, key: str, partitions: int) -> str:
    """The partition number (``<table>_p<n>``) that holds ``key``'s rows in every table."""
    dsn = make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        for remainder in range(partitions):
            held = await conn.fetchval(
                "SELECT satisfies_hash_partition('sessions'::regclass, $1, $2, $3::text)",
                partitions,
                remainder,
                key,
            )
            if held:
                return str(remainder)
    finally:
        await conn.close()
    raise AssertionError(f"no partition holds {key!r}")


async def _fork_key(target: str, *, same_partition: bool) -> tuple[str, str]:
    """A child key whose partition is (``same_partition``) or is not the parent's, and the
    parent's partition."""
    parent = await _partition_of(target, KEY, PARTITIONS)
    for n in range(200):
        child = f"agent:main:explain-fork-{n}"
        if (await _partition_of(target, child, PARTITIONS) == parent) == same_partition:
            return child, parent
    raise AssertionError("no candidate child key")


# A full fork is one transaction of INSERT ... SELECT statements from the parent's key into
# the child's: each touches the parent's partition and the child's, and nothing else (under
# Citus the two shards of a cross-shard INSERT ... SELECT). The summaries' copy still selects
# by session_id alone (db/repos/summaries.py): strict, so the mark goes when it is keyed.
@pytest.mark.parametrize("same_partition", [False, True], ids=["two partitions", "one partition"])
async def test_a_forks_statements_touch_the_parents_and_the_childs_partitions(
    partitioned: str, same_partition: bool
) -> None:
    child, parent_partition = await _fork_key(partitioned, same_partition=same_partition)
    child_partition = await _partition_of(partitioned, child, PARTITIONS)
    expected = {parent_partition, child_partition}
    assert len(expected) == (1 if same_partition else 2)
    async with SessionStorage(partitioned) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _history(manager)
        await manager.persist_compaction_result(KEY, "summary", [{"role": "user", "content": "m5"}])
        found = await _partitions_per_statement(
            partitioned,
            manager,
            storage,
            lambda: manager.branch(KEY, child, fork_transcript=True),
        )
        parents = await manager.get_canonical_transcript(KEY)
        childs = await manager.get_canonical_transcript(child)
    # The compaction archived m0-m4 (its summary and the archive are copied too).
    assert [e.content for e in parents] == [f"m{n}" for n in range(6)]
    assert [e.content for e in childs] == [e.content for e in parents]
    elsewhere = [(" ".join(s.split())[:160], sorted(p)) for s, p in found if not p <= expected]
    assert elsewhere == [], f"fork: statements touching other partitions: {elsewhere}"
    touched = set().union(*(p for _, p in found))
    assert touched == expected
