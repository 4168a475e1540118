"""No bad request can break the pool (issue 31, item 4).

A read with a limit above 2**31 - 1 used to bind it as a 32-bit parameter: PostgreSQL's
driver refused it, and the connection went back to the pool with asyncpg's bookkeeping
holding a transaction it never began, so every later unit of work on it became a SAVEPOINT
outside any transaction ("SAVEPOINT can only be used in transaction blocks", "SET
TRANSACTION ISOLATION LEVEL must be called before any query") until the process restarted.

Two guards, pinned here on both backends:

* limits are one range on both backends (a 64-bit integer, checked before any statement):
  2**31 is simply a large page, beyond 64 bits is ``InvalidInputError`` naming the argument;
* a connection on which the database or the driver raised goes back to the pool discarded
  (``db/uow.py``). Each way a connection can fail below is followed by 20 valid calls of
  every kind (autocommit reads, snapshot reads, write transactions with savepoints, the
  one-statement append), all of which must succeed, with no connection left checked out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import InvalidInputError, SessionStoreError

KEY = "agent:main:pool-after-errors"
BEYOND_32_BITS = 2**31
BEYOND_64_BITS = 2**63

# A second argument no driver binds as BIGINT (asyncpg: "invalid input for query argument
# $2 ... out of int64 range"; sqlite3: a bare OverflowError): the statement fails in the
# driver, after the server parsed it. This is what broke asyncpg's connection before.
UNBINDABLE = sa.text(
    "SELECT session_key FROM sessions WHERE session_key = :key LIMIT :value"
).bindparams(sa.bindparam("value", type_=sa.BigInteger))
MISSING_TABLE = sa.text("SELECT * FROM no_such_table_of_ours WHERE x = :key")
VALUES = {"key": KEY, "value": BEYOND_64_BITS}


async def _seed(manager: SessionManager, storage: SessionStorage) -> str:
    await manager.create(KEY)
    for n in range(3):
        await manager.append_message(KEY, "user", f"seed {n}")
    node = await storage.get_session(KEY)
    assert node is not None
    return node.session_id


async def _twenty_valid_calls(
    manager: SessionManager, storage: SessionStorage, session_id: str
) -> None:
    """Every kind of unit of work, five times over; every one must succeed (the first one
    a snapshot: it is what a broken asyncpg connection failed first)."""
    failures = []
    for n in range(5):
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: storage.get_canonical_transcript_page(  # snapshot (cursor lookup)
                session_id, limit=2, after=(0, 1)
            ),
            lambda: storage.get_recent_transcript(session_id, 2),  # autocommit read
            lambda n=n: manager.get_or_create(f"{KEY}-{n}"),  # write with a savepoint
            lambda n=n: manager.append_message(KEY, "user", f"after {n}"),  # one statement
        ]
        for call in calls:
            try:
                await call()
            except SessionStoreError as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
    assert failures == [], f"{len(failures)} of 20 valid calls failed: {failures[:3]}"
    assert storage.engine.pool.checkedout() == 0


# -- limits: one range on both backends, refused before any statement ---------------------


async def test_a_limit_above_32_bits_is_a_large_page_on_both_backends(
    manager: SessionManager, storage: SessionStorage
) -> None:
    session_id = await _seed(manager, storage)
    page, more = await storage.get_canonical_transcript_page(session_id, limit=BEYOND_32_BITS)
    assert [e.content for e in page] == ["seed 0", "seed 1", "seed 2"] and not more
    first = page[0]
    page, more = await storage.get_canonical_transcript_page(
        session_id, limit=BEYOND_32_BITS, after=(first.created_at, first.id)
    )
    assert [e.content for e in page] == ["seed 1", "seed 2"] and not more
    recent = await storage.get_recent_transcript(session_id, BEYOND_32_BITS)
    assert [e.content for e in recent] == ["seed 0", "seed 1", "seed 2"]
    walked = [e.content async for e in manager.iter_canonical_transcript(KEY, page_size=2**40)]
    assert walked == ["seed 0", "seed 1", "seed 2"]
    firsts = await manager.list_user_transcript_content_batch([KEY], limit_per_session=2**40)
    assert firsts == {KEY: ["seed 0", "seed 1", "seed 2"]}
    await _twenty_valid_calls(manager, storage, session_id)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("limit", lambda s, sid: s.get_canonical_transcript_page(sid, limit=BEYOND_64_BITS)),
        ("n", lambda s, sid: s.get_recent_transcript(sid, BEYOND_64_BITS)),
        (
            "limit_per_session",
            lambda s, sid: s.list_user_transcript_content_batch([sid], limit_per_session=2**64),
        ),
    ],
)
async def test_a_limit_beyond_64_bits_is_refused_naming_it_and_the_pool_is_intact(
    manager: SessionManager, storage: SessionStorage, name: str, call: Any
) -> None:
    session_id = await _seed(manager, storage)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    sa.event.listen(storage.engine.sync_engine, "before_cursor_execute", count)
    try:
        with pytest.raises(InvalidInputError, match=name):
            await call(storage, session_id)
    finally:
        sa.event.remove(storage.engine.sync_engine, "before_cursor_execute", count)
    assert statements == []
    with pytest.raises(InvalidInputError, match="page_size"):
        manager.iter_canonical_transcript(KEY, page_size=BEYOND_64_BITS)
    await _twenty_valid_calls(manager, storage, session_id)


# -- every way a connection can fail: the next 20 calls still succeed ---------------------


async def _in_read(storage: SessionStorage, statement: Any) -> None:
    async with storage.uow.read() as tx:
        await tx.sessions.conn.execute(statement, VALUES)


async def _in_snapshot(storage: SessionStorage, statement: Any) -> None:
    async with storage.uow.snapshot() as tx:
        await tx.sessions.get(KEY)
        await tx.sessions.conn.execute(statement, VALUES)


async def _in_write(storage: SessionStorage, statement: Any) -> None:
    async with storage.uow.write() as tx:
        await tx.sessions.get(KEY)
        await tx.sessions.conn.execute(statement, VALUES)


async def _in_savepoint(storage: SessionStorage, statement: Any) -> None:
    async with storage.uow.write() as tx, tx.sessions.conn.begin_nested():
        await tx.sessions.conn.execute(statement, VALUES)


async def _in_one_statement(storage: SessionStorage, statement: Any) -> None:
    await storage.uow._run_statement(lambda conn: conn.execute(statement, VALUES))


UNITS = {
    "read": _in_read,
    "snapshot": _in_snapshot,
    "write": _in_write,
    "savepoint": _in_savepoint,
    "one_statement": _in_one_statement,
}


@pytest.mark.parametrize("statement", [UNBINDABLE, MISSING_TABLE], ids=["driver", "server"])
@pytest.mark.parametrize("unit", list(UNITS))
async def test_a_failed_statement_leaves_no_broken_connection_in_the_pool(
    manager: SessionManager, storage: SessionStorage, unit: str, statement: Any
) -> None:
    session_id = await _seed(manager, storage)
    for _ in range(3):  # the same failure again and again, on whatever connection is next
        with pytest.raises(SessionStoreError):
            await UNITS[unit](storage, statement)
        assert storage.engine.pool.checkedout() == 0
        await _twenty_valid_calls(manager, storage, session_id)


async def test_a_caller_exception_keeps_its_connection(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Only a failure of the database or the driver discards a connection: an exception
    the caller raised between statements rolls back and keeps it (no reconnect)."""
    session_id = await _seed(manager, storage)
    opened: list[object] = []
    sa.event.listen(storage.engine.sync_engine, "connect", lambda *a: opened.append(a))
    with pytest.raises(LookupError):
        async with storage.uow.write() as tx:
            await tx.sessions.get(KEY)
            raise LookupError("the caller's own")
    await _twenty_valid_calls(manager, storage, session_id)
    assert opened == []
