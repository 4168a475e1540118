"""Units of work: one connection and one transaction per storage operation.

``write()`` is all-or-nothing: every statement inside commits together or not at all.
On SQLite it begins with ``BEGIN IMMEDIATE`` and, within one process, writers queue on an
asyncio lock instead of spinning in SQLite's busy handler (other processes still wait
through the busy timeout). A ``:memory:`` database has a single shared connection, so
every unit of work on it, reads included, takes that lock.

Errors from the database are translated at this seam (``db/errors.py``); anything the
caller raises inside a unit of work rolls it back and propagates unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..errors import DatabaseUnavailableError
from .dsn import StorageTarget
from .engine import BEGIN_OPTION
from .errors import translated_errors


class Database:
    """An engine and the locks that make units of work safe on it."""

    def __init__(self, engine: AsyncEngine, target: StorageTarget) -> None:
        self.engine = engine
        self.backend = target.backend
        self._sqlite = target.backend == "sqlite"
        self._memory = target.memory
        self._write_lock = asyncio.Lock() if self._sqlite else None

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A read-write transaction: commits on success, rolls back on any exception."""
        async with (
            self._locked(self._write_lock),
            self._connection("IMMEDIATE") as conn,
            conn.begin(),
        ):
            yield conn

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction: one consistent snapshot for every statement inside."""
        lock = self._write_lock if self._memory else None
        async with self._locked(lock), self._connection("DEFERRED") as conn, conn.begin():
            yield conn

    @contextlib.asynccontextmanager
    async def _connection(self, sqlite_begin: str) -> AsyncIterator[AsyncConnection]:
        async with translated_errors():
            try:
                conn = await self.engine.connect()
            except OSError as exc:
                raise DatabaseUnavailableError(f"cannot connect to the database: {exc}") from exc
            try:
                if self._sqlite:
                    await conn.execution_options(**{BEGIN_OPTION: sqlite_begin})
                yield conn
            finally:
                await conn.close()

    @staticmethod
    @contextlib.asynccontextmanager
    async def _locked(lock: asyncio.Lock | None) -> AsyncIterator[None]:
        if lock is None:
            yield
            return
        async with lock:
            yield
