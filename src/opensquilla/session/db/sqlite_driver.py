"""A leaner aiosqlite adapter for SQLAlchemy: one thread hop per statement.

aiosqlite runs every call on its own thread, and SQLAlchemy's stock adapter makes four
calls per statement (create a cursor, execute, fetch, close) plus a ROLLBACK whenever a
pooled connection is returned. Each call is a round trip between the event loop and that
thread, and those trips, not SQLite, were most of the cost of a small write.

This adapter executes, fetches and closes in one call on the aiosqlite thread, runs a
transaction's BEGIN in the same call as its first statement (and, when asked,
``commit_with_next``, its COMMIT in the same call as its last: the batch append), and
skips COMMIT/ROLLBACK when SQLite says no transaction is open. SQL, parameters, results, errors
and SQLAlchemy's events are unchanged: the same statements still go through the engine.
It is passed to ``create_async_engine(module=...)``; if SQLAlchemy's or aiosqlite's
internals ever differ from what it expects, :func:`lean_dbapi` returns ``None`` and the
stock adapter is used.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

_Outcome = tuple[Any, list[Any] | None, int, int | None]


def _run_one(
    conn: sqlite3.Connection,
    operation: str,
    parameters: Any,
    begin: str | None = None,
    commit: list[Any] | None = None,
) -> _Outcome:
    """On the aiosqlite thread: (begin,) execute, fetch everything, close (and, with
    ``commit[0]`` still ``True``, commit the transaction once the statement succeeded,
    and when ``commit[1]`` is there, returned exactly that many rows: the event loop sets
    ``commit[0]`` to ``False`` when the statement's caller is cancelled)."""
    if begin is not None:
        conn.execute(begin)
    cursor = conn.cursor()
    try:
        if parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else None
        outcome = description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()
    if (
        commit is not None
        and commit[0]
        and conn.in_transaction
        and (len(commit) == 1 or len(rows or ()) == commit[1])
    ):
        conn.commit()
    return outcome


def _run_many(
    conn: sqlite3.Connection, operation: str, parameters: Sequence[Any], begin: str | None = None
) -> _Outcome:
    if begin is not None:
        conn.execute(begin)
    cursor = conn.cursor()
    try:
        cursor.executemany(operation, parameters)
        return cursor.description, None, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


def _cancelling() -> bool:
    """Whether the running task has a cancellation requested and not yet delivered."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def lean_dbapi() -> Any | None:
    """The adapted DBAPI module for ``create_async_engine(module=...)``, or ``None``."""
    try:
        import aiosqlite
        from sqlalchemy.dialects.sqlite.aiosqlite import (
            AsyncAdapt_aiosqlite_connection,
            AsyncAdapt_aiosqlite_cursor,
            AsyncAdapt_aiosqlite_dbapi,
        )
        from sqlalchemy.util import EMPTY_DICT
        from sqlalchemy.util.concurrency import await_

        if not hasattr(aiosqlite.Connection, "_execute"):
            return None
    except ImportError:  # pragma: no cover - depends on installed versions
        return None

    class LeanCursor(AsyncAdapt_aiosqlite_cursor):
        __slots__ = ("_description", "_lastrowid", "_rowcount")

        def __init__(self, adapt_connection: Any) -> None:
            # No driver cursor: each execute makes, uses and closes one on the thread.
            self._adapt_connection = adapt_connection
            self._connection = adapt_connection._connection
            self._cursor = None  # type: ignore[assignment]
            self._soft_closed_memoized = EMPTY_DICT
            self._rows = collections.deque()
            self._description: Any = None
            self._rowcount = -1
            self._lastrowid: int | None = None

        @property
        def description(self) -> Any:
            return self._description

        @property
        def rowcount(self) -> int:
            return self._rowcount

        @property
        def lastrowid(self) -> Any:
            return self._lastrowid

        def _keep(self, outcome: _Outcome) -> None:
            self._description, rows, self._rowcount, self._lastrowid = outcome
            self._rows = collections.deque(rows) if rows is not None else collections.deque()

        async def _execute_async(self, operation: Any, parameters: Any) -> Any:
            adapt: Any = self._adapt_connection
            async with adapt._execute_mutex:
                begin, adapt._pending_begin = adapt._pending_begin, None
                fold, adapt._commit_next = adapt._commit_next, None
                # A caller cancelled already, or while the statement runs, does not commit:
                # the thread checks just before its COMMIT (a cancellation later than that
                # meets the COMMIT itself, as it would in a hop of its own).
                commit = fold if fold is not None and not _cancelling() else None
                connection = self._connection
                try:
                    self._keep(
                        await connection._execute(
                            _run_one, connection._conn, operation, parameters, begin, commit
                        )
                    )
                except asyncio.CancelledError:
                    if commit is not None:
                        commit[0] = False
                    raise

        async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
            adapt: Any = self._adapt_connection
            async with adapt._execute_mutex:
                begin, adapt._pending_begin = adapt._pending_begin, None
                connection = self._connection
                self._keep(
                    await connection._execute(
                        _run_many, connection._conn, operation, list(seq_of_parameters), begin
                    )
                )

        async def _async_soft_close(self) -> None:
            return None

        def close(self) -> None:
            self._rows.clear()

    class LeanConnection(AsyncAdapt_aiosqlite_connection):
        __slots__ = ("_commit_next", "_pending_begin")
        _cursor_cls = LeanCursor

        def __init__(self, dbapi: Any, connection: Any) -> None:
            super().__init__(dbapi, connection)
            self._pending_begin: str | None = None
            self._commit_next: list[Any] | None = None

        def commit_with_next(
            self, rows: int | None = None, *, token: list[Any] | None = None
        ) -> list[Any]:
            """Commit the open transaction on the thread right after the next statement
            succeeds (and, given ``rows``, returned exactly that many rows), in the same
            call: the transaction's last statement and its COMMIT in one hop. The
            ``commit()`` that follows finds no transaction open and makes no hop of its
            own; a statement that fails (or returns another number of rows) leaves the
            transaction open for the caller's decision. Returns the COMMIT's token: setting
            its first item to ``False`` before the thread reaches the COMMIT calls it off
            (what a cancellation of the statement's caller does); ``token``: that list,
            made by the caller (``[True]`` or ``[True, rows]``)."""
            if token is None:
                token = [True] if rows is None else [True, rows]
            self._commit_next = token
            return token

        def defer_begin(self, statement: str) -> None:
            """Run ``statement`` (a BEGIN) on the thread just before the next statement,
            in the same call; a transaction with no statement never begins at all."""
            self._pending_begin = statement

        def _in_transaction(self) -> bool:
            try:
                return bool(self._connection._conn.in_transaction)
            except Exception:  # closed or not yet open: let the stock path decide
                return True

        def rollback(self) -> None:
            self._pending_begin = None
            self._commit_next = None
            if self._in_transaction():
                super().rollback()

        def commit(self) -> None:
            self._pending_begin = None
            self._commit_next = None
            if self._in_transaction():
                super().commit()

    class LeanDBAPI(AsyncAdapt_aiosqlite_dbapi):
        # What ``uow`` checks before it runs a transaction in one hop on a pool connection.
        one_hop_transactions = True

        def connect(self, *arg: Any, **kw: Any) -> Any:
            connection = self.aiosqlite.connect(*arg, **kw)
            connection._thread.daemon = True
            return LeanConnection(self, await_(connection))

    try:
        return LeanDBAPI(aiosqlite, sqlite3)
    except Exception:  # pragma: no cover - depends on installed versions
        log.debug("lean aiosqlite adapter unavailable; using SQLAlchemy's", exc_info=True)
        return None
