"""Programmatic schema management: upgrade, downgrade, current, check, stamp, history.

The one migration history is the top-level ``alembic/`` directory; a built wheel carries the
same scripts as ``opensquilla/session/_alembic``. Every run happens on one connection inside
one lock: on SQLite its write lock (``BEGIN IMMEDIATE``, the whole run one transaction); on
PostgreSQL a session-level advisory lock held by the migrating connection, so that a revision
may build an index ``CONCURRENTLY`` in Alembic's autocommit block without giving the lock up
(the run is otherwise one transaction too). Several workers starting at once therefore migrate
once; the others wait, then find the schema at head.

Rolling deploys (docs/migrations.md#rolling-deploys, ``schema_policy.py``): a revision may declare
``expand_only = True`` (it only adds what older code ignores). Each such revision is recorded
in ``session_schema_revisions`` as it is applied, and a package whose newest revision is older
than the database's runs against it unchanged when every revision in between is recorded as
expand-only; otherwise :func:`ensure_head` refuses with a message naming the revision.

The revision is recorded in the store's own version table (``version_table.py``), in the
store's PostgreSQL schema when it has one (``pg_schema.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import produce_migrations
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from alembic import command

from ..errors import MigrationError
from . import indexes
from .base import Base
from .engine import BEGIN_OPTION
from .errors import translated_errors
from .layout import Layout
from .layout import detect as detect_layout
from .layout import drift as layout_drift
from .layout import resolve as resolve_layout
from .pg_schema import ensure_schema
from .schema_compare import SEARCH_OBJECTS as SEARCH_OBJECTS
from .schema_compare import compare_type as compare_type
from .schema_compare import (
    context_options,
    describe,
    drop_sqlite_pk_nullability,
    postgres_key_drift,
)
from .schema_compare import include_object as include_object
from .schema_policy import POLICY_TABLE as POLICY_TABLE
from .schema_policy import accept_newer_schema
from .tables import OUR_TABLES
from .version_table import current_revisions as _current_sync
from .version_table import migration_context, move_from_shared_table, schema_of
from .version_table import why_no_store as _why_no_store

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.migrate")

# pg_advisory_xact_lock key: the first 8 bytes of sha256("opensquilla-session migrations").
MIGRATION_LOCK_KEY = 0x3A1F_5C2E_9B47_0D61


def script_location() -> Path:
    """The migration scripts: packaged in the wheel, or the checkout's ``alembic/``."""
    here = Path(__file__).resolve().parents[1]  # the package directory
    for candidate in (here / "_alembic", here.parents[2] / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationError(
        "opensquilla-session migration scripts not found (looked for "
        f"{here / '_alembic'} and {here.parents[2] / 'alembic'}); reinstall the package"
    )


def make_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@functools.cache
def _script_directory(location: str) -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", location)
    return ScriptDirectory.from_config(config)


def script_directory() -> ScriptDirectory:
    return _script_directory(str(script_location()))


def head_revisions() -> tuple[str, ...]:
    return tuple(script_directory().get_heads())


def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in script_directory().walk_revisions())


# How long a waiting worker sleeps between tries of the Postgres migration lock.
LOCK_POLL_SECONDS = 0.2


def _prepare(connection: Connection) -> None:
    """First thing under the lock: the store's schema exists, and a version recorded by an
    earlier release in ``alembic_version`` has moved to the store's own table."""
    schema = schema_of(connection)
    if schema is not None:
        ensure_schema(connection, schema)
    move_from_shared_table(connection, script_directory())


async def run_locked(engine: AsyncEngine, fn: Callable[[Connection], Any]) -> Any:
    async with _one_migration_per_process(), translated_errors(), engine.connect() as conn:
        if engine.dialect.name != "postgresql":
            await conn.execution_options(**{BEGIN_OPTION: "IMMEDIATE"})
            async with conn.begin():
                await conn.run_sync(_prepare)
                return await conn.run_sync(fn)
        await _take_postgres_lock(conn)
        try:
            await conn.run_sync(_prepare)
            await conn.commit()
            # No transaction around the run: Alembic opens one (env.py), and a revision's
            # autocommit block may commit it to build an index CONCURRENTLY.
            return await conn.run_sync(fn)
        finally:
            if conn.in_transaction():
                await conn.rollback()
            await conn.execute(sa.select(sa.func.pg_advisory_unlock(MIGRATION_LOCK_KEY)))
            await conn.commit()


