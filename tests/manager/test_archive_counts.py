"""The archive's counts kept by the database (revision 0007, docs/semantics.md#pages), on
both backends.

``canonical_archive_counts`` must equal a fresh ``GROUP BY session_id, compaction_id`` of
``compacted_transcript_entries`` after whatever writes the archive: compactions, resets,
forks, deletion, pruning, import, copy, and raw SQL that inserts, deletes and updates
archive rows (a row moved to another compaction, or to another session, or unlinked from
its original id), in single statements over several groups and in transactions of several
statements. The coverage read from the counts then answers as the count of rows did.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import (
    CanonicalTranscriptCoverage,
    SessionManager,
    SessionStorage,
    transfer,
)
from opensquilla.session.db.tables import compacted_transcript_entries as archive
from opensquilla.session.db.tables import sessions
from opensquilla.session.models import SessionSummary
from tests.helpers import assert_archive_counts_exact

from .test_canonical_pages import compact, fill

KEY = "agent:main:counted"
CHILD = "agent:main:counted-child"


async def _session_id(manager: SessionManager, key: str) -> str:
    node = await manager.get_session(key)
    assert node is not None
    return node.session_id


async def _compacted(manager: SessionManager, key: str, rounds: int = 2) -> str:
    """A session with ``rounds`` compactions of two rows each and one live row."""
    await manager.create(key)
    for n in range(rounds):
        await fill(manager, key, 3, start=3 * n)
        await compact(manager, key, keep=1)
    return await _session_id(manager, key)


def _rows(
    session_id: str,
    compaction_id: str | None,
    count: int,
    *,
    linked: bool = True,
    session_key: str | None = None,
) -> Any:
    """``count`` archive rows of ``session_id`` in one ``INSERT`` statement, stored under
    ``session_key`` (a session's rows are those under its key; else a key of their own)."""
    values = [
        {
            "session_id": session_id,
            "session_key": session_key or f"agent:main:{session_id}",
            "compaction_id": compaction_id,
            "original_entry_id": 10_000 + n if linked else None,
            "message_id": uuid.uuid4().hex,
            "role": "user",
            "content": f"raw {n}",
            "created_at": 1_700_000_000_000 + n,
            "archived_at": 1_700_000_000_000,
        }
        for n in range(count)
    ]
    return sa.insert(archive).values(values)


async def _execute(storage: SessionStorage, *statements: Any) -> None:
    """``statements`` in one transaction of the storage's engine."""
    async with storage.engine.begin() as conn:
        for statement in statements:
            await conn.execute(sa.text(statement) if isinstance(statement, str) else statement)


# -- the store's own writes -------------------------------------------------------------


async def test_compactions_are_counted_per_compaction(
    manager: SessionManager, storage: SessionStorage
) -> None:
    assert await assert_archive_counts_exact(storage) == []
    session_id = await _compacted(manager, KEY)
    counted = await assert_archive_counts_exact(storage)
    # Three rows and one kept, then the kept one, three more and one kept.
    assert sorted((sid, archived, unlinked) for sid, _, archived, unlinked in counted) == [
        (session_id, 2, 0),
        (session_id, 3, 0),
    ]
    summaries = await manager.get_summaries(KEY)
    assert sorted(c for _, c, _, _ in counted) == sorted(s.compaction_id for s in summaries)
    assert await manager.is_canonical_transcript_complete(KEY)


async def test_reset_delete_and_prune_remove_the_counts(
    manager: SessionManager, storage: SessionStorage
) -> None:
    old = await _compacted(manager, KEY)
    await _compacted(manager, CHILD, rounds=1)
    await manager.reset(KEY)
    counted = await assert_archive_counts_exact(storage)
    assert old not in {sid for sid, *_ in counted} and len(counted) == 1
    assert await manager.is_canonical_transcript_complete(KEY)
    await manager.delete(CHILD)
    assert await assert_archive_counts_exact(storage) == []

    await _compacted(manager, "agent:main:stale", rounds=1)
    assert len(await assert_archive_counts_exact(storage)) == 1
    assert await manager.prune_stale(0) >= 1
    assert await assert_archive_counts_exact(storage) == []


async def test_a_full_fork_counts_the_copied_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    parent = await _compacted(manager, KEY)
    child = await manager.branch(KEY, CHILD, fork_transcript=True)
    counted = await assert_archive_counts_exact(storage)
    assert [sid for sid, *_ in counted].count(child.session_id) == 2
    assert [sid for sid, *_ in counted].count(parent) == 2
    assert await manager.is_canonical_transcript_complete(CHILD)
    # A prefix fork copies into the child's live table only.
    last = (await manager.get_canonical_transcript(KEY))[-1]
    await manager.branch(KEY, "agent:main:prefix", fork_before_message_id=last.message_id)
    assert len(await assert_archive_counts_exact(storage)) == 4


async def test_import_and_copy_count_what_they_write(
    backend: Any, manager: SessionManager, storage: SessionStorage, tmp_path: Path
) -> None:
    await _compacted(manager, KEY)
    await _compacted(manager, CHILD, rounds=1)
    source = await assert_archive_counts_exact(storage)
    path = tmp_path / "sessions.jsonl"
    await transfer.export_to_file(storage, path)
    for way in ("import", "copy"):
        (tmp_path / way).mkdir()
        target, cleanup = await backend.fresh_migrated(tmp_path / way)
        try:
            async with SessionStorage(target) as other:
                if way == "import":
                    await transfer.import_sessions(other, path)
                else:
                    await transfer.copy_sessions(storage, other)
                assert await assert_archive_counts_exact(other) == source
                other_manager = SessionManager(other, inject_time_prefix=False)
                assert await other_manager.is_canonical_transcript_complete(KEY)
        finally:
            await cleanup()


# -- raw SQL --------------------------------------------------------------------------------


async def test_raw_inserts_deletes_and_updates_are_counted(
    manager: SessionManager, storage: SessionStorage
) -> None:
    session_id = await _compacted(manager, KEY)
    (first, second) = [s.compaction_id for s in await manager.get_summaries(KEY)]
    assert first is not None and second is not None
    complete = CanonicalTranscriptCoverage(True, 2, False)
    incomplete = CanonicalTranscriptCoverage(False, 2, False)
    assert await manager.get_canonical_transcript_coverage(KEY) == complete

    # Rows of no compaction, some unlinked, and rows of another session, in one statement
    # each; then in one transaction with a delete.
    await _execute(storage, _rows(session_id, None, 3, linked=False, session_key=KEY))
    counted = await assert_archive_counts_exact(storage)
    assert (session_id, None, 3, 3) in counted
    assert await manager.get_canonical_transcript_coverage(KEY) == incomplete
    await _execute(
        storage,
        _rows("elsewhere", None, 2),
        _rows("elsewhere", "other", 4, linked=False),
        "DELETE FROM compacted_transcript_entries "
        f"WHERE session_id = '{session_id}' AND compaction_id IS NULL",
    )
    counted = await assert_archive_counts_exact(storage)
    assert ("elsewhere", None, 2, 0) in counted and ("elsewhere", "other", 4, 4) in counted
    assert await manager.get_canonical_transcript_coverage(KEY) == complete

    table = "compacted_transcript_entries"
    where_first = f"session_id = '{session_id}' AND compaction_id = '{first}'"

    async def mine() -> dict[str | None, tuple[int, int]]:
        counted = await assert_archive_counts_exact(storage)
        return {c: (a, u) for sid, c, a, u in counted if sid == session_id}

    # The first compaction archived 2 rows, the second 3.
    assert await mine() == {first: (2, 0), second: (3, 0)}
    # A row moved to the other compaction: both counts change, the coverage fails.
    oldest = f"(SELECT min(id) FROM {table} WHERE {where_first})"
    await _execute(storage, f"UPDATE {table} SET compaction_id = '{second}' WHERE id = {oldest}")
    assert await mine() == {first: (1, 0), second: (4, 0)}
    assert await manager.get_canonical_transcript_coverage(KEY) == incomplete
    # Moved back (the statement names the row by id), then unlinked: the counts follow,
    # the coverage fails on N.
    async with storage.engine.connect() as conn:
        moved = (
            await conn.execute(
                sa.text(f"SELECT min(id) FROM {table} WHERE compaction_id = '{second}'")
            )
        ).scalar_one()
    await _execute(storage, f"UPDATE {table} SET compaction_id = '{first}' WHERE id = {moved}")
    assert await mine() == {first: (2, 0), second: (3, 0)}
    await _execute(storage, f"UPDATE {table} SET original_entry_id = NULL WHERE {where_first}")
    assert await mine() == {first: (2, 2), second: (3, 0)}
    assert await manager.get_canonical_transcript_coverage(KEY) == incomplete
    # Columns the counts do not depend on change nothing.
    await _execute(
        storage, f"UPDATE {table} SET content = 'edited' WHERE session_id = '{session_id}'"
    )
    assert await mine() == {first: (2, 2), second: (3, 0)}
    await _execute(storage, f"UPDATE {table} SET original_entry_id = id WHERE {where_first}")
    assert await mine() == {first: (2, 0), second: (3, 0)}
    assert await manager.get_canonical_transcript_coverage(KEY) == complete
    # A group moved to another session, and a group deleted, in one transaction.
    await _execute(
        storage,
        f"UPDATE {table} SET session_id = 'elsewhere' "
        f"WHERE session_id = '{session_id}' AND compaction_id = '{second}'",
        f"DELETE FROM {table} WHERE {where_first}",
    )
    assert await mine() == {}
    assert ("elsewhere", second, 3, 0) in await assert_archive_counts_exact(storage)
    assert await manager.get_canonical_transcript_coverage(KEY) == incomplete


async def test_a_rolled_back_write_leaves_the_counts(
    manager: SessionManager, storage: SessionStorage
) -> None:
    session_id = await _compacted(manager, KEY, rounds=1)
    before = await assert_archive_counts_exact(storage)
    async with storage.engine.connect() as conn:
        await conn.execute(_rows(session_id, "rolled", 5))
        await conn.execute(sa.text("DELETE FROM compacted_transcript_entries"))
        await conn.rollback()
    assert await assert_archive_counts_exact(storage) == before


async def test_deleting_every_archive_row_at_once_clears_the_counts(
    backend: Any, manager: SessionManager, storage: SessionStorage
) -> None:
    await _compacted(manager, KEY)
    await _compacted(manager, CHILD, rounds=1)
    statement = (
        "TRUNCATE compacted_transcript_entries"
        if backend.is_postgres
        else ("DELETE FROM compacted_transcript_entries")
    )
    await _execute(storage, statement)
    assert await assert_archive_counts_exact(storage) == []
    assert not await manager.is_canonical_transcript_complete(KEY)


# -- random sequences -----------------------------------------------------------------------

SESSIONS = ("s-a", "s-b")
COMPACTIONS = ("c-1", "c-2", None)
_group = st.tuples(st.sampled_from(SESSIONS), st.sampled_from(COMPACTIONS))


def _is(compaction_id: str | None) -> str:
    return "IS NULL" if compaction_id is None else f"= '{compaction_id}'"


def _where(prefix: str, group: tuple[str, str | None], parity: int) -> str:
    session_id, compaction_id = group
    return (
        f"session_id = '{prefix}{session_id}' AND compaction_id {_is(compaction_id)} "
        f"AND id % 2 = {parity}"
    )


_OPERATIONS = st.one_of(
    st.tuples(st.just("insert"), _group, st.integers(1, 4), st.booleans()),
    st.tuples(st.just("delete"), _group, st.integers(0, 1)),
    st.tuples(st.just("move"), _group, st.integers(0, 1), _group),
    st.tuples(st.just("unlink"), _group, st.integers(0, 1), st.booleans()),
    st.tuples(st.just("scatter"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("touch"), _group),
)


def _statement(prefix: str, operation: tuple[Any, ...]) -> Any:
    kind, group = operation[0], operation[1]
    table = "compacted_transcript_entries"
    if kind == "insert":
        _, (session_id, compaction_id), count, linked = operation
        return _rows(prefix + session_id, compaction_id, count, linked=linked)
    if kind == "delete":
        return f"DELETE FROM {table} WHERE {_where(prefix, group, operation[2])}"
    if kind == "move":
        session_id, compaction_id = operation[3]
        target = "NULL" if compaction_id is None else f"'{compaction_id}'"
        # To another session: its id and its key (revision 0010 counts by both).
        return (
            f"UPDATE {table} SET session_id = '{prefix}{session_id}', "
            f"session_key = 'agent:main:{prefix}{session_id}', compaction_id = {target} "
            f"WHERE {_where(prefix, group, operation[2])}"
        )
    if kind == "unlink":
        value = "NULL" if operation[3] else "id"
        where = _where(prefix, group, operation[2])
        return f"UPDATE {table} SET original_entry_id = {value} WHERE {where}"
    if kind == "scatter":  # one statement over several groups, both ways
        return (
            f"UPDATE {table} SET compaction_id = CASE WHEN id % 3 = 0 THEN NULL "
            "WHEN id % 3 = 1 THEN 'c-1' ELSE compaction_id END, "
            "original_entry_id = CASE WHEN id % 2 = 0 THEN NULL ELSE id END "
            f"WHERE session_id = '{prefix}{group}'"
        )
    return f"UPDATE {table} SET content = 'touched' WHERE session_id = '{prefix}{group[0]}'"


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(st.lists(_OPERATIONS, min_size=1, max_size=4), min_size=1, max_size=6))
async def test_random_archive_writes_keep_the_counts_exact(
    storage: SessionStorage, transactions: list[list[tuple[Any, ...]]]
) -> None:
    prefix = uuid.uuid4().hex[:8] + "-"  # the example's own sessions
    for operations in transactions:
        await _execute(storage, *(_statement(prefix, op) for op in operations))
        await assert_archive_counts_exact(storage)


# -- the coverage read from the counts is the formula over the rows ----------------------

_SUMMARY = st.tuples(
    st.sampled_from(COMPACTIONS), st.integers(0, 3), st.sampled_from([0, 5])
)  # compaction_id, removed_count, covered_through_id
_ARCHIVED = st.tuples(st.sampled_from(COMPACTIONS), st.integers(1, 3), st.booleans())


def _formula(
    session: tuple[int, bool, int], summaries: list[Any], archived: list[Any]
) -> CanonicalTranscriptCoverage:
    """docs/semantics.md#pages over the rows themselves (``archived``: one
    ``(compaction_id, original_entry_id)`` per archived row)."""
    compaction_count, forked, schema_version = session
    c = max(0, compaction_count)
    per_compaction: dict[Any, int] = {}
    for compaction_id, _ in archived:
        per_compaction[compaction_id] = per_compaction.get(compaction_id, 0) + 1
    mismatched = [
        cid
        for cid, removed, covered in summaries
        if cid is None or (removed == 0 and covered > 0) or per_compaction.get(cid, 0) != removed
    ]
    proven = not forked or schema_version >= 2
    count_ok = len(summaries) >= c if forked else len(summaries) == c
    complete = (
        proven
        and count_ok
        and sum(removed for _, removed, _ in summaries) == len(archived)
        and not any(original is None for _, original in archived)
        and not mismatched
    )
    return CanonicalTranscriptCoverage(complete, c, forked)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    summaries=st.lists(_SUMMARY, max_size=3),
    groups=st.lists(_ARCHIVED, max_size=3),
    session=st.tuples(st.integers(-1, 3), st.booleans(), st.sampled_from([1, 2])),
)
async def test_the_coverage_is_the_formula_over_the_archived_rows(
    manager: SessionManager,
    storage: SessionStorage,
    summaries: list[tuple[str | None, int, int]],
    groups: list[tuple[str | None, int, bool]],
    session: tuple[int, bool, int],
) -> None:
    key = f"agent:main:{uuid.uuid4().hex[:8]}"
    session_id = (await manager.create(key)).session_id
    for compaction_id, removed, covered in summaries:
        await storage.save_summary(
            SessionSummary(
                session_id=session_id,
                session_key=key,
                summary_text="s",
                compaction_id=compaction_id,
                removed_count=removed,
                covered_through_id=covered,
            )
        )
    await _execute(
        storage, *(_rows(session_id, c, n, linked=lk, session_key=key) for c, n, lk in groups)
    )
    compaction_count, forked, schema_version = session
    await _execute(
        storage,
        sa.update(sessions)
        .where(sessions.c.session_id == session_id)
        .values(
            compaction_count=compaction_count,
            forked_from_parent=forked,
            schema_version=schema_version,
        ),
    )
    async with storage.engine.connect() as conn:
        rows = await conn.execute(
            sa.select(archive.c.compaction_id, archive.c.original_entry_id).where(
                archive.c.session_id == session_id
            )
        )
        archived = [tuple(row) for row in rows]
    expected = _formula(session, summaries, archived)
    assert await storage.get_canonical_transcript_coverage(session_id) == expected


