"""SessionStorage: the engine's lifecycle (``db/lifecycle.py``), the unit-of-work factory,
and row-level CRUD.

``storage.uow`` opens units of work (``db/uow.py``): ``write()``, ``read()``,
``snapshot()``, each yielding the repositories bound to one connection. The methods are the
single-table operations of the older store's storage API, grouped by table in mixins over
:class:`StorageLifecycle`: each checks its arguments in the value domain of
docs/semantics.md#values, then calls one use case, which opens one unit of work. Use cases
that change several rows at once (reset, branch, truncate, compaction, retention, import)
live in ``usecases/`` and ``transfer/`` and open their own unit of work. Returned models
are detached: callers may mutate them and hand them back.
"""

from __future__ import annotations

from ..db.lifecycle import StorageLifecycle, StorageNotConnectedError
from ..errors import StaleEpochError
from ..observe import instrumented
from .archives import ArchiveRowOperations
from .history import HistoryRowOperations
from .leases import CompactionLeaseOperations
from .search import SearchOperations
from .sessions import SessionRowOperations


# Every public coroutine is an operation "storage.<name>" (debug record, span, histogram);
# opening the engine without migrating and closing it run no statement.
@instrumented(
    "storage.",
    system=lambda storage: storage.backend,
    exclude=frozenset({"connect_without_migrating", "close"}),
)
class SessionStorage(
    SessionRowOperations,
    HistoryRowOperations,
    SearchOperations,
    CompactionLeaseOperations,
    ArchiveRowOperations,
    StorageLifecycle,
):
    """The durable store: SQLite (``":memory:"``, a path) or PostgreSQL (a URL).

    ``SessionStorage()`` without a target is ``":memory:"``, a database that lives only as
    long as the storage; pass a path or a URL to keep anything. The embedded file the
    command line uses by default is ``config.resolve_dsn()``'s (``~/.opensquilla/sessions.db``).

    ``create=True`` (the default) creates a missing SQLite file (0600, in 0700 directories);
    ``create=False`` opens an existing database only: a missing file raises
    ``DatabaseNotFoundError`` and nothing is created (the command line's reading commands
    open this way). A PostgreSQL database is never created, whatever ``create`` says.
    ``layout="partitioned[:N]"`` (PostgreSQL) creates an empty database's tables
    hash-partitioned by ``session_key`` (docs/scaling.md#the-partitioned-layout).
    """


__all__ = ["SessionStorage", "StaleEpochError", "StorageLifecycle", "StorageNotConnectedError"]
