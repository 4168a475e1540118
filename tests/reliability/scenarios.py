"""One populated store and the multi-row operations the fault tests interrupt.

``populate`` builds a store where every operation has real work to do: a session with a
compacted archive, a summary, a portable and a provider context state, and two stale
sessions for the retention operations. ``OPERATIONS`` are the use cases, each a coroutine
of ``(manager, context)``; ``context`` is what ``populate`` returned.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.base import Base
from opensquilla.session.models import SessionContextState, SessionIntent, SessionStatus

from .support import asyncpg_dsn

KEY = "agent:main:subject"
CHILD = "agent:main:subject-child"
STALE = ("agent:main:stale-1", "agent:main:stale-2")

Context = dict[str, Any]
Operation = Callable[[SessionManager, Context], Awaitable[Any]]


async def populate(manager: SessionManager, storage: SessionStorage) -> Context:
    node = await manager.create(KEY, label="subject")
    for n in range(10):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(KEY, role, f"early message {n}", token_count=100)
    first = await manager.compact_with_result(KEY, 1000, compaction_id="cmp-setup")
    assert first.removed_count > 0, "the setup needs a compacted archive"
    for n in range(3):
        await manager.append_message(KEY, "user", f"late message {n}", token_count=100)
    await manager.save_context_state(
        SessionContextState(
            session_id=node.session_id,
            session_key=KEY,
            provider="openai",
            state_kind="response_id",
            payload={"id": "resp_1"},
        )
    )
    for index, key in enumerate(STALE):
        stale = await manager.create(key)
        await manager.append_message(key, "user", f"{key} says hi", token_count=3)
        await manager.append_message(key, "assistant", f"{key} answers", token_count=4)
        await manager.save_context_state(
            SessionContextState(session_id=stale.session_id, session_key=key, state_kind="s")
        )
        await manager.storage.update_session_fields(key, {"updated_at": 1_000 + index})
    canonical = await manager.get_canonical_transcript(KEY)
    live = await manager.get_transcript(KEY)
    return {
        "prefix_message_id": canonical[4].message_id,
        "kept": [
            {"role": live[-2].role, "content": live[-2].content},
            {"role": "assistant", "content": "rewritten by the caller"},
        ],
    }


async def _compact(manager: SessionManager, context: Context) -> Any:
    result = await manager.compact_with_result(KEY, 500, compaction_id="cmp-under-test")
    assert result.removed_count > 0, "the compaction under test must commit"
    return result


async def _persist(manager: SessionManager, context: Context) -> Any:
    written = await manager.persist_compaction_result(
        KEY, "a summary from elsewhere", context["kept"], compaction_id="cmp-persisted"
    )
    assert written, "persist_compaction_result under test must write"
    return written


OPERATIONS: dict[str, Operation] = {
    "append": lambda m, c: m.append_message(KEY, "user", "one more", token_count=7),
    "reset": lambda m, c: m.apply_intent(KEY, SessionIntent.RESET_SAME_KEY),
    "branch_full": lambda m, c: m.branch(KEY, CHILD, fork_transcript=True),
    "branch_prefix": lambda m, c: m.branch(
        KEY, CHILD, fork_transcript=True, fork_before_message_id=c["prefix_message_id"]
    ),
    "truncate": lambda m, c: m.truncate(KEY, 2),
    "compact": _compact,
    "persist": _persist,
    "cap": lambda m, c: m.cap_entries(1),
    "prune": lambda m, c: m.prune_stale(10**9),
    "update": lambda m, c: m.update(KEY, label="renamed", delivery_context={"to": "x"}),
    "finish": lambda m, c: m.finish(KEY, SessionStatus.FAILED),
}


@dataclass
class Template:
    target: str
    context: Context
    work_target: str | None = None  # Postgres: the database clones are restored into
    rows: dict[str, tuple[list[str], list[tuple[Any, ...]]]] | None = None
    sequences: list[tuple[str, int, bool]] | None = None


LEASE_TABLE = "compaction_leases"  # coordination state beside the five tables
ARCHIVE_TABLE = "session_archives"  # archives kept in the database (archive_store="database")
TABLES = (
    "sessions",
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
)


class Templates:
    """Databases populated once and cloned for every attempt, so that every attempt starts
    from the same rows, ids, id counters and timestamps.

    SQLite: a copy of the file. Postgres: ``CREATE DATABASE ... TEMPLATE`` costs a third
    of a second, so one work database is restored instead (every table emptied and refilled
    with the template's rows, every id sequence set back) in one transaction.
    """

    def __init__(self, backend: Any, workdir: Path, *, durable: bool = False) -> None:
        self._backend = backend
        self._workdir = workdir
        self._durable = durable
        self._cleanups: list[Callable[[], Awaitable[None]]] = []

    async def _fresh(self) -> str:
        target, cleanup = await self._backend.fresh_migrated(self._workdir, durable=self._durable)
        self._cleanups.append(cleanup)
        return str(target)

    async def prepare(self) -> Template:
        target = await self._fresh()
        async with SessionStorage(target) as storage:
            context = await populate(SessionManager(storage, inject_time_prefix=False), storage)
        template = Template(target, context)
        if self._backend.is_postgres:
            template.work_target = await self._fresh()
            conn = await asyncpg.connect(asyncpg_dsn(target))
            try:
                template.rows = {}
                for table in TABLES:
                    # search_vector is the database's own (its trigger fills it on copy).
                    records = await conn.fetch(f"SELECT * FROM {table}")
                    columns = (
                        [c for c in records[0].keys() if c != "search_vector"]  # noqa: SIM118 (a Record iterates values)
                        if records
                        else []
                    )
                    records = [[r[c] for c in columns] for r in records]
                    template.rows[table] = (columns, [tuple(r) for r in records])
                template.sequences = []
                for table in TABLES[1:]:
                    sequence = await conn.fetchval("SELECT pg_get_serial_sequence($1, 'id')", table)
                    value, called = await conn.fetchrow(
                        f"SELECT last_value, is_called FROM {sequence}"
                    )
                    template.sequences.append((sequence, value, called))
            finally:
                await conn.close()
        return template

    async def _restore(self, template: Template) -> str:
        assert template.work_target and template.rows is not None and template.sequences
        conn = await asyncpg.connect(asyncpg_dsn(template.work_target))
        try:
            async with conn.transaction():
                # The compaction lease too: a finished run's record would answer the next
                # attempt's equal compaction; and the archives an attempt kept. DELETE, not
                # TRUNCATE: a TRUNCATE gives every table and index a new file (0.3-0.5 s for
                # these seven, against 50-130 ms), and these tables hold a few dozen rows.
                # Triggers and foreign keys are off for the deletes only (as TRUNCATE fires
                # no row trigger); the copy fires them, so its trigger fills search_vector.
                await conn.execute(
                    "SET LOCAL session_replication_role = replica; "
                    + " ".join(f"DELETE FROM {t};" for t in (*TABLES, LEASE_TABLE, ARCHIVE_TABLE))
                    + " SET LOCAL session_replication_role = origin;"
                )
                for table, (columns, records) in template.rows.items():
                    if records:
                        await conn.copy_records_to_table(table, records=records, columns=columns)
                for sequence, value, called in template.sequences:
                    await conn.execute("SELECT setval($1, $2, $3)", sequence, value, called)
        finally:
            await conn.close()
        return template.work_target

    @contextlib.asynccontextmanager
    async def clone(self, template: Template) -> AsyncIterator[str]:
        if self._backend.is_postgres:
            yield await self._restore(template)
            return
        path = self._workdir / f"clone-{uuid.uuid4().hex[:12]}.db"
        shutil.copyfile(template.target, path)
        wal = Path(template.target + "-wal")
        if wal.exists():
            shutil.copyfile(wal, str(path) + "-wal")
        os.chmod(path, 0o600)
        try:
            yield str(path)
        finally:
            for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                leftover.unlink(missing_ok=True)

    async def close(self) -> None:
        for cleanup in reversed(self._cleanups):
            await cleanup()


# -- statements ----------------------------------------------------------------------------


def is_write(statement: str) -> bool:
    """INSERT, UPDATE or DELETE (also as the body of a ``WITH``)."""
    words = statement.split()
    if not words:
        return False
    head = words[0].upper()
    if head in ("INSERT", "UPDATE", "DELETE"):
        return True
    return head == "WITH" and any(w.upper() in ("INSERT", "UPDATE", "DELETE") for w in words)


def is_session_write(statement: str) -> bool:
    """A write to the session's data: :func:`is_write`, except the compaction lease's.
    The lease is coordination state, written around an operation rather than in it (a
    failed run gives it up afterwards, and a failure to record a finished run is only
    logged); its failures are tested in tests/compaction/test_compaction_lease.py."""
    return is_write(statement) and LEASE_TABLE not in statement


@contextlib.contextmanager
def listening(storage: SessionStorage, name: str, fn: Callable[..., Any]) -> Iterator[None]:
    engine = storage.engine.sync_engine
    event.listen(engine, name, fn)
    try:
        yield
    finally:
        event.remove(engine, name, fn)


@contextlib.contextmanager
def frozen_clock_and_ids(now_ns: int) -> Iterator[None]:
    """Wall clock stopped at ``now_ns`` and UUIDs counted from 1: the same operation on the
    same rows then writes the same values, so two runs can be compared row for row."""
    counter = itertools.count(1)
    real_time_ns, real_uuid4 = time.time_ns, uuid.uuid4
    time.time_ns = lambda: now_ns  # type: ignore[assignment]
    uuid.uuid4 = lambda: uuid.UUID(int=next(counter), version=4)  # type: ignore[assignment]
    try:
        yield
    finally:
        time.time_ns = real_time_ns  # type: ignore[assignment]
        uuid.uuid4 = real_uuid4  # type: ignore[assignment]


Snapshot = dict[str, list[tuple[Any, ...]]]


async def comparable_snapshot(storage: SessionStorage, *, mask_message_ids: bool) -> Snapshot:
    """Every row of the five tables; with ``mask_message_ids`` the transcript message ids
    are blanked (Postgres draws those of forked rows from ``gen_random_uuid()``)."""
    from tests.helpers import table_snapshot

    snapshot = await table_snapshot(storage)
    if not mask_message_ids:
        return snapshot
    masked: Snapshot = dict(snapshot)
    for table in ("transcript_entries", "compacted_transcript_entries"):
        position = [c.name for c in Base.metadata.tables[table].columns].index("message_id")
        masked[table] = [
            tuple(None if i == position else v for i, v in enumerate(row))
            for row in snapshot[table]
        ]
    return masked