# -- concurrency (PostgreSQL) ------------------------------------------------------------------


async def _pg(target: str) -> asyncpg.Connection:
    dsn = sa.engine.make_url(target).set(drivername="postgresql")
    return await asyncpg.connect(dsn.render_as_string(hide_password=False))


@pytest.mark.postgres_only
async def test_concurrent_archive_writers_neither_block_nor_lose_counts(database: str) -> None:
    """Two open transactions archiving rows of different sessions do not wait for each
    other; two adding to one group both count (the second waits for the first's commit).
    SQLite has one writer at a time."""
    first, second = await _pg(database), await _pg(database)
    insert = (
        "INSERT INTO compacted_transcript_entries (session_id, session_key, compaction_id, "
        "original_entry_id, message_id, role, created_at, archived_at) "
        "SELECT $1, 'agent:main:x', $2, n, md5(n::text || $1), 'user', n, 0 "
        "FROM generate_series(1, $3) AS n"
    )
    try:
        first_tx, second_tx = first.transaction(), second.transaction()
        await first_tx.start()
        await second_tx.start()
        await first.execute(insert, "sid-1", "c", 300)
        # A hang here would be a lock wait: lock_timeout turns it into an error.
        await second.execute("SET LOCAL lock_timeout = '20s'")
        await second.execute(insert, "sid-2", "c", 200)
        await second.execute(insert, "sid-2", None, 2)
        await second_tx.commit()
        # The same group from both: the second waits for the first, then adds to it.
        second_tx = second.transaction()
        await second_tx.start()
        waiting = asyncio.ensure_future(second.execute(insert, "sid-1", "c", 50))
        # Until the server shows it waiting (a state observed, not a delay hoped on).
        while not waiting.done() and not await first.fetchval(  # noqa: ASYNC110
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = $1",
            second.get_server_pid(),
        ):
            await asyncio.sleep(0.01)
        await first_tx.commit()
        await waiting
        await second_tx.commit()
        counted = await first.fetch(
            "SELECT session_id, compaction_id, archived FROM canonical_archive_counts "
            "ORDER BY session_id, compaction_id NULLS FIRST"
        )
        assert [tuple(row) for row in counted] == [
            ("sid-1", "c", 350),
            ("sid-2", None, 2),
            ("sid-2", "c", 200),
        ]
    finally:
        await first.close()
        await second.close()
