"""What the framework integrations share: one store per DSN, and the framework check.

A framework builds its session objects freely (one per request, never closed, in its own
tests and in most applications); an integration that opened a pool per session object would
exhaust a PostgreSQL server's connection slots. So a session given a DSN leases the one
:class:`~opensquilla.session.SessionStorage` of the process for that DSN: the store is made
and connected on the first lease's first call, each event loop that calls it gets its own
engine (docs/sync.md#loops), and the store is closed when the last lease is released.
Sessions that are never closed keep it, which is one pool, not one per session.

``":memory:"`` is never shared: like the frameworks' own ``":memory:"`` sessions, each such
session has a database of its own (one pinned connection, one event loop).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import weakref
from dataclasses import dataclass, field
from typing import Self

from ..storage import SessionStorage

MEMORY = ":memory:"


def require_framework(module: str, *, extra: str, framework: str) -> None:
    """Raise ``ImportError`` naming the extra when ``module`` cannot be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(
            f"{framework} is not installed: the integration needs the '{module}' package; "
            f"install it with: pip install 'opensquilla-session[{extra}]'"
        )


class ClosesOnExit:
    """``async with`` for an integration's object: leaving the block awaits ``close()``."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@dataclass(eq=False)
class _Shared:
    storage: SessionStorage
    leases: int = 0
    connect_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary
    )


_registry: dict[str, _Shared] = {}
_registry_lock = threading.Lock()


def shared_storage_count() -> int:
    """How many DSNs have a shared store open now (for tests and diagnostics)."""
    with _registry_lock:
        return len(_registry)


class StorageLease:
    """An integration's hold on a store: the caller's own, or the shared one of a DSN.

    ``StorageLease(storage)`` uses the caller's store, connects it if it is not connected,
    and never closes it. ``StorageLease("postgresql://...")`` (or a SQLite path) leases the
    process's store for that DSN; :meth:`release` gives the lease back, and the last one
    closes the store. ``":memory:"`` makes a private store, closed on release.
    """

    def __init__(self, target: SessionStorage | str) -> None:
        self._released = False
        self._entry: _Shared | None = None
        self._key: str | None = None
        if isinstance(target, SessionStorage):
            self._storage = target
            self._owned = False
            return
        if not isinstance(target, str) or not target:
            raise TypeError(
                "storage must be a SessionStorage or a DSN string (a SQLite path, "
                f"':memory:' or a postgresql:// URL), not {type(target).__name__}"
            )
        self._owned = True
        if target == MEMORY:
            self._storage = SessionStorage(MEMORY)
            self._entry = _Shared(self._storage, leases=1)
            return
        with _registry_lock:
            entry = _registry.get(target)
            if entry is None:
                entry = _registry[target] = _Shared(SessionStorage(target))
            entry.leases += 1
        self._entry, self._key = entry, target
        self._storage = entry.storage

    @property
    def owned(self) -> bool:
        """True when the lease came from a DSN (the integration releases it)."""
        return self._owned

    async def storage(self) -> SessionStorage:
        """The store, connected (brought to head on its first use)."""
        if self._released:
            raise RuntimeError("this session was closed: its store was released")
        storage = self._storage
        if storage.is_connected:
            return storage
        if self._entry is None:  # the caller's store: connecting it is idempotent
            await storage.connect()
            return storage
        loop = asyncio.get_running_loop()
        with _registry_lock:
            lock = self._entry.connect_locks.get(loop)
            if lock is None:
                lock = self._entry.connect_locks[loop] = asyncio.Lock()
        async with lock:
            if not storage.is_connected:
                await storage.connect()
        return storage

    async def release(self) -> None:
        """Give the lease back (once; later calls do nothing); the last closes the store."""
        if self._released or not self._owned:
            self._released = True
            return
        self._released = True
        entry = self._entry
        assert entry is not None
        with _registry_lock:
            entry.leases -= 1
            last = entry.leases == 0
            if last and self._key is not None and _registry.get(self._key) is entry:
                del _registry[self._key]
        if last:
            await entry.storage.close()
