"""Engine settings (issue 15 item 2): the usual engine and pool options, PostgreSQL URL
parameters handed to asyncpg with their types, and an engine the application already has.

Every refusal is a ``ConfigurationError`` naming the option or parameter, raised before
anything is opened; never a ``TypeError`` from the pool or the driver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.dsn import engine_target
from opensquilla.session.errors import ConfigurationError

from . import new_session

KEY = "agent:main:engine"
PG = "postgresql://app@127.0.0.1:1/none"


# -- options: accepted, refused by name ------------------------------------------------------

ACCEPTED: dict[str, Any] = {
    "pool_size": 3,
    "max_overflow": 2,
    "pool_timeout": 7.5,
    "pool_recycle": 600,
    "pool_pre_ping": False,
    "pool_use_lifo": True,
    "echo": False,
    "echo_pool": False,
}


async def test_every_pool_option_is_accepted_and_reaches_the_pool(database: str) -> None:
    async with SessionStorage(database, **ACCEPTED) as storage:
        pool: Any = storage.engine.sync_engine.pool
        assert pool.size() == 3
        assert pool._max_overflow == 2
        assert pool._timeout == 7.5
        assert pool._recycle == 600
        assert pool._pre_ping is False
        node = await new_session(storage, KEY)
        assert (await storage.get_session(KEY)) == node


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"max_overflowz": 5}, "max_overflowz"),
        ({"poolclass": object}, "set by the store"),
        ({"json_serializer": json.dumps}, "json_serializer"),
        ({"max_overflow": -2}, "max_overflow"),
        ({"max_overflow": 1.5}, "max_overflow"),
        ({"pool_timeout": 0 - 1}, "pool_timeout"),
        ({"pool_timeout": float("nan")}, "pool_timeout"),
        ({"pool_recycle": -5}, "pool_recycle"),
        ({"pool_pre_ping": "yes"}, "pool_pre_ping"),
        ({"echo_pool": 1}, "echo_pool"),
        ({"connect_args": ["timeout", 5]}, "connect_args"),
    ],
)
def test_unknown_options_and_bad_values_are_refused_by_name(
    tmp_path: Path, options: dict[str, Any], name: str
) -> None:
    for target in (tmp_path / "never.db", PG):
        with pytest.raises(ConfigurationError, match=name):
            SessionStorage(target, **options)
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize("name", ["pool_size", "max_overflow", "pool_recycle", "connect_args"])
def test_memory_takes_no_pool_options(name: str) -> None:
    """``:memory:`` has one connection for its whole life: a pool setting would be a lie."""
    value: Any = {"timeout": 1} if name == "connect_args" else 2
    with pytest.raises(ConfigurationError, match=f"{name}.*':memory:' has one connection"):
        SessionStorage(":memory:", **{name: value})


def test_sqlite_files_set_their_connections_up_themselves(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"connect_args.*SQLite connections"):
        SessionStorage(tmp_path / "x.db", connect_args={"timeout": 1})


@pytest.mark.parametrize(
    ("connect_args", "name"),
    [
        ({"dsn": "postgresql://x"}, "dsn"),
        ({"sslcert": "/tmp/c.pem"}, "sslcert"),
        ({"timeout": "soon"}, "timeout"),
        ({"server_settings": {"application_name": 5}}, "server_settings"),
        ({"ssl": "sometimes"}, "ssl"),
    ],
)
def test_postgres_connect_args_are_checked(connect_args: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        SessionStorage(PG, connect_args=connect_args)


# -- PostgreSQL URL parameters ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("no_such_parameter=1", "no_such_parameter"),
        ("sslrootcert=/x.pem", "sslrootcert"),
        ("sslmode=sometimes", "sslmode"),
        ("timeout=soon", "timeout"),
        ("statement_cache_size=-1", "statement_cache_size"),
        ("direct_tls=maybe", "direct_tls"),
        ("application_name=a&application_name=b", "more than once"),
        ("sslmode=require&ssl=require", "say the same thing"),
        ("timeout=3&connect_timeout=3", "timeout and connect_timeout say"),
    ],
)
def test_url_parameters_are_refused_by_name(query: str, name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        SessionStorage(f"{PG}?{query}")


def test_sqlite_urls_take_no_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="mode"):
        SessionStorage(f"sqlite:///{tmp_path}/x.db?mode=ro")


def _with_query(database: str, query: str) -> str:
    return f"{database}{'&' if '?' in database else '?'}{query}"


@pytest.mark.postgres_only
async def test_url_parameters_reach_the_server(database: str) -> None:
    """Server settings from the URL are in force on every connection; typed driver
    parameters (which asyncpg would take as text and fail on) connect."""
    target = _with_query(
        database,
        "application_name=osq-engine-test&search_path=public&statement_timeout=4321"
        "&timezone=UTC&options=-c%20lock_timeout%3D1234&sslmode=disable&connect_timeout=9"
        "&command_timeout=30&statement_cache_size=10",
    )
    async with SessionStorage(target) as storage:
        await new_session(storage, KEY)
        async with storage.engine.connect() as conn:
            settings = {
                name: (await conn.execute(text(f"SELECT current_setting('{name}')"))).scalar()
                for name in (
                    "application_name",
                    "search_path",
                    "statement_timeout",
                    "TimeZone",
                    "lock_timeout",
                )
            }
        assert settings == {
            "application_name": "osq-engine-test",
            "search_path": "public",
            "statement_timeout": "4321ms",
            "TimeZone": "UTC",
            "lock_timeout": "1234ms",
        }
        assert await storage.get_session(KEY) is not None


@pytest.mark.postgres_only
async def test_connect_args_win_over_the_url_and_merge_server_settings(database: str) -> None:
    target = _with_query(database, "application_name=from-url&search_path=public")
    async with (
        SessionStorage(
            target, connect_args={"server_settings": {"application_name": "from-code"}}
        ) as storage,
        storage.engine.connect() as conn,
    ):
        name = (await conn.execute(text("SELECT current_setting('application_name')"))).scalar()
        path = (await conn.execute(text("SELECT current_setting('search_path')"))).scalar()
    assert (name, path) == ("from-code", "public")


# -- an engine the application already has ----------------------------------------------------


def _app_engine(database: str) -> Any:
    if database.startswith("postgresql"):
        return create_async_engine(make_url(database).set(drivername="postgresql+asyncpg"))
    return create_async_engine(f"sqlite+aiosqlite:///{database}")


@pytest.mark.parametrize("spelling", ["constructor", "from_engine"])
async def test_an_application_engine_is_used_and_never_disposed(
    database: str, spelling: str
) -> None:
    engine = _app_engine(database)
    pool = engine.sync_engine.pool  # dispose() would replace it
    statements: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    try:
        storage = (
            SessionStorage(engine)
            if spelling == "constructor"
            else SessionStorage.from_engine(engine)
        )
        async with storage:
            assert storage.engine is engine
            manager = SessionManager(storage, inject_time_prefix=False)
            await manager.create(KEY)
            await manager.append_message(KEY, "user", "through the app's engine")
        # The append (on SQLite through the view of revision 0008) ran on the app's engine.
        assert any(
            "INSERT INTO transcript_entries" in s or "INSERT INTO transcript_appends" in s
            for s in statements
        )
        assert engine.sync_engine.pool is pool  # the application's engine, not ours to dispose
        async with engine.connect() as conn:  # and it still works
            count = (await conn.execute(text("SELECT count(*) FROM transcript_entries"))).scalar()
        assert count == 1
        async with SessionStorage(engine) as again:  # a second store on it: set up once
            assert [
                e.content
                for e in await again.get_transcript(
                    (await again.get_session(KEY)).session_id  # type: ignore[union-attr]
                )
            ] == ["through the app's engine"]
    finally:
        await engine.dispose()


async def test_an_application_sqlite_engine_gets_the_store_setup(tmp_path: Path) -> None:
    """Connections the application opened before handing the engine over are set up too
    (SQLite only: a PostgreSQL engine needs no setup)."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    try:
        async with engine.connect() as conn:  # opened before the store saw the engine
            assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 0
        async with SessionStorage(engine) as storage:
            async with storage.engine.connect() as conn:
                assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1
                assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
                assert (await conn.exec_driver_sql("SELECT py_lower('ÄB')")).scalar() == "äb"
            await new_session(storage, KEY)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: create_async_engine("sqlite+aiosqlite://"), "in-memory"),
        (
            lambda tmp: create_async_engine(f"sqlite+aiosqlite:///{tmp}/j.db", json_serializer=str),
            "json_serializer",
        ),
    ],
)
async def test_unusable_application_engines_are_refused(
    tmp_path: Path, make: Any, message: str
) -> None:
    engine = make(tmp_path) if make.__code__.co_argcount else make()
    try:
        with pytest.raises(ConfigurationError, match=message):
            SessionStorage(engine)
        with pytest.raises(ConfigurationError, match="pool_size"):
            SessionStorage(_app_engine(str(tmp_path / "ok.db")), pool_size=2)
    finally:
        await engine.dispose()


def test_only_the_async_drivers_the_store_runs_on_are_taken() -> None:
    with pytest.raises(ConfigurationError, match=r"postgresql\+psycopg"):
        engine_target(make_url("postgresql+psycopg://u@h/d"))


async def test_an_engine_with_its_own_begin_recipe_is_refused(tmp_path: Path) -> None:
    """Two BEGIN hooks would begin every transaction twice: refused, not half-working."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'own.db'}")

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    try:
        with pytest.raises(ConfigurationError, match="'begin' event listeners"):
            SessionStorage(engine)
    finally:
        await engine.dispose()
