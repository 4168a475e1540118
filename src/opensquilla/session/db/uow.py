"""Units of work: one connection and one transaction, and the repositories bound to it.

``async with uow.write() as tx:`` gives a :class:`Transaction` whose repositories
(``tx.sessions``, ``tx.transcript``, ``tx.summaries``, ``tx.states`` (context states),
``tx.session_states`` and ``tx.scope_states`` (session and scoped state), ``tx.overview``,
``tx.rows``, ``tx.search``, ``tx.leases``, ``tx.archives``, ``tx.compaction`` (a
compaction's rows)) all run on that one connection;
repositories never commit, the unit of work does. A use case opens the unit of work it needs and
decides what it holds.

* ``write()``: all-or-nothing; every statement inside commits together or not at all. On
  SQLite it begins with ``BEGIN IMMEDIATE`` (the write lock up front, so it never fails
  half-way on a busy snapshot) and, within one process, writers queue on an asyncio lock
  instead of spinning in SQLite's busy handler; other processes wait through the busy
  timeout.
* ``append_in_one_statement()``: the fenced append as exactly one statement, which the
  database applies atomically on its own, in autocommit: no BEGIN/COMMIT round trips, and
  the checkout, the statement and the return in one crossing into SQLAlchemy's greenlet
  (where :meth:`UnitOfWork.appends_in_one_statement`); on the pool's DBAPI connection while
  nothing listens for statements (``db/direct_statement.py``), else through a ``Connection``.
* ``read()``: statements in autocommit mode, each consistent on its own (our reads are
  single statements); ``snapshot()`` gives one consistent snapshot for several statements.

A ``:memory:`` database has one shared connection, so every unit of work on it takes the
lock. Errors from the database are translated at this seam (``db/errors.py``); anything the
caller raises inside a unit of work rolls it back and propagates unchanged.

A connection on which the database or its driver raised goes back to the pool discarded,
not reused: after a failed statement the driver's bookkeeping may disagree with the server
(asyncpg keeps a transaction it never began as its outermost one, so every later unit of
work on that connection turns into a SAVEPOINT outside any transaction), and one bad
request must not break the calls after it. The next checkout opens a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from ..errors import DatabaseUnavailableError, EventLoopMismatchError
from .direct_statement import refused_connection
from .dsn import StorageTarget
from .engine import BEGIN_OPTION
from .errors import leaves_connection_in_doubt, translate, translated_errors
from .repos import fenced_append
from .repos.compaction_leases import LeaseRepository
from .repos.compaction_rows import CompactionRepository
from .repos.context_states import ContextStateRepository
from .repos.overview import OverviewRepository
from .repos.search import SearchRepository
from .repos.session_archives import ArchiveRepository
from .repos.sessions import SessionRepository
from .repos.states import ScopeStateRepository, SessionStateRepository
from .repos.summaries import SummaryRepository
from .repos.transcript import TranscriptRepository
from .repos.transfer import TransferRepository
from .routing import store_statements
from .statement_watch import own_listeners, view_listeners
from .uow_slots import discard_cancelled, not_interrupted, pool_slots
from .uow_writes import DirectWrites

T = TypeVar("T")


class Transaction:
    """The repositories of one unit of work, bound to its connection."""

    __slots__ = (
        "archives",
        "compaction",
        "leases",
        "overview",
        "rows",
        "scope_states",
        "search",
        "session_states",
        "sessions",
        "states",
        "summaries",
        "transcript",
    )

    def __init__(self, conn: AsyncConnection) -> None:
        self.sessions = SessionRepository(conn)
        self.transcript = TranscriptRepository(conn)
        self.summaries = SummaryRepository(conn)
        self.states = ContextStateRepository(conn)
        self.overview = OverviewRepository(conn)
        self.rows = TransferRepository(conn)
        self.search = SearchRepository(conn)
        self.leases = LeaseRepository(conn)
        self.archives = ArchiveRepository(conn)
        self.compaction = CompactionRepository(conn)
        self.session_states = SessionStateRepository(conn)
        self.scope_states = ScopeStateRepository(conn)


class UnitOfWork(DirectWrites):
    """An engine and the locks that make units of work safe on it (the hot writes of one
    statement or one hop, on the pool's DBAPI connection: :class:`.uow_writes.DirectWrites`)."""

    def __init__(
        self, engine: AsyncEngine, target: StorageTarget, *, append_view: bool | None = None
    ) -> None:
        self.engine = engine
        # The loop the engine's connections belong to: units of work run on it only (a
        # store gives each loop a unit of its own: db/loop_units.py).
        self.loop = asyncio.get_running_loop()
        self.target = target
        self.backend = target.backend
        self._memory = target.memory
        sqlite = target.backend == "sqlite"
        self._write_lock = asyncio.Lock() if sqlite else None
        # SQLite: revision 0008's view, once seen (the database's: another loop's unit of
        # work starts from what this one found).
        self._append_view: bool | None = append_view
        self._slots, self._slot_timeout = pool_slots(engine)
        # Engine views sharing one pool and one event dispatch (listeners on `engine` see
        # every statement); each fixes how its connections begin.
        if sqlite:
            self._writer = engine.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
            self._single = engine.execution_options(**{BEGIN_OPTION: "NONE"})
            self._reader = self._single
            self._snapshot = engine.execution_options(**{BEGIN_OPTION: "DEFERRED"})
        else:
            self._writer = engine
            self._single = engine.execution_options(isolation_level="AUTOCOMMIT")
            self._reader = self._single
            self._snapshot = engine.execution_options(isolation_level="REPEATABLE READ")
        own_listeners(*view_listeners(self._single.sync_engine, engine.sync_engine))
        # What the autocommit view sets on a connection for its statement (the direct path
        # sets and resets it the same way).
        self._isolation_level: str | None = self._single.get_execution_options().get(
            "isolation_level"
        )
        # SQLite's lean adapter (``sqlite_driver``): a write transaction of one statement
        # can run in one hop on a pool connection (:meth:`append_view_batch`).
        self._one_hop = bool(
            getattr(engine.sync_engine.dialect.loaded_dbapi, "one_hop_transactions", False)
        )

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @property
    def append_view(self) -> bool | None:
        """Whether the database has revision 0008's append view (SQLite), once looked up."""
        return self._append_view

    async def appends_in_one_statement(self) -> bool:
        """Whether the append can be one statement here (:meth:`append_in_one_statement`)
        or needs three in ``write()`` (``tx.transcript.append_and_touch``): on SQLite
        it needs RETURNING (3.35.5+) and the view of revision 0008, looked up once (a store
        opened without migrating may be at an older revision)."""
        if self.backend == "postgresql":
            return True
        if not fenced_append.SQLITE_ONE_STATEMENT:
            return False
        if self._append_view is None:
            async with self.read() as tx:
                self._append_view = await tx.transcript.has_append_view()
        return self._append_view

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[Transaction]:
        """A read-write transaction: commits on success, rolls back on any exception."""
        self._check_loop()
        async with (
            self._locked(self._write_lock),
            self._connection(self._writer) as conn,
            conn.begin(),
        ):
            yield Transaction(conn)

    @contextlib.asynccontextmanager
    async def one_statement(self) -> AsyncIterator[Transaction]:
        """A connection in autocommit for write statements each atomic on its own (a pop,
        a delete by id), with the in-process write lock of :meth:`write` held (SQLite):
        no BEGIN/COMMIT round trips. The use case runs one write statement in it (and at
        most reads besides)."""
        self._check_loop()
        async with self._locked(self._write_lock), self._connection(self._single) as conn:
            yield Transaction(conn)
            await conn.commit()

    async def _run_direct(
        self,
        call: Callable[[], Any],
        *,
        on_cancel: Callable[[], None] | None = None,
        cancel_statement: bool = False,
    ) -> Any:
        """``call`` (``direct_statement``'s: a statement on the pool's DBAPI connection), in
        one greenlet; the same lock, pool slot, run-to-its-end and error translation as
        :meth:`_run_statement` (``on_cancel``, ``cancel_statement``: what a cancellation
        does, ``uow_slots.not_interrupted``)."""
        self._check_loop()
        # ``async with self._locked(...), self._pool_slot(), translated_errors():`` written
        # out: three context managers cost a tenth of the append's own Python.
        lock = self._write_lock
        if lock is not None:
            await lock.acquire()
        try:
            slots = self._slots
            if slots is not None:
                await self._acquire_slot(slots)
            try:
                return await not_interrupted(
                    greenlet_spawn(call), on_cancel, cancel_statement=cancel_statement
                )
            except Exception as exc:
                mapped = translate(exc)
                if mapped is None:
                    raise
                raise mapped from exc
            finally:
                if slots is not None:
                    slots.release()
        finally:
            if lock is not None:
                lock.release()

    async def _run_statement(self, work: Callable[[Connection], T]) -> T:
        """``work(connection)`` (synchronous, exactly one write statement, atomic by itself)
        on a connection of the autocommit view, in one greenlet; the in-process write lock
        and the error translation as every write unit of work has them."""
        self._check_loop()
        async with self._locked(self._write_lock), self._pool_slot(), translated_errors():
            with store_statements():
                return await not_interrupted(
                    greenlet_spawn(_run_on_connection, self._single.sync_engine, work)
                )

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[Transaction]:
        """Reads, each statement consistent on its own (autocommit)."""
        self._check_loop()
        lock = self._write_lock if self._memory else None
        async with self._locked(lock), self._connection(self._reader) as conn:
            yield Transaction(conn)
            await conn.rollback()

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[Transaction]:
        """Reads from one snapshot: several statements that must agree."""
        self._check_loop()
        lock = self._write_lock if self._memory else None
        async with self._locked(lock), self._connection(self._snapshot) as conn, conn.begin():
            yield Transaction(conn)

    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self.loop:
            kind = "a ':memory:' database" if self._memory else "the application's engine"
            raise EventLoopMismatchError(
                "this SessionStorage was connected on another event loop (an earlier "
                f"asyncio.run()?), and its connections ({kind}) belong to that loop; a file "
                "or PostgreSQL DSN gets a pool per event loop: use one, or open one storage "
                "per loop, or from synchronous code use opensquilla.session.SyncSessionManager"
            )

    @contextlib.asynccontextmanager
    async def _connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        with store_statements():
            async with self._connection_of(engine) as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def _connection_of(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        async with self._pool_slot(), translated_errors():
            conn = engine.connect()
            try:
                # The checkout (perhaps a new connection, the pre-ping) runs to its end.
                if self.is_postgres:  # a new connection, a pre-ping: network round trips
                    await not_interrupted(conn.start())
                else:
                    await conn.start()
            except OSError as exc:
                raise refused_connection(exc) from exc
            except asyncio.CancelledError:
                if conn.sync_connection is not None:  # checked out meanwhile: hand it back
                    await not_interrupted(conn.close())
                raise
            try:
                yield conn
            except asyncio.CancelledError:
                # A statement may be in flight: the driver is cancelling it on the server.
                # Let that finish, then throw the connection away, both to their end.
                if self.is_postgres:
                    await not_interrupted(discard_cancelled(conn))
                raise
            except BaseException as exc:
                if leaves_connection_in_doubt(exc):
                    await conn.invalidate()
                raise
            finally:
                await not_interrupted(conn.close())

    @contextlib.asynccontextmanager
    async def _pool_slot(self) -> AsyncIterator[None]:
        """One of the pool's connections (``pool_size + max_overflow``) for this unit of
        work, waited for here, where a cancellation is clean, rather than inside the pool,
        where it would interrupt the driver (:func:`not_interrupted`). The wait is bounded
        by the pool's own timeout."""
        slots = self._slots
        if slots is None:
            yield
            return
        await self._acquire_slot(slots)
        try:
            yield
        finally:
            slots.release()

    async def _acquire_slot(self, slots: asyncio.Semaphore) -> None:
        """Take one of ``slots`` (:meth:`_pool_slot`), waiting at most the pool's timeout."""
        try:
            if slots.locked():
                await asyncio.wait_for(slots.acquire(), self._slot_timeout)
            else:
                await slots.acquire()  # one is free: taken at once, no suspension
        except TimeoutError:
            raise DatabaseUnavailableError(
                f"no database connection came free within {self._slot_timeout:g} s "
                "(every connection of the pool is in use: pool_size + max_overflow)"
            ) from None

    @staticmethod
    @contextlib.asynccontextmanager
    async def _locked(lock: asyncio.Lock | None) -> AsyncIterator[None]:
        if lock is None:
            yield
            return
        async with lock:
            yield


def _run_on_connection(engine: Engine, work: Callable[[Connection], T]) -> T:
    """In SQLAlchemy's greenlet: check a connection out, run ``work`` on it, commit (the
    statement committed itself in autocommit; this ends SQLAlchemy's own transaction
    bookkeeping without a rollback), return it to the pool."""
    try:
        conn = engine.connect()
    except OSError as exc:
        raise refused_connection(exc) from exc
    with conn:
        try:
            result = work(conn)
            conn.commit()
        except BaseException as exc:
            if leaves_connection_in_doubt(exc):
                conn.invalidate()
            raise
        return result
