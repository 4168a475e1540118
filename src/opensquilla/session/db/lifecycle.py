"""The store's engine lifecycle, in the persistence layer: settings, connect (migrating to
head), the unit-of-work factory, close, and settling reset archives a stopped process left
staged. ``SessionStorage`` builds on it (``opensquilla.session.storage`` exports it).

Where reset archives go is a storage setting, since ``stats`` reads it from the storage:
``archive_store="files"`` writes them to ``archive_dir``, else
``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, else ``<opensquilla home>/session-archive`` (the
latter two resolved at each use); ``archive_store="database"`` keeps them in the
database's ``session_archives`` table (docs/semantics.md#reset-archive). Unset,
``archive_store`` is ``$OPENSQUILLA_SESSION_ARCHIVE_STORE``, else ``files``, read when the
storage is created.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Self, Unpack

from pydantic import Field, field_validator

from ..config import ArchiveStore, SqliteSynchronous
from ..config import archive_store as configured_archive_store
from ..config import sqlite_synchronous as configured_sqlite_synchronous
from ..errors import (
    ConfigurationError,
    DatabaseNotFoundError,
    DatabaseUnavailableError,
    SessionStoreError,
    StoragePathError,
)
from ..fs.archive_place import ArchivePlace
from ..fs.files import ensure_private_file
from ..fs.reset_archive import RecoveredArchive, recover_staged_archives, store_tag
from ..support.settings import Settings
from . import migrate
from .dsn import StorageTarget, parse_target, shown_path, with_schema
from .engine import adopt_engine, create_engine, dispose_engine, is_engine
from .engine_options import EngineOptions, check_engine_options
from .errors import translated_errors
from .layout import Layout
from .layout import configured as configured_layout
from .loop_units import LoopUnits
from .uow import UnitOfWork

if TYPE_CHECKING:  # the engine is the db layer's; storage only hands it out
    from sqlalchemy.ext.asyncio import AsyncEngine

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.storage")


class StorageNotConnectedError(SessionStoreError, RuntimeError):
    """The storage was used before ``connect()`` or after ``close()``."""


class StorageSettings(Settings):
    """The storage's own settings for its database (beside the engine's,
    ``db/engine_options.py``), checked once, when the storage is built, before its target."""

    # Unset: $OPENSQUILLA_SQLITE_SYNCHRONOUS, else FULL, read when the storage is built.
    sqlite_synchronous: SqliteSynchronous = Field(default=None, validate_default=True)
    create: bool = True
    # The tables' layout when connect() creates them (db/layout.py); unset: the database's.
    layout: Layout | None = None

    @field_validator("layout", mode="before")
    @classmethod
    def _layout(cls, value: object) -> object:
        return configured_layout(value)  # refused there, by its name

    @field_validator("sqlite_synchronous", mode="before")
    @classmethod
    def _level(cls, value: object) -> object:
        return configured_sqlite_synchronous(value)  # refused there, by its name

    @field_validator("create", mode="before")
    @classmethod
    def _create(cls, value: object) -> object:
        if not isinstance(value, bool):
            raise ConfigurationError(f"create must be True or False, not {type(value).__name__}")
        return value


class ArchiveSettings(Settings):
    """Where the storage's reset archives go, checked once, when the storage is built,
    after its target (a bad target is named first). ``archive_store`` unset is
    ``$OPENSQUILLA_SESSION_ARCHIVE_STORE``, else ``files``, read then."""

    # Unset: read when the storage is built (the validator runs for the default too).
    archive_store: ArchiveStore | None = Field(default=None, validate_default=True)
    archive_dir: str | os.PathLike[str] | None = None

    @field_validator("archive_store", mode="before")
    @classmethod
    def _archive_store(cls, value: object) -> object:
        return configured_archive_store(value)  # type: ignore[arg-type]  # refused there

    @field_validator("archive_dir", mode="before")
    @classmethod
    def _archive_dir(cls, value: object) -> object:
        if value is not None and (
            not isinstance(value, str | os.PathLike) or not str(value).strip()
        ):
            raise ConfigurationError(
                "archive_dir must be a directory path or None (then "
                "$OPENSQUILLA_SESSION_ARCHIVE_DIR, else <opensquilla home>/session-archive), "
                f"not {value!r}"[:200]
            )
        return value


def _store_tag(target: StorageTarget) -> str:
    """The archive name of a lasting database (see ``archive_store_tag``)."""
    if target.path is not None:
        identity = f"sqlite:{target.path.resolve()}"
    else:
        url = target.url
        identity = f"postgresql://{url.host}:{url.port or 5432}/{url.database}"
        if target.schema is not None:  # another schema, another store
            identity += f"?schema={target.schema}"
    return store_tag(identity)


class StorageLifecycle:
    """The engine and the units of work of one store; the CRUD mixins build on it."""

    def __init__(
        self,
        target: str | os.PathLike[str] | AsyncEngine = ":memory:",
        *,
        sqlite_synchronous: SqliteSynchronous | None = None,
        create: bool = True,
        schema: str | None = None,
        layout: str | None = None,
        archive_store: ArchiveStore | None = None,
        archive_dir: str | os.PathLike[str] | None = None,
        **engine_options: Unpack[EngineOptions],
    ) -> None:
        # Settings are checked before anything is opened: a typo must not reach a PRAGMA
        # (the level is spliced into its text) or a pool that never hands out a connection.
        settings = StorageSettings(
            sqlite_synchronous=sqlite_synchronous, create=create, layout=layout
        )
        self._sqlite_synchronous: SqliteSynchronous = settings.sqlite_synchronous
        self._create = settings.create
        self._layout = settings.layout
        if engine_options and is_engine(target):
            raise ConfigurationError(
                f"engine option(s) {', '.join(sorted(engine_options))} cannot apply to "
                "an engine the application created; set them where it is created"
            )
        adopted = adopt_engine(target, self._sqlite_synchronous)
        if adopted is not None:  # the application's engine: used, never disposed by us
            if schema is not None:
                raise ConfigurationError(
                    "schema= cannot apply to an engine the application created: give the "
                    "store a URL with ?schema= instead"
                )
            self._target: StorageTarget = adopted
            self._app_engine: AsyncEngine | None = target  # type: ignore[assignment]
        else:
            # ``schema``: PostgreSQL only, the store's tables in that schema (db/pg_schema.py).
            self._target = with_schema(parse_target(target), schema)  # type: ignore[arg-type]
            self._app_engine = None
        if self._layout is not None and self._target.backend != "postgresql":
            if self._layout.partitioned and not self._layout.soft:
                raise ConfigurationError(f"layout {self._layout} needs PostgreSQL; SQLite is plain")
            self._layout = None  # SQLite has one layout ($OPENSQUILLA_SESSION_LAYOUT: PG's)
        self._engine_options = check_engine_options(
            engine_options, backend=self._target.backend, memory=self._target.memory
        )
        archives = ArchiveSettings(archive_store=archive_store, archive_dir=archive_dir)
        assert archives.archive_store is not None  # its validator read the default
        # A :memory: database has no lasting name: its archives carry one of their own.
        tag = uuid.uuid4().hex[:8] if self._target.memory else _store_tag(self._target)
        self._archive_place = ArchivePlace(archives.archive_store, archives.archive_dir, tag)
        self._db: LoopUnits | None = None
        self._recovered: tuple[RecoveredArchive, ...] = ()
        self._lost_reset_archives = 0

    @classmethod
    def from_engine(
        cls, engine: AsyncEngine, *, sqlite_synchronous: SqliteSynchronous | None = None
    ) -> Self:
        """A store on an ``AsyncEngine`` the application already has (the same as
        ``SessionStorage(engine)``): ``close()`` leaves that engine open."""
        return cls(engine, sqlite_synchronous=sqlite_synchronous)

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
        """The public ``AsyncEngine`` of the calling event loop: every statement the store
        runs on this loop goes through it (a file or PostgreSQL store has one per loop,
        docs/sync.md#loops; outside any loop, the newest)."""
        return self.uow.engine

    @property
    def uow(self) -> UnitOfWork:
        """The unit-of-work factory of the calling event loop (made on the loop's first
        call): ``async with storage.uow.write() as tx: ...``."""
        db = self._db
        if db is None:
            raise StorageNotConnectedError("Storage not connected. Call connect() first.")
        return db.current()

    @property
    def open_engines(self) -> int:
        """How many engines (pools) the store holds open now: one per event loop that has
        called it and not ended yet (docs/sync.md#loops); 0 when not connected."""
        return self._db.engines if self._db is not None else 0

    def _units(self, engine: AsyncEngine) -> LoopUnits:
        """The units of work over ``engine`` (this loop's), and those other loops get:
        engines of their own for a file or PostgreSQL DSN, none for ``:memory:`` (one
        pinned connection) or an application's engine (a call from another loop is
        refused)."""
        many = self._app_engine is None and not self._target.memory
        return LoopUnits(
            UnitOfWork(engine, self._target),
            new_engine=self._new_engine if many else None,
            dispose=self._dispose,
        )

    @property
    def is_connected(self) -> bool:
        return self._db is not None

    def _new_engine(self) -> AsyncEngine:
        if self._app_engine is not None:
            return self._app_engine
        path = self._target.path
        if path is not None:
            try:
                if self._create:
                    ensure_private_file(path)
                elif not path.exists():
                    raise DatabaseNotFoundError(f"no database at {path}; nothing was created")
            except SessionStoreError:
                raise
            except OSError as exc:
                # Too long a name, a directory where no file can be made (/proc), no
                # permission: the path is the problem, named as the caller gave it.
                reason = exc.strerror or str(exc)
                raise StoragePathError(
                    f"storage path {shown_path(path)} cannot be used as a database file: "
                    f"{reason}; nothing was created"
                ) from exc
        return create_engine(
            self._target,
            sqlite_synchronous=self._sqlite_synchronous,
            options=self._engine_options.options(),
            create=self._create,
        )

    async def _dispose(self, engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None) -> None:
        if engine is not self._app_engine:
            await dispose_engine(engine, loop)

    async def connect(self) -> None:
        """Open the engine and bring the schema to head (a new or legacy database alike)."""
        if self._db is not None:
            return
        engine = self._new_engine()
        try:
            async with translated_errors():
                try:
                    await migrate.ensure_head(engine, self._layout)
                except OSError as exc:
                    raise DatabaseUnavailableError(
                        f"cannot connect to {self._target.render()}: {exc}"
                    ) from exc
        except BaseException:
            await self._dispose(engine, None)
            raise
        self._db = self._units(engine)
        await self._recover_reset_archives()

    async def connect_without_migrating(self) -> None:
        """Open the engine and leave the schema exactly as it is.

        For tools that inspect or move the schema themselves (``db current``, ``db check``,
        ``db downgrade``); every other operation needs the schema at head (``connect()``).
        """
        if self._db is None:
            self._db = self._units(self._new_engine())

    @property
    def archive_store(self) -> ArchiveStore:
        """Where reset archives go: ``"files"`` (:meth:`archive_directory`) or
        ``"database"`` (the ``session_archives`` table)."""
        return self._archive_place.store

    @property
    def archive_place(self) -> ArchivePlace:
        """Where this store's reset archives go, for the use cases that write them."""
        return self._archive_place

    def archive_directory(self) -> Path:
        """The directory of archive files, resolved now: the ``archive_dir`` setting, else
        ``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, else ``<opensquilla home>/session-archive``."""
        return self._archive_place.directory()

    @property
    def archive_store_tag(self) -> str:
        """The name the reset archive files of this database carry: 8 hex of a hash of its
        file's path, or of its server, port and database name (never the user or the
        password); for ``:memory:``, one drawn for this storage (no later start settles
        its files)."""
        return self._archive_place.tag

    @property
    def lost_reset_archives(self) -> int:
        """How many resets through this storage, since it was made, went on without their
        archive (it could not be written: a full disk, say), losing the old history."""
        return self._lost_reset_archives

    def count_lost_reset_archive(self) -> None:
        self._lost_reset_archives += 1

    @property
    def recovered_archives(self) -> tuple[RecoveredArchive, ...]:
        """What ``connect()`` did with reset archives a crash had left unpublished."""
        return self._recovered

    async def _recover_reset_archives(self) -> None:
        """Publish (or discard) the reset archives a stopped process left staged for this
        database (``fs.reset_archive.recover_staged_archives``). Never fails the start: a problem
        is logged, and the files stay for ``stats`` to report."""
        if self._target.memory:
            return
        tag, directory = self.archive_store_tag, self.archive_directory()

        async def current_generation(key: str) -> str | None:
            async with self.uow.read() as tx:
                node = await tx.sessions.get(key)
            return node.session_id if node is not None else None

        try:
            self._recovered = tuple(
                await recover_staged_archives(directory, tag, current_generation)
            )
        except Exception:
            log.warning(
                "could not settle the reset archives left staged in %s",
                directory,
                exc_info=True,
                extra={"operation": "recover_archives"},
            )

    async def close(self) -> None:
        """Dispose of the engines, one per event loop that used the store (never an engine
        the application passed in); idempotent. From any event loop (``dispose_engine``)."""
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    @classmethod
    async def open(
        cls, target: str | os.PathLike[str] | AsyncEngine = ":memory:", **options: object
    ) -> Self:
        storage = cls(target, **options)  # type: ignore[arg-type]
        await storage.connect()
        return storage

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
