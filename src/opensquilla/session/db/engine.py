"""Engine construction for both backends.

SQLite: WAL for files, ``foreign_keys=ON``, a busy timeout, ``synchronous=FULL`` by
default, and SQLAlchemy's BEGIN-hook recipe (the driver's own transaction handling is off),
so transactions and savepoints are real on Python 3.11. A write transaction begins with
``BEGIN IMMEDIATE``: it takes the write lock up front, so it never fails half-way with a
busy snapshot. ``:memory:`` uses one shared connection (``StaticPool``) that lives as long
as the store (:class:`PinnedMemoryDBAPI`), whatever happens to the operations on it.

Postgres: asyncpg, a one-round-trip liveness ping on the checkout of a connection idle for
``PING_AFTER_IDLE_S`` or more (a closed one is refused on every checkout, without a round trip).
"""

from __future__ import annotations

import asyncio
import select
import sqlite3
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from ..config import SqliteSynchronous
from ..errors import ConfigurationError
from .dsn import StorageTarget, engine_target
from .engine_options import postgres_connection
from .memory_dbapi import PinnedMemoryDBAPI
from .pg_schema import connection_settings
from .sql import SQLITE_UUID_FUNCTION
from .sqlite_driver import lean_dbapi
from .statement_watch import own_listeners
from .types import json_deserializer, json_serializer

# Execution option read by the BEGIN hook: "IMMEDIATE", "DEFERRED" or "NONE" (autocommit).
BEGIN_OPTION = "opensquilla_begin"
BUSY_TIMEOUT_MS = 30_000


def _enter_wal(cursor: Any) -> None:
    """Put a database file in WAL mode, waiting out other connections doing the same.

    WAL mode is a property of the file: once set it stays, so an existing WAL database costs
    one read. Switching needs an exclusive lock, and SQLite answers a switch that meets
    another connection's lock with "database is locked" at once, without its busy handler
    (so that two upgrading readers cannot deadlock). Several workers opening one new file at
    the same moment meet exactly that; each retries, with a short backoff, for as long as
    the busy timeout allows.
    """
    cursor.execute("PRAGMA journal_mode")
    row = cursor.fetchone()
    if row is not None and str(row[0]).lower() == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # only while several connections create one file at once
        pause = min(pause * 2, 0.1)


def _uuid4() -> str:
    return str(uuid.uuid4())


async def dispose_engine(
    engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None = None
) -> None:
    """Dispose of ``engine``'s pool and, for a ``:memory:`` store, close its one
    connection (which the pool itself never closes).

    ``loop`` is the event loop the engine's connections were opened on. asyncpg connections
    belong to it: if it still runs (another thread), they are closed there; if it is gone,
    they cannot be closed any more, and the pool is only let go of (the server drops them
    when their sockets close). aiosqlite connections run on their own threads and close
    from any loop.
    """
    current = asyncio.get_running_loop()
    if loop is not None and loop is not current and engine.dialect.name == "postgresql":
        if loop.is_running():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(engine.dispose(), loop))
        else:
            await engine.dispose(close=False)
        return
    await engine.dispose()
    dbapi = engine.sync_engine.dialect.loaded_dbapi
    if isinstance(dbapi, PinnedMemoryDBAPI):
        await dbapi.close()


def create_engine(
    target: StorageTarget,
    *,
    sqlite_synchronous: SqliteSynchronous = "FULL",
    options: Mapping[str, Any] | None = None,
    create: bool = True,
) -> AsyncEngine:
    """The store's own engine; ``options`` checked by ``engine_options.check_engine_options``.
    ``create=False``: SQLite opens an existing file only (``mode=rw``), so not even a file
    deleted since the caller looked is created."""
    given = {name: value for name, value in (options or {}).items() if value is not None}
    common: dict[str, Any] = {
        "json_serializer": json_serializer(target.backend),
        "json_deserializer": json_deserializer(target.backend),
    }
    if target.backend == "postgresql":
        ping = given.pop("pool_pre_ping", True)
        url, connect_args = postgres_connection(target.url, given.pop("connect_args", None))
        if target.schema is not None:
            connect_args = _in_schema(connect_args, target.schema)
            given["execution_options"] = {"schema_translate_map": {None: target.schema}}
        engine = create_async_engine(url, connect_args=connect_args, **common, **given)
        if ping:
            _ping_on_checkout(engine)
        return engine
    return _sqlite_engine(target, sqlite_synchronous, given, common, create=create)


