"""The DBAPI of a ``:memory:`` SQLite store: one connection, pinned for the store's life
(used by ``engine.py``'s ``StaticPool``; closed only by ``engine.dispose_engine``)."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy.util.concurrency import await_


class PinnedMemoryDBAPI:
    """The DBAPI for a ``:memory:`` store: one connection for the store's whole life.

    An in-memory SQLite database lives exactly as long as the one connection that opened
    it. SQLAlchemy invalidates (closes) a connection whenever an operation on it is
    interrupted by a cancellation, a timeout or a ``KeyboardInterrupt``, and then
    ``StaticPool`` opens a new one: a new, empty, unmigrated database, every session gone.

    So this module hands the pool the same connection every time it asks for one, and
    that connection ignores ``close()`` and ``terminate()``. Only ``engine.dispose_engine``
    really closes it. When the pool asks again after an invalidation, any transaction the
    interrupted operation left open is rolled back first. The rollback runs on the
    connection's own aiosqlite thread, which runs its calls one after another, so it
    happens after the statement that was cancelled mid-flight has finished: nothing of an
    interrupted unit of work is ever committed, and nothing committed is ever lost.
    Everything else is the wrapped module's (lean or SQLAlchemy's own adapter).
    """

    def __init__(self, dbapi: Any | None) -> None:
        if dbapi is None:  # the lean adapter is unavailable: wrap SQLAlchemy's own
            import aiosqlite
            from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_dbapi

            dbapi = AsyncAdapt_aiosqlite_dbapi(aiosqlite, sqlite3)
        self._dbapi: Any = dbapi
        self._pinned: Any = None
        self.reconnected = False  # the pool has asked again (after an invalidation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dbapi, name)

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        """The store's connection (opened on first use); called from the pool's greenlet."""
        pinned = self._pinned
        if pinned is None:
            pinned = self._dbapi.connect(*args, **kwargs)
            pinned.__class__ = _pinned_class(type(pinned))
            self._pinned = pinned
            return pinned
        # A reconnect after an invalidation: the data is all there, and the connection is
        # set up already; only an interrupted transaction may be left, and it must never
        # be continued or committed.
        self.reconnected = True
        if hasattr(pinned, "_pending_begin"):
            pinned._pending_begin = None
        await_(pinned._connection.rollback())
        return pinned

    async def close(self) -> None:
        """Really close the connection (the database is gone afterwards); idempotent."""
        pinned, self._pinned = self._pinned, None
        if pinned is not None:
            await pinned._connection.close()


_PINNED_CLASSES: dict[type[Any], type[Any]] = {}


def _pinned_class(base: type[Any]) -> type[Any]:
    """``base`` with ``close()``/``terminate()`` that keep the connection open (same slots,
    so an adapter instance can take this class)."""

    def keep_open(self: Any) -> None:
        return None

    pinned = _PINNED_CLASSES.get(base)
    if pinned is None:
        pinned = type(
            f"Pinned{base.__name__}",
            (base,),
            {"__slots__": (), "close": keep_open, "terminate": keep_open},
        )
        _PINNED_CLASSES[base] = pinned
    return pinned
