"""Revision 0011: the order floor (docs/semantics.md#order) and the pop read one session's
live rows from the end of ``idx_transcript_session_key_cursor`` (``session_key, session_id,
created_at, id``), whatever the planner's statistics say; a delete by row id reads the one
row by its key and id.

A long session (2,500 live rows) among 40 short ones, in tables whose statistics do not know
it: never gathered (a new database; on PostgreSQL autovacuum is off on the test's tables, so
none are gathered meanwhile), or gathered while every session was short and not since.
The statements the store runs for an append, a batch, a pop and a delete by row id are
captured and planned with their own values: on PostgreSQL as a custom plan and as the
generic plan a prepared statement settles on, on SQLite with ``EXPLAIN QUERY PLAN`` (the
appends' own floor read, the path without RETURNING; the one-statement appends floor inside
revision 0009's trigger). Each read of ``transcript_entries`` is named by how it reads:
``newest first`` (a backward range of the new index, both equalities in its condition),
``by id`` (the primary key's one entry). No plan may sort the session's rows.

Without the index PostgreSQL planned the floor as a ``BitmapAnd`` of the key's index and
``idx_transcript_session_cursor`` and then a top-N sort of every row of the generation
(O(n) per append), and these tests fail. Plans are read,
nothing is timed."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos import fenced_append
from tests.conftest import Backend

LONG = "agent:main:floor-long"
LONG_ROWS = 2_500
SHORT_SESSIONS = 40
CHUNK = 500

# PostgreSQL names a partition's copy of an index after the partition (revision 0011).
NEWEST_INDEX = re.compile(
    r"^(idx_transcript_session_key_cursor|transcript_entries_p\d+_session_key_cursor_idx)$"
)
PRIMARY_KEY = re.compile(r"^(pk_transcript_entries|transcript_entries_p\d+_pkey)$")
LIVE = re.compile(r"^transcript_entries(_p\d+)?$")
SORTS = {"Sort", "Incremental Sort"}
PLANNED = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)

Operation = Callable[[SessionManager, int], Awaitable[Any]]

OPERATIONS: dict[str, Operation] = {
    "append": lambda m, _: m.append_message(LONG, "user", "one more"),
    "batch": lambda m, _: m.append_messages(
        LONG, [{"role": "user", "content": f"batched {n}"} for n in range(5)]
    ),
    "pop": lambda m, _: m.pop_message(LONG),
    "delete by id": lambda m, row_id: m.delete_entry(LONG, row_id),
}
# What each operation's statements read of transcript_entries, in plan order.
EXPECTED_READS = {
    "append": ["newest first"],
    "batch": ["newest first"],
    "pop": ["newest first", "by id"],
    "delete by id": ["by id"],
}
SCENARIOS = ["never analyzed", "analyzed short"]


async def _history(storage: SessionStorage, scenario: str) -> int:
    """The sessions (``analyzed short``: statistics gathered before the long one grew);
    a live row id of the long session's, in its middle."""
    manager = SessionManager(storage, inject_time_prefix=False)
    for n in range(SHORT_SESSIONS):
        key = f"agent:main:floor-short-{n}"
        await manager.create(key)
        await manager.append_messages(key, [{"role": "user", "content": f"s{i}"} for i in range(3)])
    await manager.create(LONG)
    await manager.append_messages(LONG, [{"role": "user", "content": "l"} for _ in range(3)])
    if scenario == "analyzed short":
        async with storage.engine.begin() as conn:
            table = "transcript_entries" if storage.engine.dialect.name == "postgresql" else ""
            await conn.execute(sa.text(f"ANALYZE {table}"))
    for at in range(0, LONG_ROWS, CHUNK):
        entries = [{"role": "user", "content": f"m{at + n}"} for n in range(CHUNK)]
        await manager.append_messages(LONG, entries)
    live = await manager.get_transcript(LONG)
    assert len(live) == LONG_ROWS + 3
    middle = live[len(live) // 2].id
    assert middle is not None
    return middle


async def _captured(storage: SessionStorage, name: str, row_id: int) -> list[tuple[str, Any]]:
    """The statements (and their values) the store ran for operation ``name``."""
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if PLANNED.match(statement):
            captured.append((statement, parameters))

    engine = storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        done = await OPERATIONS[name](SessionManager(storage, inject_time_prefix=False), row_id)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert done, f"{name} did nothing"
    return captured


# -- PostgreSQL -----------------------------------------------------------------------


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            yield from _nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _nodes(value)


def _sorted_rows(node: dict[str, Any]) -> Iterator[str]:
    """The live-table relations whose rows ``node`` itself consumes (its input, not the
    InitPlans and SubPlans hung on it)."""
    for child in node.get("Plans", ()):
        if child.get("Parent Relationship") in ("InitPlan", "SubPlan"):
            continue
        if LIVE.match(child.get("Relation Name", "")) and child["Node Type"] != "ModifyTable":
            yield child["Relation Name"]
        yield from _sorted_rows(child)


def _pg_reads(plan: Any) -> list[str]:
    """How each node of ``plan`` reads ``transcript_entries``, in plan order (a sort of its
    rows is one more entry, which no expected list holds)."""
    reads = []
    for node in _nodes(plan):
        if node["Node Type"] in SORTS:
            reads += [f"{node['Node Type']} of {name}" for name in _sorted_rows(node)]
        if not LIVE.match(node.get("Relation Name", "")) or node["Node Type"] == "ModifyTable":
            continue
        index = str(node.get("Index Name", ""))
        scan = node["Node Type"] in ("Index Scan", "Index Only Scan")
        if scan and NEWEST_INDEX.match(index) and node["Scan Direction"] == "Backward":
            reads.append("newest first")
        elif scan and PRIMARY_KEY.match(index) and "id = " in node.get("Index Cond", ""):
            reads.append("by id")
        else:
            reads.append(f"{node['Node Type']} {index}".strip())
    return reads


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    assert isinstance(value, str), type(value)
    return "'" + value.replace("'", "''") + "'"


async def _pg_plans(target: str, statement: str, parameters: Any) -> dict[str, Any]:
    """The statement's custom and generic plans (``EXPLAIN EXECUTE`` of it prepared, with
    its values written out: EXECUTE takes no bound values); nothing is run."""
    dsn = make_url(target).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    values = ", ".join(_literal(v) for v in parameters or ())
    plans = {}
    try:
        await conn.execute(f"PREPARE floor_plan AS {statement}")
        for mode in ("force_custom_plan", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            shown = await conn.fetchval(
                f"EXPLAIN (FORMAT JSON) EXECUTE floor_plan{f'({values})' if values else ''}"
            )
            plans[mode] = json.loads(shown)
    finally:
        await conn.close()
    return plans


async def _autovacuum_off(storage: SessionStorage) -> None:
    """No statistics gathered behind the test's back: autovacuum off on the live table (on
    each partition of a partitioned one, which is where it would run)."""
    async with storage.engine.begin() as conn:
        partitions = list(
            (
                await conn.execute(
                    sa.text(
                        "SELECT inhrelid::regclass::text FROM pg_inherits "
                        "WHERE inhparent = 'transcript_entries'::regclass"
                    )
                )
            ).scalars()
        )
        for table in partitions or ["transcript_entries"]:
            await conn.execute(sa.text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))


@pytest.mark.postgres_only
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_postgres_reads_the_floor_from_the_end_of_the_index(
    backend: Backend, empty_database: str, scenario: str
) -> None:
    async with SessionStorage(empty_database, layout=backend.layout) as storage:
        await _autovacuum_off(storage)
        row_id = await _history(storage, scenario)
        found: dict[tuple[str, str], list[str]] = {}
        for name in OPERATIONS:
            for statement, parameters in await _captured(storage, name, row_id):
                for mode, plan in (await _pg_plans(empty_database, statement, parameters)).items():
                    found.setdefault((name, mode), []).extend(_pg_reads(plan))
    expected = {
        (name, mode): reads
        for name, reads in EXPECTED_READS.items()
        for mode in ("force_custom_plan", "force_generic_plan")
    }
    assert found == expected


# -- SQLite ---------------------------------------------------------------------------


SQLITE_NEWEST = (
    "USING COVERING INDEX idx_transcript_session_key_cursor (session_key=? AND session_id=?)"
)


def _sqlite_reads(target: str, statement: str, parameters: Any) -> list[str]:
    with sqlite3.connect(target) as db:
        rows = db.execute("EXPLAIN QUERY PLAN " + statement, parameters or ()).fetchall()
    lines = [str(row[-1]) for row in rows]
    reads = []
    for line in lines:
        if not re.match(r"^(SEARCH|SCAN) transcript_entries\b", line):
            continue
        if line.endswith(SQLITE_NEWEST):
            reads.append("newest first")
        elif line.endswith("USING INTEGER PRIMARY KEY (rowid=?)"):
            reads.append("by id")
        else:
            reads.append(line)
    if reads:  # the rows are read in the order asked for, never sorted afterwards
        reads += [line for line in lines if "TEMP B-TREE" in line]
    return reads


@pytest.mark.sqlite_only
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_sqlite_reads_the_floor_from_the_end_of_the_index(
    empty_database: str, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path without RETURNING: the floor read in its own statement, the pop as a read
    and a delete by row id."""
    monkeypatch.setattr(fenced_append, "SQLITE_ONE_STATEMENT", False)
    found: dict[str, list[str]] = {}
    async with SessionStorage(empty_database) as storage:
        row_id = await _history(storage, scenario)
        for name in OPERATIONS:
            for statement, parameters in await _captured(storage, name, row_id):
                found.setdefault(name, []).extend(
                    _sqlite_reads(empty_database, statement, parameters)
                )
    assert found == {
        "append": ["newest first"],
        "batch": ["newest first"],
        "pop": ["by id", "newest first", "by id"],
        "delete by id": ["by id"],
    }