async def _take_postgres_lock(conn: AsyncConnection) -> None:
    """Take the session-level migration lock, trying rather than waiting in the server.

    A worker blocked inside ``pg_advisory_lock`` would hold a snapshot the whole time, and
    ``CREATE INDEX CONCURRENTLY`` in the migrating worker waits for every older snapshot to
    end: the two would wait for each other. Between tries no transaction is open.
    """
    while True:
        got = await conn.scalar(sa.select(sa.func.pg_try_advisory_lock(MIGRATION_LOCK_KEY)))
        await conn.commit()
        if got:
            return
        await asyncio.sleep(LOCK_POLL_SECONDS)


async def current_revisions(engine: AsyncEngine) -> tuple[str, ...]:
    """The store's revision in the database (empty for a new or legacy database); one an
    earlier release recorded in ``alembic_version`` counts until it moves over."""
    known = known_revisions()
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(lambda sync: _current_sync(sync, known))


def _command(
    fn: Callable[..., None], *args: Any, requested: Layout | None = None
) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        config = make_config(connection)
        # The layout the revisions build (db/layout.py): the database's own once it has
        # tables; one asked for that it cannot have is refused before anything is written.
        outside = not connection.in_transaction()
        config.attributes["layout"] = resolve_layout(connection, requested, OUR_TABLES)
        if outside and connection.in_transaction():
            connection.commit()  # PostgreSQL: Alembic opens the run's own transaction
        try:
            fn(config, *args)
        except CommandError as exc:
            raise MigrationError(f"migration failed: {exc}") from exc

    return run


async def upgrade(
    engine: AsyncEngine, revision: str = "head", *, layout: Layout | None = None
) -> None:
    """Upgrade to ``revision``; ``layout`` (db/layout.py) is the one a new database is
    created with (refused on one whose tables have another)."""
    await run_locked(engine, _command(command.upgrade, revision, requested=layout))


async def current_layout(engine: AsyncEngine) -> Layout | None:
    """The layout of the store's tables (``None``: no tables yet)."""
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(detect_layout)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    await run_locked(engine, _command(command.downgrade, revision))


async def stamp(engine: AsyncEngine, revision: str) -> None:
    await run_locked(engine, _command(command.stamp, revision))


# Alembic keeps the running migration in module-level state (``alembic.context``), so two
# migrations may not run at once in one process, even on different databases or loops.
_in_process = threading.Lock()


@contextlib.asynccontextmanager
async def _one_migration_per_process() -> AsyncIterator[None]:
    # A thread lock (loops and threads may both migrate), taken without blocking the loop;
    # an asyncio.Event would be bound to one loop.
    while not _in_process.acquire(blocking=False):  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        _in_process.release()


async def ensure_head(engine: AsyncEngine, requested: Layout | None = None) -> bool:
    """Bring the schema to head if it is not there; return whether anything ran.

    An up-to-date database costs one read of the version table and one catalog query, and
    takes no lock. The catalog query finds the declared indexes the database lacks (or holds
    invalid): they are logged, never created here (``db check --repair`` creates them,
    docs/migrations.md#missing-indexes). ``alembic_version`` is not read here (an
    application's history may own it); a version an earlier release left there moves over in
    the locked upgrade.
    """
    heads = set(head_revisions())
    async with translated_errors(), engine.connect() as conn:
        current = set(await conn.run_sync(lambda sync: migration_context(sync).get_current_heads()))
        missing = await conn.run_sync(indexes.missing_index_names) if current == heads else []
        if requested is not None and not requested.soft and current == heads:
            await conn.run_sync(lambda sync: resolve_layout(sync, requested, OUR_TABLES))
    if current == heads:
        if missing:
            log.warning(
                "the database lacks index(es) of the current schema (reads that need them "
                "scan): %s; create them with `opensquilla-session db check --repair`",
                ", ".join(missing),
                extra={"operation": "migrate"},
            )
        return False
    unknown = current - known_revisions()
    if unknown:
        await accept_newer_schema(engine, sorted(unknown), heads)
        return False
    log.info(
        "migrating database schema to %s",
        ", ".join(sorted(heads)),
        extra={"operation": "migrate"},
    )
    await upgrade(engine, "head", layout=requested)
    return True


