"""The package's error tree.

Every error the store raises derives from :class:`SessionStoreError`. Where the contract
expects a builtin (a duplicate key is a ``ValueError``, a missing session is a ``KeyError``),
the error also derives from that builtin, so ``except KeyError`` keeps working while
``except SessionStoreError`` catches everything that came from us.
"""

from __future__ import annotations


class SessionStoreError(Exception):
    """Root of every error raised by opensquilla-session."""

    def __str__(self) -> str:
        # KeyError.__str__ repr()s its argument; our messages are sentences.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class ConfigurationError(SessionStoreError, ValueError):
    """A storage target, DSN or setting that cannot be used."""


class StoragePathError(ConfigurationError, OSError):
    """A SQLite storage path that cannot be a database file: not encodable as a file name
    (a lone surrogate), too long, or in a place where no file can be created (``/proc``,
    a missing or read-only directory). Raised naming the path, before anything is opened;
    also an ``OSError``, as the file system's own refusal was; that refusal, if any, is the
    ``__cause__``."""


class InvalidInputError(SessionStoreError, ValueError):
    """A value the store refuses before anything is written."""


class InvalidSessionKeyError(InvalidInputError):
    """A session key that is empty, too long or holds characters a key may not hold."""


class ProtectedFieldError(InvalidInputError):
    """An attempt to change a field that only the store itself may change."""


class SessionExistsError(SessionStoreError, ValueError):
    """A session with this key already exists."""


class SessionKeyConflictError(SessionExistsError):
    """``NEW_CHAT`` asked for a key that is already in use."""


class SessionIdInUseError(SessionExistsError, InvalidInputError):
    """A session id (one generation of one session) that another session already holds.

    Delete, prune, cap and reset act on every row carrying a session id, so a second
    session taking one would destroy, or take over, the first one's rows. Refused before
    anything is written; both a duplicate (``SessionExistsError``) and a refused value
    (``InvalidInputError``), so either ``except`` catches it.
    """


class SessionNotFoundError(SessionStoreError, KeyError):
    """No session row has this key."""


class MessageNotFoundError(SessionStoreError, KeyError):
    """No transcript entry has this message id."""


class TurnOutcomeUnavailableError(SessionStoreError, KeyError):
    """A fork through a turn (``branch(..., fork_through_turn_id=...)``) needs the turn's
    terminal outcome, which upstream keeps with its agent tasks, outside this store's
    tables: refused before anything is written. A ``KeyError``, as upstream's "Completion
    state not found" when a turn has no task."""


class StaleEpochError(SessionStoreError):
    """A write was fenced to an epoch (or generation) that is no longer current."""


class StaleGenerationError(StaleEpochError):
    """A whole-row write carried a session generation older than the stored one."""


class SessionGenerationChangedError(StaleGenerationError, KeyError):
    """A generation-checked write (``upsert_session(node, expected_session_id=...)``) found
    the key's row missing or holding another generation: nothing was written, and the row
    is never recreated. A ``KeyError``, as upstream HEAD raises."""


class StaleStateError(SessionStoreError):
    """A compare-and-set of a session's or a scope's state (``update_state`` /
    ``update_scope_state`` with ``expected_revision``) found another revision stored:
    another writer got there first, or a reset started a new state. Nothing was written.
    ``target`` names the state (``session 'agent:main:x'``, ``app scope 'my-app'``),
    ``expected_revision`` and ``actual_revision`` the two revisions."""

    def __init__(self, target: str, expected_revision: int, actual_revision: int) -> None:
        super().__init__(
            f"the state of {target} is at revision {actual_revision}, not the expected "
            f"{expected_revision}; nothing was written (read it again and retry)"
        )
        self.target = target
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.target, self.expected_revision, self.actual_revision))


class DatabaseError(SessionStoreError):
    """The database refused or failed an operation; the driver's error is the ``__cause__``."""


class DatabaseUnavailableError(DatabaseError):
    """The database could not be reached or the connection was lost."""


class DatabaseNotFoundError(DatabaseUnavailableError):
    """The database does not exist and was not created: a SQLite file opened with
    ``SessionStorage(..., create=False)``, or a PostgreSQL database the server lacks."""


class IntegrityViolationError(DatabaseError):
    """A constraint of the schema refused the change (nothing was written)."""


class CompactionTimeoutError(SessionStoreError, TimeoutError):
    """A compaction ran past ``CompactionConfig.total_timeout_seconds`` (nothing was written).

    ``phase`` names where it was (``read``, ``summarize`` or ``commit``: a commit is checked
    against the deadline before it begins and, once begun, runs to its end); ``timeout`` is
    the bound in seconds. A ``TimeoutError``, so ``except TimeoutError`` catches it.
    """

    def __init__(self, phase: str, timeout: float) -> None:
        super().__init__(
            f"compaction timed out in its {phase} phase (total_timeout_seconds={timeout:g}); "
            "nothing was written"
        )
        self.phase = phase
        self.timeout = timeout


class ArchiveWriteError(SessionStoreError, OSError):
    """A reset's archive could not be written (or published) while the manager requires
    one (``SessionManager(..., archive_required=True)``): the reset was rolled back, the
    session is as it was. The underlying failure is the ``__cause__``. An ``OSError``, as
    upstream HEAD raises."""


class EventLoopMismatchError(SessionStoreError, RuntimeError):
    """A ``:memory:`` storage, or one on an application's engine, was used from an event
    loop other than the one that connected it (a file or PostgreSQL storage gives each loop
    an engine of its own: docs/sync.md#loops).

    Its connections belong to that loop (``asyncio.run()`` per request makes a new loop
    each time). Use a file or PostgreSQL DSN, open one storage per event loop, or, from
    synchronous code, use ``opensquilla.session.sync.SyncSessionManager``, which keeps one
    loop for its storage.
    """


class MigrationError(SessionStoreError):
    """The schema could not be brought to, or is not at, the expected revision."""


__all__ = [
    "ArchiveWriteError",
    "CompactionTimeoutError",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "EventLoopMismatchError",
    "IntegrityViolationError",
    "InvalidInputError",
    "InvalidSessionKeyError",
    "MessageNotFoundError",
    "MigrationError",
    "ProtectedFieldError",
    "SessionExistsError",
    "SessionGenerationChangedError",
    "SessionIdInUseError",
    "SessionKeyConflictError",
    "SessionNotFoundError",
    "SessionStoreError",
    "StaleEpochError",
    "StaleGenerationError",
    "StaleStateError",
    "StoragePathError",
    "TurnOutcomeUnavailableError",
]