def _in_schema(connect_args: dict[str, Any], schema: str) -> dict[str, Any]:
    """``connect_args`` with ``schema`` alone on the search path (``db/pg_schema.py``)."""
    settings = dict(connect_args.get("server_settings") or {})
    if "search_path" in settings:
        raise ConfigurationError(
            "both a schema and a search_path were given; the schema sets the search path "
            "(it holds the store's tables alone): drop search_path"
        )
    settings.update(connection_settings(schema)["server_settings"])
    return {**connect_args, "server_settings": settings}


def _existing_only(path: Path) -> URL:
    """A SQLite URI that opens ``path`` read-write but never creates it."""
    return URL.create(
        "sqlite+aiosqlite",
        database="file:" + quote(str(path)),
        query={"mode": "rw", "uri": "true"},
    )


def is_engine(value: object) -> bool:
    return isinstance(value, AsyncEngine)


def adopt_engine(engine: object, sqlite_synchronous: SqliteSynchronous) -> StorageTarget | None:
    """The target of an application's ``AsyncEngine`` (``None`` if ``engine`` is not one),
    made ready for the store: on SQLite the store's connection setup (WAL, pragmas,
    functions, the BEGIN recipe) is attached to it, for its existing connections too; the
    store's JSON codec is installed where the application left SQLAlchemy's default."""
    if not isinstance(engine, AsyncEngine):
        return None
    target = engine_target(engine.url)
    _adopt_json_codec(engine, target.backend)
    if target.backend == "sqlite":
        _install_sqlite_setup(engine, sqlite_synchronous, None, file_backed=True)
    return target


def _adopt_json_codec(engine: AsyncEngine, backend: str) -> None:
    dialect: Any = engine.dialect
    for attribute, ours in (
        ("_json_serializer", json_serializer(backend)),
        ("_json_deserializer", json_deserializer(backend)),
    ):
        current = getattr(dialect, attribute, None)
        if current is None:
            setattr(dialect, attribute, ours)
        elif getattr(current, "__module__", None) != ours.__module__:
            raise ConfigurationError(
                f"the engine was created with its own {attribute.lstrip('_')}; the store needs "
                "its own (strict JSON, NUL-safe text): create the engine without it"
            )


# A connection back in the pool for less than this is handed out again without the ping.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "opensquilla_idle_since"  # connection record info: (driver connection, when)
_monotonic = time.monotonic  # tests move this clock


