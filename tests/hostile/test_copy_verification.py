"""Copy: verification compares values exactly, and every problem names its session.

"Already there, verified" used to compare numbers by value (``1``, ``1.0`` and ``True``
agreed), so a changed value could pass as identical. And a session the target refused
stopped the copy half-way with an error that did not name it. Now the canonical form
keeps each value's type and exact bits (only JSON object key order, which ``jsonb`` does
not keep, is ignored), each session is checked before it is written, and one the target
cannot take is reported by key with the reason while the others are copied.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage, transfer
from opensquilla.session.db.repos.transfer import table_layout
from opensquilla.session.db.tables import sessions, transcript_entries
from opensquilla.session.db.types import MARKER
from opensquilla.session.errors import DatabaseUnavailableError, SessionStoreError
from opensquilla.session.models.reports import SessionRows
from opensquilla.session.transfer import canonical_row, session_digest
from opensquilla.session.transfer.store import TransferStore

from ..cli.support import cli, dump_tables, opened, run, seed_rich

LAYOUT = table_layout()
KEY = "agent:main:exact"


def _session(**changes: object) -> SessionRows:
    row: dict[str, Any] = {name: None for name, _ in LAYOUT["sessions"]}
    row.update(session_key=KEY, session_id="g1", created_at=1, updated_at=2)
    row.update(changes)
    children: dict[str, list[dict[str, Any]]] = {
        "transcript_entries": [],
        "compacted_transcript_entries": [],
        "session_summaries": [],
        "session_context_states": [],
    }
    return SessionRows(row, children)


def _nested(depth: int, leaf: object) -> object:
    value = leaf
    for level in range(depth):
        value = {f"k{level}": value} if level % 2 else [value]
    return value


DIFFERENT = [
    ("json 1 vs 1.0", {"origin": {"n": 1}}, {"origin": {"n": 1.0}}),
    ("json 1 vs true", {"origin": {"n": 1}}, {"origin": {"n": True}}),
    ("json 1.0 vs true", {"origin": {"n": 1.0}}, {"origin": {"n": True}}),
    ("json 0 vs false", {"origin": {"n": 0}}, {"origin": {"n": False}}),
    ("json 2**63 vs its float", {"origin": {"n": 2**63}}, {"origin": {"n": float(2**63)}}),
    ("json 10**16 vs 1e16", {"origin": {"n": 10**16}}, {"origin": {"n": 1e16}}),
    (
        "json values swapped between keys",
        {"origin": {"a": 1, "b": 2}},
        {"origin": {"a": 2, "b": 1}},
    ),
    ("json list order", {"origin": {"l": [1, 2]}}, {"origin": {"l": [2, 1]}}),
    ("json null vs missing key", {"origin": {"a": None}}, {"origin": {}}),
    ("json '1' vs 1", {"origin": {"n": "1"}}, {"origin": {"n": 1}}),
    ("float 0.1+0.2 vs 0.3", {"estimated_cost_usd": 0.1 + 0.2}, {"estimated_cost_usd": 0.3}),
    ("float nearest neighbours", {"total_cost_usd": 1.0}, {"total_cost_usd": 1.0000000000000002}),
    ("int true vs 1", {"epoch": True}, {"epoch": 1}),
    ("text NUL vs its escaped spelling", {"label": "a\x00b"}, {"label": MARKER + "a\\0b"}),
    ("text null vs empty", {"label": None}, {"label": ""}),
    ("deep leaf", {"origin": {"d": _nested(900, "x")}}, {"origin": {"d": _nested(900, "y")}}),
]


@pytest.mark.parametrize(("case", "one", "other"), DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_different_values_never_verify_as_equal(case: str, one: dict, other: dict) -> None:
    a, b = _session(**one), _session(**other)
    assert canonical_row(a.session, LAYOUT["sessions"]) != canonical_row(
        b.session, LAYOUT["sessions"]
    ), case
    assert session_digest(a, LAYOUT) != session_digest(b, LAYOUT), case


# The sign of a zero is no part of a stored value (one value domain, issue 31 item 3):
# neither jsonb nor SQLite's REAL keeps it, so the store stores 0.0 on both backends, and a
# row written before that rule compares as it would be stored now.
SAME = [
    ("json -0.0 vs 0.0", {"origin": {"n": -0.0}}, {"origin": {"n": 0.0}}),
    ("json -0.0 deep in a list", {"origin": {"l": [[-0.0]]}}, {"origin": {"l": [[0.0]]}}),
    ("float -0.0 vs 0.0", {"estimated_cost_usd": -0.0}, {"estimated_cost_usd": 0.0}),
]


@pytest.mark.parametrize(("case", "one", "other"), SAME, ids=[c[0] for c in SAME])
def test_a_zero_verifies_as_equal_whatever_its_sign(case: str, one: dict, other: dict) -> None:
    a, b = _session(**one), _session(**other)
    assert canonical_row(a.session, LAYOUT["sessions"]) == canonical_row(
        b.session, LAYOUT["sessions"]
    ), case
    assert session_digest(a, LAYOUT) == session_digest(b, LAYOUT), case


def test_equal_values_verify_as_equal_in_any_key_order_and_depth() -> None:
    one = _session(origin={"a": [1, 2.5, None], "b": {"x": True}}, delivery_context=_nested(900, 1))
    same = _session(
        origin={"b": {"x": True}, "a": [1, 2.5, None]}, delivery_context=_nested(900, 1)
    )
    assert session_digest(one, LAYOUT) == session_digest(same, LAYOUT)


def _copy(source: str, target: str, *extra: str) -> Any:
    return cli(None, "copy", "--from", source, "--to", target, "--json", *extra)


async def _seed_exact(dsn: str) -> None:
    async with opened(dsn) as manager:
        await manager.create(KEY, label="before\x00after", delivery_context={"n": 1})
        await manager.update(KEY, estimated_cost_usd=0.1 + 0.2)
        await manager.append_message(KEY, "assistant", "hi", turn_usage={"a": 1, "b": 2})


async def _change_target(dsn: str, table: sa.Table, column: str, value: object) -> None:
    async with SessionStorage(dsn) as storage, storage.engine.begin() as conn:
        await conn.execute(
            sa.update(table).where(table.c.session_key == KEY).values({column: value})
        )


CHANGES = [
    ("json 1 -> 1.0", sessions, "delivery_context", {"n": 1.0}),
    ("json 1 -> true", sessions, "delivery_context", {"n": True}),
    ("float 0.1+0.2 -> 0.3", sessions, "estimated_cost_usd", 0.3),
    ("NUL -> its escaped spelling", sessions, "label", MARKER + "before\\0after"),
    ("values swapped between keys", transcript_entries, "turn_usage", {"a": 2, "b": 1}),
]


@pytest.mark.parametrize(("case", "table", "column", "value"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_changed_value_in_the_target_is_a_conflict_not_already_there(
    database: str, tmp_path: Path, case: str, table: sa.Table, column: str, value: object
) -> None:
    source = str(tmp_path / "source.db")
    run(_seed_exact(source))
    first = _copy(source, database)
    assert first.exit_code == 0, first.output
    run(_change_target(database, table, column, value))

    again = _copy(source, database)

    assert again.exit_code == 2, again.output
    report = json.loads(again.stdout)
    assert report["conflicts"] == [KEY] and report["skipped"] == 0, case
    failed = [check["table"] for check in report["verification"] if not check["ok"]]
    assert failed == [table.name], case


async def _refusable(dsn: str, backend_is_postgres: bool) -> str:
    """Give one session a value its own backend holds but the store's domain refuses:
    SQLite holds 2**40 in a 32-bit column, PostgreSQL a NaN cost."""
    async with SessionStorage(dsn) as storage, storage.engine.begin() as conn:
        if backend_is_postgres:
            await conn.execute(
                sa.text(
                    "UPDATE sessions SET estimated_cost_usd = 'NaN' "
                    "WHERE session_key = 'agent:main:reset-me'"
                )
            )
            return "estimated_cost_usd"
        await conn.execute(
            sa.text(
                "UPDATE sessions SET spawn_depth = 1099511627776 "
                "WHERE session_key = 'agent:main:reset-me'"
            )
        )
        return "spawn_depth"


async def _repair(dsn: str, column: str) -> None:
    async with SessionStorage(dsn) as storage, storage.engine.begin() as conn:
        await conn.execute(
            sa.text(f"UPDATE sessions SET {column} = 0 WHERE session_key = 'agent:main:reset-me'")
        )


def test_a_session_the_target_cannot_take_is_named_and_the_rest_is_copied(
    backend: Any, database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    column = run(_refusable(database, backend.is_postgres))
    target = str(tmp_path / "target.db")

    result = _copy(database, target)

    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)
    assert list(report["refused"]) == [seeded.reset]
    assert column in report["refused"][seeded.reset]
    assert report["copied"] == len(seeded.keys) - 1 and report["ok"] is False
    copied = {row["session_key"] for row in run(dump_tables(target))["sessions"]}
    assert copied == set(seeded.keys) - {seeded.reset}

    human = cli(None, "copy", "--from", database, "--to", target)
    assert human.exit_code == 2
    assert f"not copied: {seeded.reset}" in human.stdout and column in human.stdout
    assert "Traceback" not in human.output

    run(_repair(database, column))
    finished = _copy(database, target)
    assert finished.exit_code == 0, finished.output
    report = json.loads(finished.stdout)
    assert (report["copied"], report["skipped"], report["refused"]) == (1, len(seeded.keys) - 1, {})
    assert report["ok"] is True


def test_a_session_id_another_key_holds_in_the_target_is_refused_by_name(
    database: str, tmp_path: Path
) -> None:
    target = database

    async def victim() -> str:
        async with opened(target) as manager:
            node = await manager.create("agent:main:victim")
            await manager.append_message("agent:main:victim", "user", "mine")
            return node.session_id

    victim_id = run(victim())
    source = str(tmp_path / "source.db")

    async def intruder() -> None:
        async with opened(source) as manager:
            await manager.create("agent:main:intruder", session_id=victim_id)
            await manager.append_message("agent:main:intruder", "user", "not yours")
            await manager.create("agent:main:innocent")

    run(intruder())
    before = run(dump_tables(target))["transcript_entries"]

    result = _copy(source, target)

    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert list(report["refused"]) == ["agent:main:intruder"]
    assert victim_id in report["refused"]["agent:main:intruder"]
    assert "agent:main:victim" in report["refused"]["agent:main:intruder"]
    assert report["copied"] == 1
    assert run(dump_tables(target))["transcript_entries"] == before


@contextlib.contextmanager
def _connection_lost_at_the_second_insert() -> Iterator[None]:
    """While inside: the target's connection is lost while the second session is written."""
    real = TransferStore.insert
    calls = {"n": 0}

    async def insert(self: TransferStore, rows: SessionRows, **options: Any) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseUnavailableError("connection lost (injected)")
        return await real(self, rows, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransferStore, "insert", insert)
        yield