def _repair_at_head(connection: Connection) -> list[str]:
    """Under the migration lock: the version re-read, then the missing indexes created."""
    current = set(_current_sync(connection, known_revisions()))
    heads = set(head_revisions())
    if current != heads:
        raise MigrationError(
            f"the schema is at {', '.join(sorted(current)) or 'no revision'}, not at the head "
            f"this code declares ({', '.join(sorted(heads))}); no index was created "
            "(`opensquilla-session db upgrade` builds a revision's indexes)"
        )
    return indexes.create_missing(connection)


async def repair_indexes(engine: AsyncEngine) -> list[str]:
    """Create the declared indexes the database lacks or holds invalid, under the migration
    lock, after re-reading the version there (a :class:`MigrationError` unless it is the
    head this code declares); the names created (docs/migrations.md#missing-indexes)."""
    created: list[str] = await run_locked(engine, _repair_at_head)
    if created:
        log.warning(
            "created missing index(es) of the current schema: %s",
            ", ".join(created),
            extra={"operation": "migrate"},
        )
    return created


async def find_missing_indexes(engine: AsyncEngine) -> list[str]:
    """The declared indexes (unique ones included) the database lacks or holds invalid."""
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(indexes.missing_index_names)


async def why_no_store(engine: AsyncEngine) -> str | None:
    """Why the database holds no store yet (``None``: it does, or a legacy one to adopt)."""
    known = known_revisions()
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(lambda sync: _why_no_store(sync, known, OUR_TABLES))


@dataclass(frozen=True)
class SchemaStatus:
    current: tuple[str, ...]
    heads: tuple[str, ...]
    drift: tuple[str, ...]

    @property
    def at_head(self) -> bool:
        return set(self.current) == set(self.heads)

    @property
    def ok(self) -> bool:
        return self.at_head and not self.drift


def _check_sync(connection: Connection) -> SchemaStatus:
    options = context_options(connection.dialect.name, schema_of(connection))
    context = MigrationContext.configure(connection, opts=options)
    script = produce_migrations(context, Base.metadata)
    drop_sqlite_pk_nullability(context, None, [script])
    diffs = script.upgrade_ops.as_diffs() if script.upgrade_ops is not None else []
    # Alembic's comparison counts an invalid index (a failed concurrent build) as present.
    invalid = [f"invalid_index {name}" for name in indexes.invalid_index_names(connection)]
    invalid += postgres_key_drift(connection, schema_of(connection))
    drift = layout_drift(connection, [describe(diff) for diff in diffs])
    return SchemaStatus(
        current=_current_sync(connection, known_revisions()),
        heads=head_revisions(),
        drift=tuple(drift) + tuple(invalid),
    )


async def check(engine: AsyncEngine) -> SchemaStatus:
    """Where the database is against the code: revisions and any schema drift."""
    async with translated_errors(), engine.connect() as conn:
        return await conn.run_sync(_check_sync)


@dataclass(frozen=True)
class RevisionInfo:
    revision: str
    down_revision: str | None
    message: str
    is_head: bool


def history() -> list[RevisionInfo]:
    """Every revision, newest first."""
    heads = set(head_revisions())
    out = []
    for script in script_directory().walk_revisions():
        down = script.down_revision
        out.append(
            RevisionInfo(
                revision=script.revision,
                down_revision=down if isinstance(down, str) or down is None else ",".join(down),
                message=(script.doc or "").strip(),
                is_head=script.revision in heads,
            )
        )
    return out