def _ping_on_checkout(engine: AsyncEngine) -> None:
    """Pessimistic disconnect handling in one round trip, and none for a connection that
    was in use a moment ago.

    SQLAlchemy's ``pool_pre_ping`` on asyncpg pings inside BEGIN/ROLLBACK (three round
    trips per checkout); an empty statement does the same job in one. A dead connection (a
    restarted server, ``pg_terminate_backend``) raises ``DisconnectionError``, and the pool
    replaces it before the operation runs.

    The ping was one of the append's two round trips (bench/tails.py). A connection checked
    in less than ``PING_AFTER_IDLE_S`` ago skips it: the server closing it (a restart, a
    terminated backend) closes its socket, which the driver has seen by then
    (``is_closed()``, checked on every checkout, no round trip), or, if the event loop has
    not read all of it yet, which its socket shows (:func:`_unread_input`: pinged then);
    what only a round trip would find (a silent network failure) a ping finds no better,
    it hangs alike.
    """

    driver_of = engine.sync_engine.dialect.get_driver_connection

    @event.listens_for(engine.sync_engine, "checkin")
    def _idle(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:
            record.info[_IDLE_SINCE] = (driver_of(dbapi_connection), _monotonic())

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        driver = driver_of(dbapi_connection)
        if driver.is_closed():
            raise DisconnectionError("connection lost: closed by the server")
        idle = record.info.pop(_IDLE_SINCE, None)
        if (
            idle is not None
            and idle[0] is driver
            and _monotonic() - idle[1] < PING_AFTER_IDLE_S
            and not _unread_input(driver)
        ):
            return
        try:
            dbapi_connection.run_async(lambda connection: connection.fetchrow(";"))
        except Exception as exc:
            raise DisconnectionError(f"connection lost: {type(exc).__name__}") from exc


def _unread_input(driver: Any) -> bool:
    """Whether the server sent an idle connection anything the event loop has not read
    yet (no round trip: one ``poll`` of its socket). A terminated backend sends its FATAL
    notice, then closes: asyncpg may have read the notice, which puts its protocol in an
    error state where the next statement fails ("another operation is in progress"), and
    not yet the close, so ``is_closed()`` still says open; the close is what is unread
    then. ``True`` (ping) when the socket cannot be polled here."""
    transport = getattr(driver, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    poll = getattr(select, "poll", None)
    if sock is None or poll is None:
        return True
    poller = poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


SQLITE_LOWER_FUNCTION = "py_lower"
"""Unicode lowercasing for substring search (SQLite's ``lower()`` folds ASCII only); the
older store registers the same function under the same name."""


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _sqlite_engine(
    target: StorageTarget,
    synchronous: SqliteSynchronous,
    options: dict[str, Any],
    common: dict[str, Any],
    *,
    create: bool,
) -> AsyncEngine:
    connect_args = {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}
    dbapi = lean_dbapi()
    if dbapi is not None:
        common = {**common, "module": dbapi}
    pinned = PinnedMemoryDBAPI(dbapi) if target.memory else None
    if pinned is not None:
        engine = create_async_engine(
            "sqlite+aiosqlite://",
            poolclass=StaticPool,
            connect_args=connect_args,
            **{**common, **options, "module": pinned},
        )
    else:
        url = target.url if create or target.path is None else _existing_only(target.path)
        engine = create_async_engine(url, connect_args=connect_args, **common, **options)
    _install_sqlite_setup(engine, synchronous, pinned, file_backed=not target.memory)
    return engine


# Sync engines the setup below is installed on (an application's engine may be adopted by
# several storages: one set of listeners).
_SET_UP_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
_SET_UP = "opensquilla_setup"  # marks a connection record whose connection is set up


def _install_sqlite_setup(
    engine: AsyncEngine,
    synchronous: SqliteSynchronous,
    pinned: PinnedMemoryDBAPI | None,
    *,
    file_backed: bool,
) -> None:
    sync_engine = engine.sync_engine
    if sync_engine in _SET_UP_ENGINES:
        return
    if sync_engine.dispatch.begin:
        raise ConfigurationError(
            "the engine already has 'begin' event listeners (its own SQLite BEGIN recipe?); "
            "the store installs its own: pass an engine without them"
        )
    _SET_UP_ENGINES.add(sync_engine)

    def set_up(dbapi_connection: Any, record: Any) -> None:
        record.info[_SET_UP] = True
        # Hand transaction control to SQLAlchemy (the BEGIN hook below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if file_backed:
                _enter_wal(cursor)
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()
        dbapi_connection.create_function(SQLITE_UUID_FUNCTION, 0, _uuid4, deterministic=False)
        dbapi_connection.create_function(SQLITE_LOWER_FUNCTION, 1, _lower, deterministic=True)

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        if pinned is not None and pinned.reconnected:
            return  # the store's one :memory: connection, set up when it was opened
        set_up(dbapi_connection, record)

    @event.listens_for(sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if not record.info.get(_SET_UP) and not (pinned is not None and pinned.reconnected):
            set_up(dbapi_connection, record)  # opened before an application's engine was adopted

    @event.listens_for(sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(BEGIN_OPTION, "DEFERRED")
        if mode == "NONE":
            return
        dbapi_connection = conn.connection.dbapi_connection
        defer = getattr(dbapi_connection, "defer_begin", None)
        if defer is not None:
            defer(f"BEGIN {mode}")  # the lean adapter sends it with the first statement
        else:
            conn.exec_driver_sql(f"BEGIN {mode}")

    own_listeners(_on_begin)  # the append's direct path is not watched by it