def test_losing_the_target_names_the_session_and_a_rerun_finishes(
    database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    target = str(tmp_path / "target.db")

    async def first() -> str:
        async with SessionStorage(database) as src, SessionStorage(target) as dst:
            with pytest.raises(SessionStoreError) as caught:
                await transfer.copy_sessions(src, dst, jobs=1)
            return str(caught.value)

    with _connection_lost_at_the_second_insert():
        message = run(first())
    assert f"copy stopped at session {seeded.keys[1]!r}" in message
    assert "run the same copy again" in message

    finished = _copy(database, target)
    assert finished.exit_code == 0, finished.output
    report = json.loads(finished.stdout)
    assert (report["copied"], report["skipped"]) == (len(seeded.keys) - 1, 1)
    assert run(dump_tables(target)) == run(dump_tables(database))


def test_a_session_holding_negative_zeros_copies_and_a_rerun_verifies_it(
    database: str, tmp_path: Path
) -> None:
    """SQLite's JSON text kept ``-0.0`` and ``jsonb`` cannot: a copy from SQLite to
    PostgreSQL of such a session failed its verification on every rerun and could never
    finish. In the one value domain both sides hold 0.0 (issue 31, item 3)."""
    source = str(tmp_path / "source.db")

    async def seed() -> None:
        async with opened(source) as manager:
            await manager.create(KEY, origin={"n": 1})
            await manager.append_message(KEY, "assistant", "hi", turn_usage={"cost": 1.0})

    run(seed())
    with contextlib.closing(sqlite3.connect(source)) as db, db:  # as an older release wrote it
        db.execute('UPDATE sessions SET origin = \'{"n": -0.0, "l": [-0.0]}\'')
        db.execute("UPDATE transcript_entries SET turn_usage = '{\"cost\": -0.0}'")

    first = _copy(source, database)
    assert first.exit_code == 0, first.output
    assert (json.loads(first.stdout)["copied"], json.loads(first.stdout)["skipped"]) == (1, 0)
    again = _copy(source, database)
    assert again.exit_code == 0, again.output
    assert (json.loads(again.stdout)["copied"], json.loads(again.stdout)["skipped"]) == (0, 1)
    assert run(dump_tables(database)) == run(dump_tables(source))
