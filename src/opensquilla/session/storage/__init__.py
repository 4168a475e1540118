"""SessionStorage: the engine's lifecycle, the unit-of-work factory, and row-level CRUD.

``storage.uow`` opens units of work (``db/uow.py``): ``write()``, ``read()``,
``snapshot()``, each yielding the repositories bound to one connection. The methods are the
single-table operations of the older store's storage API (each one unit of work, its
arguments checked in the value domain of docs/semantics.md#values), grouped by table in
mixins over :class:`StorageLifecycle`. Use cases that change several rows at once (reset,
branch, truncate, compaction, retention, import) live in ``usecases/`` and ``transfer/``
and open their own unit of work. Returned models are detached: callers may mutate them and
hand them back.
"""

from __future__ import annotations

from ..errors import StaleEpochError
from .archives import ArchiveRowOperations
from .history import HistoryRowOperations
from .leases import CompactionLeaseOperations
from .lifecycle import StorageLifecycle, StorageNotConnectedError
from .search import SearchOperations
from .sessions import SessionRowOperations


class SessionStorage(
    SessionRowOperations,
    HistoryRowOperations,
    SearchOperations,
    CompactionLeaseOperations,
    ArchiveRowOperations,
    StorageLifecycle,
):
    """The durable store: SQLite (``":memory:"``, a path) or PostgreSQL (a URL)."""


__all__ = ["SessionStorage", "StaleEpochError", "StorageLifecycle", "StorageNotConnectedError"]
