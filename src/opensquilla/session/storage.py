"""SessionStorage: the engine's lifecycle and every storage operation, one unit of work each.

Each public method opens exactly one transaction (``db/uow.py``) and runs repository
statements (``db/repos/``) inside it; a method that changes several rows (reset, branch,
truncate, compaction rewrite, retention) is all-or-nothing. Returned models are detached:
callers may mutate them and hand them back.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self, get_args

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import migrate
from .archive import RecoveredArchive, recover_staged_archives, store_tag
from .config import archive_directory
from .db.dsn import StorageTarget, parse_target
from .db.engine import SqliteSynchronous, create_engine, dispose_engine
from .db.errors import translated_errors
from .db.repos import context_states as state_repo
from .db.repos import overview as overview_repo
from .db.repos import sessions as session_repo
from .db.repos import summaries as summary_repo
from .db.repos import transcript as transcript_repo
from .db.repos import transfer as transfer_repo
from .db.tables import sessions as sessions_table
from .db.uow import Database
from .errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    IntegrityViolationError,
    InvalidInputError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    StaleEpochError,
)
from .files import ensure_private_file
from .keys import agent_key_prefix, canonicalize_session_key, normalize_agent_id
from .models import (
    CompactedTranscriptEntry,
    GenerationSnapshot,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    check_integer,
    check_optional_integer,
    check_optional_text,
    check_record,
    check_session_id,
    check_session_values,
    check_text,
)
from .operations import (
    CHILD_TABLES,
    DeletionPreview,
    IfExists,
    SessionRows,
    StoreCounts,
    TableLayout,
)

log = logging.getLogger(__name__)

ForkMode = Literal["none", "full", "prefix"]
RETENTION_BATCH = 500


class StorageNotConnectedError(SessionStoreError, RuntimeError):
    """The storage was used before ``connect()`` or after ``close()``."""


def _check_page(limit: int | None, offset: int) -> None:
    check_optional_integer("limit", limit)
    check_integer("offset", offset)


def _check_millis(name: str, value: object) -> None:
    check_integer(name, value, minimum=-(2**63))


class SessionStorage:
    """The durable store: SQLite (``":memory:"``, a path) or PostgreSQL (a URL)."""

    def __init__(
        self,
        target: str | os.PathLike[str] = ":memory:",
        *,
        sqlite_synchronous: SqliteSynchronous = "FULL",
        pool_size: int | None = None,
        echo: bool = False,
    ) -> None:
        # Settings are checked before anything is opened: a typo must not reach a PRAGMA
        # (the level is spliced into its text) or a pool that never hands out a connection.
        level = sqlite_synchronous.upper() if isinstance(sqlite_synchronous, str) else None
        if level not in get_args(SqliteSynchronous):
            raise ConfigurationError(
                f"sqlite_synchronous must be one of {', '.join(get_args(SqliteSynchronous))}, "
                f"not {sqlite_synchronous!r}"[:200]
            )
        if pool_size is not None and (
            isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1
        ):
            raise ConfigurationError(
                f"pool_size must be a positive integer or None, not {pool_size!r}"[:200]
            )
        if not isinstance(echo, bool):
            raise ConfigurationError(f"echo must be True or False, not {type(echo).__name__}")
        self._target: StorageTarget = parse_target(target)
        self._sqlite_synchronous: SqliteSynchronous = level  # type: ignore[assignment]
        self._pool_size = pool_size
        self._echo = echo
        self._db: Database | None = None
        self._recovered: tuple[RecoveredArchive, ...] = ()

    # -- lifecycle ---------------------------------------------------------------------

    def __repr__(self) -> str:
        state = "connected" if self._db is not None else "not connected"
        return f"SessionStorage({self._target.render()!r}, {state})"

    @property
    def target(self) -> StorageTarget:
        return self._target

    @property
    def backend(self) -> str:
        return self._target.backend

    @property
    def engine(self) -> AsyncEngine:
        """The public ``AsyncEngine``: every statement the store runs goes through it."""
        return self._database.engine

    @property
    def _database(self) -> Database:
        if self._db is None:
            raise StorageNotConnectedError("Storage not connected. Call connect() first.")
        return self._db

    @property
    def is_connected(self) -> bool:
        return self._db is not None

    async def connect(self) -> None:
        """Open the engine and bring the schema to head (a new or legacy database alike)."""
        if self._db is not None:
            return
        if self._target.path is not None:
            ensure_private_file(self._target.path)
        engine = create_engine(
            self._target,
            sqlite_synchronous=self._sqlite_synchronous,
            pool_size=self._pool_size,
            echo=self._echo,
        )
        try:
            async with translated_errors():
                try:
                    await migrate.ensure_head(engine)
                except OSError as exc:
                    raise DatabaseUnavailableError(
                        f"cannot connect to {self._target.render()}: {exc}"
                    ) from exc
        except BaseException:
            await dispose_engine(engine)
            raise
        self._db = Database(engine, self._target)
        await self._recover_reset_archives()

    @property
    def archive_store_tag(self) -> str | None:
        """The name reset archives of this database carry (``None`` for ``:memory:``,
        whose archives no later start could settle)."""
        if self._target.memory:
            return None
        if self._target.path is not None:
            identity = f"sqlite:{self._target.path.resolve()}"
        else:
            url = self._target.url
            identity = f"postgresql://{url.host}:{url.port or 5432}/{url.database}"
        return store_tag(identity)

    @property
    def recovered_archives(self) -> tuple[RecoveredArchive, ...]:
        """What ``connect()`` did with reset archives a crash had left unpublished."""
        return self._recovered

    async def _recover_reset_archives(self) -> None:
        """Publish (or discard) the reset archives a stopped process left staged for this
        database (``archive.recover_staged_archives``). Never fails the start: a problem
        is logged, and the files stay for ``stats`` to report."""
        tag = self.archive_store_tag
        if tag is None:
            return

        async def current_generation(key: str) -> str | None:
            async with self._database.read() as conn:
                node = await session_repo.get(conn, key)
            return node.session_id if node is not None else None

        try:
            self._recovered = tuple(
                await recover_staged_archives(archive_directory(), tag, current_generation)
            )
        except Exception:
            log.warning(
                "could not settle the reset archives left staged in %s",
                archive_directory(),
                exc_info=True,
                extra={"operation": "recover_archives"},
            )

    async def close(self) -> None:
        """Dispose of the engine; idempotent."""
        db, self._db = self._db, None
        if db is not None:
            await dispose_engine(db.engine)

    @classmethod
    async def open(cls, target: str | os.PathLike[str] = ":memory:", **options: object) -> Self:
        storage = cls(target, **options)  # type: ignore[arg-type]
        await storage.connect()
        return storage

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- sessions ----------------------------------------------------------------------

    @staticmethod
    def _canonical_node(node: SessionNode) -> SessionNode:
        node.session_key = canonicalize_session_key(node.session_key)
        node.agent_id = normalize_agent_id(node.agent_id)
        return node

    async def upsert_session(self, node: SessionNode) -> None:
        """Write the whole row; refused (``StaleGenerationError``) for an older generation,
        and (``SessionIdInUseError``) for a session id another key holds."""
        check_record("node", node, SessionNode)
        self._canonical_node(node)
        async with (
            self._generation_guard(node.session_id, node.session_key),
            self._database.write() as conn,
        ):
            await session_repo.claim_generation(conn, node.session_id, node.session_key)
            await session_repo.upsert(conn, node)

    async def create_session(self, node: SessionNode) -> bool:
        """Insert a new row; ``False`` when the key exists (nothing is changed then).

        A session id that another key already holds is refused (``SessionIdInUseError``)
        before anything is written.
        """
        check_record("node", node, SessionNode)
        self._canonical_node(node)
        try:
            async with (
                self._generation_guard(node.session_id, node.session_key, creating=True),
                self._database.write() as conn,
            ):
                await session_repo.claim_generation(conn, node.session_id, node.session_key)
                return await session_repo.insert_new(conn, node)
        except _GenerationRace:
            return False  # the same key and id, created concurrently: the key is taken

    @contextlib.asynccontextmanager
    async def _generation_guard(
        self, session_id: object, session_key: str | None, *, creating: bool = False
    ) -> AsyncIterator[None]:
        """Around a unit of work that gives ``session_key`` the id ``session_id``: the
        unique index on ``sessions.session_id`` firing becomes the error our own check
        gives (see :meth:`_generation_violation`)."""
        try:
            yield
        except IntegrityViolationError as exc:
            if not isinstance(session_id, str):
                raise
            error = await self._generation_violation(
                exc, session_id, session_key, creating=creating
            )
            if error is exc:
                raise
            raise error from exc

    async def _generation_violation(
        self,
        exc: IntegrityViolationError,
        session_id: str,
        session_key: str | None,
        *,
        creating: bool = False,
    ) -> Exception:
        """What to raise for a constraint violation while ``session_key`` took
        ``session_id``: a concurrent writer may have taken the id after our check passed,
        and then the unique index refused ours.

        The violation is recognised by what the database holds afterwards, not by an index
        name: another key's session has the id now, ``SessionIdInUseError``; this very key
        has it and we were ``creating`` (two creators of one key with one id),
        ``_GenerationRace`` (the key is taken); otherwise ``exc`` itself, unchanged.
        """
        async with self._database.read() as conn:
            owner = await session_repo.generation_owner(conn, session_id)
        if owner is None:
            return exc
        if owner != session_key:
            return session_repo.generation_in_use(session_id, owner, session_key)
        return _GenerationRace() if creating else exc

    async def get_session(self, session_key: str) -> SessionNode | None:
        key = canonicalize_session_key(session_key)
        async with self._database.read() as conn:
            return await session_repo.get(conn, key)

    async def list_sessions(
        self,
        agent_id: str | None = None,
        status: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        spawned_by: str | None = None,
        *,
        parent_session_key: str | None = None,
    ) -> list[SessionNode]:
        """Sessions by recent activity (``updated_at`` then key, both descending)."""
        _check_page(limit, offset)
        async with self._database.read() as conn:
            return await session_repo.list_sessions(
                conn,
                agent_id=normalize_agent_id(agent_id) if agent_id is not None else None,
                status=str(status) if status is not None else None,
                spawned_by=(
                    canonicalize_session_key(spawned_by) if spawned_by is not None else None
                ),
                parent_session_key=(
                    canonicalize_session_key(parent_session_key)
                    if parent_session_key is not None
                    else None
                ),
                limit=limit,
                offset=offset,
            )

    async def count_sessions(self) -> int:
        async with self._database.read() as conn:
            return await session_repo.count(conn)

    async def delete_session(self, session_key: str) -> bool:
        """Delete the session and every row it owns; ``False`` when there was none."""
        key = canonicalize_session_key(session_key)
        async with self._database.write() as conn:
            return bool(await session_repo.delete_cascade(conn, [key]))

    async def get_epoch(self, session_key: str) -> int:
        key = canonicalize_session_key(session_key)
        async with self._database.read() as conn:
            epoch = await session_repo.get_epoch(conn, key)
        return epoch if epoch is not None else 0

    async def increment_epoch(self, session_key: str) -> int:
        key = canonicalize_session_key(session_key)
        async with self._database.write() as conn:
            epoch = await session_repo.increment_epoch(conn, key)
        if epoch is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return epoch

    async def update_session_fields(
        self, session_key: str, values: dict[str, object]
    ) -> SessionNode:
        """Set only these columns (one statement, no read-modify-write); the new row."""
        key = canonicalize_session_key(session_key)
        values = check_session_values(values)  # each value in its field's domain
        new_id = values.get("session_id")
        async with self._generation_guard(new_id, key), self._database.write() as conn:
            if isinstance(new_id, str):
                await session_repo.claim_generation(conn, new_id, key)
            node = await session_repo.update_fields(conn, key, dict(values))
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return node

    async def finish_session(self, session_key: str, status: str, now: int) -> SessionNode:
        key = canonicalize_session_key(session_key)
        status = check_session_values({"status": status, "ended_at": now})["status"]
        async with self._database.write() as conn:
            node = await session_repo.finish(conn, key, status, now)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return node

    # -- transcript --------------------------------------------------------------------

    async def append_transcript_entry(
        self, entry: TranscriptEntry, *, expected_epoch: int | None = None
    ) -> TranscriptEntry:
        """Insert ``entry`` (its ``id`` is set). With ``expected_epoch`` the insert happens
        only while the session is still the entry's generation (``session_id``) at exactly
        that epoch; otherwise ``StaleEpochError`` and nothing is written."""
        check_record("entry", entry, TranscriptEntry)
        check_optional_integer("expected_epoch", expected_epoch)
        entry.session_key = canonicalize_session_key(entry.session_key)
        async with self._database.write() as conn:
            if expected_epoch is None:
                await session_repo.check_row_generation(conn, entry.session_id, entry.session_key)
                entry.id = await transcript_repo.insert(conn, entry)
                return entry
            new_id = await transcript_repo.insert_fenced(conn, entry, expected_epoch)
            if new_id is None:
                await self._raise_stale(conn, entry, expected_epoch)
            entry.id = new_id
        return entry

    async def append_message_entry(
        self,
        entry: TranscriptEntry,
        *,
        expected_epoch: int,
        now: int,
        token_delta: int = 0,
    ) -> TranscriptEntry:
        """The manager's append: the fence (key, epoch, session id), the insert and the
        session touch (``updated_at``, ``total_tokens + delta``) commit together or not at
        all. On Postgres this is a single statement."""
        check_record("entry", entry, TranscriptEntry)
        check_integer("expected_epoch", expected_epoch)
        _check_millis("now", now)
        check_integer("token_delta", token_delta)
        entry.session_key = canonicalize_session_key(entry.session_key)
        unit = (
            self._database.write_statement if self._database.is_postgres else (self._database.write)
        )
        async with unit() as conn:
            new_id = await conn.run_sync(
                transcript_repo.append_and_touch,
                entry,
                expected_epoch=expected_epoch,
                now=now,
                token_delta=token_delta,
            )
        if new_id is None:
            async with self._database.read() as conn:
                await self._raise_stale(conn, entry, expected_epoch)
        entry.id = new_id
        return entry

    @staticmethod
    async def _raise_stale(conn: AsyncConnection, entry: TranscriptEntry, expected: int) -> None:
        key = entry.session_key
        node = await session_repo.get(conn, key)
        if node is None or node.epoch != expected:
            actual = node.epoch if node is not None else None
            raise StaleEpochError(f"Epoch mismatch for {key}: expected {expected}, got {actual}")
        raise StaleEpochError(
            f"Generation mismatch for {key}: expected {entry.session_id}, got {node.session_id}"
        )

    async def get_transcript(
        self, session_id: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Live rows of one generation, ``ORDER BY created_at ASC, id ASC``, paginated."""
        _check_page(limit, offset)
        async with self._database.read() as conn:
            return await transcript_repo.list_live(conn, session_id, limit=limit, offset=offset)

    async def get_canonical_transcript(
        self, session_id: str, limit: int | None = None, offset: int = 0
    ) -> list[TranscriptEntry]:
        """Compacted archive plus live rows, in transcript order, paginated."""
        _check_page(limit, offset)
        async with self._database.read() as conn:
            return await transcript_repo.list_canonical(
                conn, session_id, limit=limit, offset=offset
            )

    async def count_transcript_entries(self, session_id: str) -> int:
        """Live rows only."""
        async with self._database.read() as conn:
            return await transcript_repo.count_live(conn, session_id)

    async def get_compacted_transcript_entries(
        self, session_id: str, *, compaction_id: str | None = None
    ) -> list[CompactedTranscriptEntry]:
        async with self._database.read() as conn:
            return await transcript_repo.list_archive(conn, session_id, compaction_id=compaction_id)

    async def delete_transcript(self, session_id: str) -> None:
        """Delete the live rows and the compacted archive of one generation."""
        check_text("session_id", session_id)
        async with self._database.write() as conn:
            await transcript_repo.delete_all(conn, session_id)

    # -- summaries ---------------------------------------------------------------------

    async def save_summary(self, summary: SessionSummary) -> SessionSummary:
        """Insert; ``compaction_index`` is assigned in the transaction (max + 1 per session)."""
        check_record("summary", summary, SessionSummary)
        summary.session_key = canonicalize_session_key(summary.session_key)
        async with self._database.write() as conn:
            await session_repo.check_row_generation(conn, summary.session_id, summary.session_key)
            summary.id, summary.compaction_index = await summary_repo.insert(conn, summary)
        return summary

    async def get_all_summaries(self, session_id: str) -> list[SessionSummary]:
        async with self._database.read() as conn:
            return await summary_repo.list_for_session(conn, session_id)

    async def get_latest_summary(self, session_id: str) -> SessionSummary | None:
        async with self._database.read() as conn:
            return await summary_repo.latest(conn, session_id)

    async def delete_summaries(self, session_id: str) -> None:
        check_text("session_id", session_id)
        async with self._database.write() as conn:
            await summary_repo.delete_for_session(conn, session_id)

    async def list_degraded_summaries(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[SessionSummary]:
        """Summaries whose flush receipt is ``degraded_forensic`` or ``failed_retryable``."""
        _check_page(limit, 0)
        prefix = agent_key_prefix(agent_id) if agent_id is not None else None
        async with self._database.read() as conn:
            return await summary_repo.list_degraded(conn, key_prefix=prefix, limit=limit)

    async def update_summary_flush_receipt_status(self, summary_id: int, status: str) -> int:
        check_integer("summary_id", summary_id, minimum=-(2**63))
        check_text("status", status)
        async with self._database.write() as conn:
            return await summary_repo.set_flush_status(conn, summary_id, status)

    async def update_summary_flush_receipt_status_by_compaction(
        self, session_key: str, compaction_id: str, status: str
    ) -> int:
        key = canonicalize_session_key(session_key)
        check_text("compaction_id", compaction_id)
        check_text("status", status)
        async with self._database.write() as conn:
            return await summary_repo.set_flush_status_by_compaction(
                conn, key, compaction_id, status
            )

    # -- context states ----------------------------------------------------------------

    async def save_context_state(self, state: SessionContextState) -> SessionContextState:
        check_record("state", state, SessionContextState)
        state.session_key = canonicalize_session_key(state.session_key)
        async with self._database.write() as conn:
            await session_repo.check_row_generation(conn, state.session_id, state.session_key)
            state.id = await state_repo.insert(conn, state)
        return state

    async def get_context_states(
        self,
        session_key: str,
        *,
        provider: str | None = None,
        state_kind: str | None = None,
        valid_only: bool = True,
    ) -> list[SessionContextState]:
        """States of the key (every generation), ``created_at`` then id order."""
        key = canonicalize_session_key(session_key)
        async with self._database.read() as conn:
            return await state_repo.list_for_key(
                conn, key, provider=provider, state_kind=state_kind, valid_only=valid_only
            )

    async def invalidate_context_states(
        self,
        session_key: str,
        *,
        provider: str | None = None,
        state_kind: str | None = None,
        reason: str = "invalidated",
    ) -> int:
        key = canonicalize_session_key(session_key)
        check_optional_text("provider", provider)
        check_optional_text("state_kind", state_kind)
        check_text("reason", reason)
        async with self._database.write() as conn:
            return await state_repo.invalidate(
                conn, key, provider=provider, state_kind=state_kind, reason=reason
            )

    # -- multi-row operations (one transaction each) -----------------------------------

    async def reset_session(
        self,
        session_key: str,
        *,
        expected_session_id: str,
        expected_epoch: int,
        new_session_id: str,
        now: int,
        before_commit: Callable[[GenerationSnapshot], Awaitable[None]] | None = None,
    ) -> SessionNode:
        """Start a new generation of ``session_key`` in one transaction.

        Compare-and-set on key, session id and epoch (``StaleEpochError`` if another writer
        got there first): the epoch bump, identity rotation and counter reset, deletion of
        the old generation's transcript, archive and summaries, and invalidation of the
        key's context states (``session_reset``). ``before_commit`` receives a snapshot of
        the old generation read inside the transaction, so it sees exactly what is deleted.
        """
        key = canonicalize_session_key(session_key)
        check_text("expected_session_id", expected_session_id)
        check_integer("expected_epoch", expected_epoch)
        check_session_id("new_session_id", new_session_id)
        _check_millis("now", now)
        async with (
            self._generation_guard(new_session_id, None),
            self._database.write() as conn,
        ):
            current = await session_repo.get(conn, key, lock="update")
            if (
                current is None
                or current.session_id != expected_session_id
                or current.epoch != expected_epoch
            ):
                raise StaleEpochError(
                    f"Epoch mismatch for {key}: expected generation {expected_session_id} at "
                    f"epoch {expected_epoch}, got "
                    + (f"{current.session_id} at epoch {current.epoch}" if current else "None")
                )
            # The new id must be new everywhere (the current one included): the archive
            # recovery tells a committed reset by the session's id having changed.
            await session_repo.claim_generation(conn, new_session_id, None)
            old_id = current.session_id
            renewed = await session_repo.update_fields(
                conn, key, _reset_values(current.epoch + 1, new_session_id, now)
            )
            assert renewed is not None
            if before_commit is not None:
                snapshot_node = current.model_copy(update={"epoch": current.epoch + 1})
                snapshot = GenerationSnapshot(
                    session=snapshot_node,
                    transcript=await transcript_repo.list_canonical(conn, old_id),
                    summaries=await summary_repo.list_for_session(conn, old_id),
                )
                await before_commit(snapshot)
            await transcript_repo.delete_all(conn, old_id)
            await summary_repo.delete_for_session(conn, old_id)
            await state_repo.invalidate(conn, key, reason="session_reset")
        return renewed

    async def branch_session(
        self,
        parent_key: str,
        make_child: Callable[[SessionNode], SessionNode],
        *,
        fork: ForkMode = "none",
        before_message_id: str | None = None,
        max_fork_tokens: int | None = None,
        summary_tokens: Callable[[int], int] = lambda length: max(1, length // 4),
    ) -> SessionNode:
        """Create a child session from ``parent_key`` in one transaction.

        ``make_child(parent)`` builds the child row. ``fork="full"`` copies the live
        transcript, the compacted archive, every summary and the valid context states;
        ``fork="prefix"`` copies the canonical transcript before ``before_message_id``
        (``MessageNotFoundError`` before any write if it is not there). Copies happen only
        within ``max_fork_tokens`` (reported token counts, plus ``summary_tokens(len)`` per
        copied summary). A child key that exists already is refused
        (``SessionExistsError``) and nothing changes. Rows are copied with set-based
        ``INSERT ... SELECT`` statements.
        """
        if fork not in get_args(ForkMode):
            raise InvalidInputError(f"fork must be one of {', '.join(get_args(ForkMode))}")
        check_optional_text("before_message_id", before_message_id, identifier=True)
        check_optional_integer("max_fork_tokens", max_fork_tokens)
        key = canonicalize_session_key(parent_key)
        child: SessionNode | None = None
        try:
            async with self._database.write() as conn:
                parent = await session_repo.get(conn, key, lock="share")
                if parent is None:
                    raise SessionNotFoundError(f"Parent session not found: {key}")
                child = self._canonical_node(make_child(parent))
                await session_repo.claim_generation(conn, child.session_id, child.session_key)
                await self._fill_branch(
                    conn,
                    parent,
                    child,
                    fork=fork,
                    before_message_id=before_message_id,
                    max_fork_tokens=max_fork_tokens,
                    summary_tokens=summary_tokens,
                )
        except IntegrityViolationError as exc:
            error = (
                await self._generation_violation(exc, child.session_id, child.session_key)
                if child is not None
                else exc
            )
            if error is exc:
                raise
            raise error from exc
        return child

    async def _fill_branch(
        self,
        conn: AsyncConnection,
        parent: SessionNode,
        child: SessionNode,
        *,
        fork: ForkMode,
        before_message_id: str | None,
        max_fork_tokens: int | None,
        summary_tokens: Callable[[int], int],
    ) -> None:
        """The body of :meth:`branch_session`, inside its transaction."""
        key = parent.session_key
        position: tuple[int, int] | None = None
        copy = False
        if fork != "none":
            if fork == "prefix":
                if before_message_id is None:
                    raise InvalidInputError("a prefix fork needs before_message_id")
                position = await transcript_repo.find_canonical_position(
                    conn, parent.session_id, before_message_id
                )
                if position is None:
                    raise MessageNotFoundError(
                        f"Transcript message not found in {key}: {before_message_id}"
                    )
            tokens = await transcript_repo.token_sum_before(conn, parent.session_id, position)
            if fork == "full":
                lengths = await summary_repo.text_lengths(conn, parent.session_id)
                tokens += sum(summary_tokens(n) for n in lengths)
            copy = max_fork_tokens is None or tokens <= max_fork_tokens
        child.forked_from_parent = copy
        if not await session_repo.insert_new(conn, child):
            raise SessionExistsError(f"Session already exists: {child.session_key}")
        if copy:
            target = {
                "target_session_id": child.session_id,
                "target_session_key": child.session_key,
            }
            if fork == "full":
                await transcript_repo.copy_archive_to_session(
                    conn, source_session_id=parent.session_id, **target
                )
            await transcript_repo.copy_to_session(
                conn, source_session_id=parent.session_id, before=position, **target
            )
            if fork == "full":
                await summary_repo.copy_to_session(
                    conn, source_session_id=parent.session_id, **target
                )
                await state_repo.copy_valid_to_session(
                    conn, source_session_key=parent.session_key, **target
                )

    async def truncate_transcript(
        self, session_key: str, max_messages: int, now: int
    ) -> tuple[bool, int, int]:
        """Keep the newest ``max_messages`` live rows (ids unchanged), drop the rest and
        the compacted archive, in one transaction. ``(truncated, before, after)``."""
        key = canonicalize_session_key(session_key)
        check_integer("max_messages", max_messages)
        _check_millis("now", now)
        async with self._database.write() as conn:
            node = await session_repo.get(conn, key, lock="update")
            if node is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            before = await transcript_repo.count_live(conn, node.session_id)
            if before <= max_messages:
                return False, before, before
            await transcript_repo.delete_live_except_last(conn, node.session_id, max_messages)
            await transcript_repo.delete_all_archive(conn, node.session_id)
            await session_repo.update_fields(conn, key, {"updated_at": now})
        return True, before, max_messages

    async def rewrite_compacted_session(
        self,
        session_key: str,
        *,
        expected_session_id: str,
        expected_epoch: int,
        expected_live_ids: Sequence[int],
        archive_count: int,
        summary: SessionSummary | None,
        states: Callable[[SessionSummary], Sequence[SessionContextState]] | None = None,
        drop_ids: Sequence[int] = (),
        new_entries: Sequence[TranscriptEntry] = (),
        now: int,
    ) -> RewriteOutcome:
        """The atomic compaction commit (SEMANTICS §8.10), with the preimage re-checked
        inside the transaction.

        Nothing is written (``applied=False``) unless the session is still the expected
        generation and its live transcript is still exactly ``expected_live_ids``: an append
        that landed after planning is never lost, with or without a caller lock. Otherwise,
        in one transaction: the summary (``compaction_index`` assigned here), the first
        ``archive_count`` live rows copied to the compacted archive and deleted (the rest
        keep their ids), ``drop_ids`` deleted, ``new_entries`` appended, the context states
        ``states(summary)`` saved, and ``compaction_count + 1`` and ``updated_at`` set.
        """
        key = canonicalize_session_key(session_key)
        check_integer("archive_count", archive_count)
        _check_millis("now", now)
        for name, ids in (("expected_live_ids", expected_live_ids), ("drop_ids", drop_ids)):
            for row_id in ids:
                check_integer(name, row_id, minimum=-(2**63))
        if summary is not None:
            check_record("summary", summary, SessionSummary)
            # The archived rows carry it as plain (indexed) text: an identifier.
            check_optional_text("compaction_id", summary.compaction_id, identifier=True)
        for entry in new_entries:
            check_record("new_entries", entry, TranscriptEntry)
        async with self._database.write() as conn:
            node = await session_repo.get(conn, key, lock="update")
            if (
                node is None
                or node.session_id != expected_session_id
                or node.epoch != expected_epoch
            ):
                return RewriteOutcome(applied=False)
            positions = await transcript_repo.live_positions(conn, node.session_id)
            if [row_id for row_id, _ in positions] != list(expected_live_ids):
                return RewriteOutcome(applied=False)
            if summary is not None:
                summary.session_id, summary.session_key = node.session_id, key
                summary.id, summary.compaction_index = await summary_repo.insert(conn, summary)
            if archive_count > 0:
                last_id, last_created = positions[archive_count - 1]
                boundary = (last_created, last_id)
                await transcript_repo.archive_prefix(
                    conn,
                    session_id=node.session_id,
                    session_key=key,
                    boundary=boundary,
                    compaction_id=summary.compaction_id if summary else None,
                    compaction_index=summary.compaction_index if summary else None,
                    archived_at=now,
                )
                await transcript_repo.delete_prefix(conn, node.session_id, boundary)
            await transcript_repo.delete_ids(conn, node.session_id, drop_ids)
            for entry in new_entries:
                entry.session_id, entry.session_key = node.session_id, key
            await transcript_repo.insert_many(conn, new_entries)
            saved: list[SessionContextState] = []
            if summary is not None and states is not None:
                for state in states(summary):
                    state.session_id, state.session_key = node.session_id, key
                    state.id = await state_repo.insert(conn, state)
                    saved.append(state)
            await session_repo.update_fields(
                conn,
                key,
                {"compaction_count": sessions_table.c.compaction_count + 1, "updated_at": now},
            )
        return RewriteOutcome(applied=True, summary=summary, states=tuple(saved))

    async def prune_stale(self, updated_before: int, *, batch_size: int = RETENTION_BATCH) -> int:
        """Delete every session with ``updated_at < updated_before``, in bounded batches.

        Each batch is one transaction that re-checks staleness as it deletes, so a session
        touched meanwhile is kept, and a deleted session leaves nothing behind.
        """
        _check_millis("updated_before", updated_before)
        check_integer("batch_size", batch_size, minimum=1)  # 0 would never finish
        deleted = 0
        while True:
            async with self._database.write() as conn:
                keys = await session_repo.oldest_keys(
                    conn, batch_size, updated_before=updated_before
                )
                gone = await session_repo.delete_cascade(conn, keys, updated_before=updated_before)
            deleted += len(gone)
            if len(keys) < batch_size:
                return deleted

    async def cap_sessions(self, max_entries: int, *, batch_size: int = RETENTION_BATCH) -> int:
        """Delete the least recently updated sessions beyond ``max_entries``
        (order: ``updated_at``, ``created_at``, key), in bounded batches."""
        check_integer("max_entries", max_entries)
        check_integer("batch_size", batch_size, minimum=1)  # 0 would never finish
        deleted = 0
        while True:
            async with self._database.write() as conn:
                excess = await session_repo.count(conn) - max_entries
                if excess <= 0:
                    return deleted
                keys = await session_repo.oldest_keys(conn, min(excess, batch_size))
                deleted += len(await session_repo.delete_cascade(conn, keys))

    # -- operator tools: whole sessions, deletion previews, counts ---------------------

    async def connect_without_migrating(self) -> None:
        """Open the engine and leave the schema exactly as it is.

        For tools that inspect or move the schema themselves (``db current``, ``db check``,
        ``db downgrade``); every other operation needs the schema at head (``connect()``).
        """
        if self._db is not None:
            return
        if self._target.path is not None:
            ensure_private_file(self._target.path)
        engine = create_engine(
            self._target,
            sqlite_synchronous=self._sqlite_synchronous,
            pool_size=self._pool_size,
            echo=self._echo,
        )
        self._db = Database(engine, self._target)

    @staticmethod
    def table_layout() -> TableLayout:
        """Every table's columns, in order, with the kind of value each holds."""
        return transfer_repo.table_layout()

    async def list_session_keys(self) -> list[str]:
        """Every session key, in no particular order."""
        async with self._database.read() as conn:
            return await transfer_repo.all_session_keys(conn)

    async def existing_session_keys(self, session_keys: Sequence[str]) -> set[str]:
        """Which of these keys (as given, not canonicalised) have a session row."""
        async with self._database.read() as conn:
            return await transfer_repo.existing_keys(conn, list(session_keys))

    async def read_session_rows(self, session_keys: Sequence[str]) -> list[SessionRows]:
        """Whole sessions with every column of every row they own, from one snapshot.

        Keys are used as given (legacy keys need not be canonical); missing ones are left
        out. Child rows are those whose ``session_key`` is the session's, every generation.
        """
        async with self._database.read(snapshot=True) as conn:
            return await transfer_repo.read_rows(conn, list(session_keys))

    async def row_ids_in_use(self, table: str, ids: Sequence[int]) -> dict[int, str]:
        """Which of these ids the child ``table`` already holds, each with the key its row
        is stored under: import and copy keep ids, so they check before writing."""
        async with self._database.read() as conn:
            return await transfer_repo.ids_in_use(conn, table, list(ids))

    async def generation_holders(self, session_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these session ids in use, the keys holding it (a session's current
        generation, or rows stored under a key): import and copy check before writing."""
        async with self._database.read() as conn:
            return await transfer_repo.generation_holders(conn, list(session_ids))

    async def insert_session_rows(self, rows: SessionRows, *, if_exists: IfExists = "fail") -> bool:
        """Insert a whole session exactly as given, ids included, in one transaction.

        A key that is already taken: ``SessionExistsError`` (``if_exists="fail"``) or
        ``False`` (``"skip"``); nothing is written either way. On Postgres the id sequences
        are advanced past the inserted ids in the same transaction.

        Every session id the block carries (its session's and its rows') must be free for
        its key: one another key holds is refused (``SessionIdInUseError``), or the rows
        would land in, and later be deleted with, that other session.
        """
        session_id = rows.session.get("session_id")
        async with (
            self._generation_guard(session_id, rows.session_key),
            self._database.write() as conn,
        ):
            if not await transfer_repo.insert_session(conn, rows.session):
                if if_exists == "skip":
                    return False
                raise SessionExistsError(f"Session already exists: {rows.session_key}")
            carried = {session_id} | {
                row.get("session_id") for table in CHILD_TABLES for row in rows.rows(table)
            }
            for carried_id in sorted(i for i in carried if isinstance(i, str)):
                await session_repo.claim_generation(conn, carried_id, rows.session_key)
            filled = await transfer_repo.insert_children(conn, rows)
            await transfer_repo.advance_sequences(conn, filled)
        return True

    async def preview_prune(self, updated_before: int) -> DeletionPreview:
        """What :meth:`prune_stale` would delete now; nothing is changed."""
        _check_millis("updated_before", updated_before)
        async with self._database.read(snapshot=True) as conn:
            return await overview_repo.preview_prune(conn, updated_before)

    async def preview_cap(self, max_entries: int) -> DeletionPreview:
        """What :meth:`cap_sessions` would delete now; nothing is changed."""
        check_integer("max_entries", max_entries)
        async with self._database.read(snapshot=True) as conn:
            return await overview_repo.preview_cap(conn, max_entries)

    async def preview_truncate(self, session_key: str, max_messages: int) -> DeletionPreview:
        """What :meth:`truncate_transcript` would delete now; nothing is changed."""
        key = canonicalize_session_key(session_key)
        check_integer("max_messages", max_messages)
        async with self._database.read(snapshot=True) as conn:
            node = await session_repo.get(conn, key)
            if node is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            return await overview_repo.preview_truncate(conn, node.session_id, max_messages)

    async def preview_reset(self, session_key: str) -> DeletionPreview:
        """What :meth:`reset_session` would delete (and invalidate) now; nothing is changed."""
        key = canonicalize_session_key(session_key)
        async with self._database.read(snapshot=True) as conn:
            node = await session_repo.get(conn, key)
            if node is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            return await overview_repo.preview_reset(conn, key, node.session_id)

    async def store_counts(self) -> StoreCounts:
        """Row counts of the whole store, from one snapshot."""
        async with self._database.read(snapshot=True) as conn:
            return await overview_repo.store_counts(conn)

    async def get_summary(self, summary_id: int) -> SessionSummary | None:
        """One compaction summary by its id (the repair queue addresses summaries so)."""
        async with self._database.read() as conn:
            return await overview_repo.summary_by_id(conn, summary_id)


class _GenerationRace(Exception):
    """Internal: a concurrent creator of the same key, with the same session id, won."""


@dataclass(frozen=True)
class RewriteOutcome:
    """What :meth:`SessionStorage.rewrite_compacted_session` did."""

    applied: bool
    summary: SessionSummary | None = None
    states: tuple[SessionContextState, ...] = ()


def _reset_values(epoch: int, session_id: str, now: int) -> dict[str, object]:
    """What a reset changes on the session row (SEMANTICS §7.1 step 6)."""
    return {
        "epoch": epoch,
        "session_id": session_id,
        "updated_at": now,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "total_tokens_fresh": False,
        "estimated_cost_usd": 0.0,
        "total_cost_usd": 0.0,
        "billed_cost_usd": 0.0,
        "estimated_cost_component_usd": 0.0,
        "cost_source": "none",
        "missing_cost_entries": 0,
        "cache_read": 0,
        "cache_write": 0,
        "context_tokens": None,
        "compaction_count": 0,
    }


__all__ = ["RewriteOutcome", "SessionStorage", "StaleEpochError", "StorageNotConnectedError"]
