"""Where a statement goes under distribution (docs/scaling.md#keys-and-statements).

Every statement on a table whose rows a session owns (:data:`CHILD_TABLES`: all but
``sessions`` and ``scope_states``) carries ``session_key`` in its ``WHERE`` (or its
``INSERT`` values), so a distributed PostgreSQL (Citus) routes it to the one shard that holds
the session and a partitioned one prunes it to one partition. The few statements that are
about many sessions by nature run inside :func:`cross_session`, which names the operation;
under Citus they fan out to every shard.

The marks are context variables, so they cost a ``ContextVar.set`` per unit of work and
nothing per statement; only the statement audit of the test suite (tests/statement_audit.py)
reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

# The session-owned tables besides ``sessions`` (revision 0010's keys lead with session_key
# on all of them), and the SQLite append view that writes ``transcript_entries``.
CHILD_TABLES: tuple[str, ...] = (
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
    "session_archives",
    "canonical_archive_counts",
    "session_states",
    "compaction_leases",
    "transcript_appends",
)

# The operations that are about many sessions (each fans out under Citus). Naming one that
# is not here is a programming error: a new kind of cross-session statement is documented
# (docs/scaling.md) before it is added.
CROSS_SESSION_OPERATIONS = frozenset(
    {
        "listing",  # pages of sessions, key-prefix listings, the by-id resolution and the
        # check that a session id given to a key is held by no other key
        "retention",  # prune and cap over every session
        "search",  # transcript and title search across sessions
        "stats",  # the store's counts and sizes
        "export",  # every session's rows to a file
        "import",  # a file's sessions into the store
        "copy",  # one store into another
        "repair",  # doctor / repair over the whole database
        "migration",  # schema revisions and their back-fills
    }
)

_OPERATION: ContextVar[str | None] = ContextVar("opensquilla_cross_session", default=None)
_IN_STORE: ContextVar[bool] = ContextVar("opensquilla_store_statement", default=False)


@contextlib.contextmanager
def cross_session(operation: str) -> Iterator[None]:
    """Statements run inside are one documented cross-session ``operation``."""
    if operation not in CROSS_SESSION_OPERATIONS:
        raise ValueError(f"not a documented cross-session operation: {operation!r}")
    token = _OPERATION.set(operation)
    try:
        yield
    finally:
        _OPERATION.reset(token)


def current_operation() -> str | None:
    """The cross-session operation statements run in now, ``None`` for one session's."""
    return _OPERATION.get()


@contextlib.contextmanager
def store_statements() -> Iterator[None]:
    """Statements run inside are the store's own (a unit of work's), not a caller's SQL on
    the store's engine."""
    token = _IN_STORE.set(True)
    try:
        yield
    finally:
        _IN_STORE.reset(token)


def in_store() -> bool:
    """Whether statements run now are the store's own."""
    return _IN_STORE.get()
