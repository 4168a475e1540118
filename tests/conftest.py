"""Test backends: one environment variable picks the database for every storage test.

``OPENSQUILLA_TEST_DATABASE_URL`` unset means SQLite. Set it to a Postgres server URL
(``postgresql://postgres@127.0.0.1:5432/postgres``) to run the same tests on Postgres: a
template database is migrated once per run and every test gets its own clone
(``CREATE DATABASE ... TEMPLATE ...``), dropped afterwards. A Postgres URL whose server does
not answer is an error, never a skip.

SQLite tests get a copy of a migrated file, so ``connect()`` only confirms the head.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, settings
from sqlalchemy.engine import make_url

from opensquilla.session import SessionManager, SessionStorage

DATABASE_URL_ENV = "OPENSQUILLA_TEST_DATABASE_URL"

# Property tests: the default ("ci") profile is derandomized (the same examples on every run,
# on every machine) and keeps no example database, so a run can neither find a new failure
# by luck nor replay an old one found elsewhere. "explore" is for hunting locally:
# HYPOTHESIS_PROFILE=explore pytest tests/unit tests/compaction/test_properties.py
# (random seeds, printed with the reproduction blob on failure, and many more examples).
settings.register_profile(
    "ci",
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    phases=list(Phase),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _pg_admin_dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def _pg_target(url: str, database: str) -> str:
    parsed = make_url(url).set(drivername="postgresql+asyncpg", database=database)
    return parsed.render_as_string(hide_password=False)


class Backend:
    """Hands out fresh databases of one kind."""

    def __init__(self, name: str, admin_url: str | None, workdir: Path) -> None:
        self.name = name
        self.admin_url = admin_url
        self.workdir = workdir
        self.template: str | None = None

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgresql"

    # -- Postgres helpers -------------------------------------------------------------
    async def admin(self) -> asyncpg.Connection:
        assert self.admin_url is not None
        return await asyncpg.connect(_pg_admin_dsn(self.admin_url))

    async def create_database(self, template: str | None = None) -> str:
        name = "osq_t_" + uuid.uuid4().hex[:16]
        conn = await self.admin()
        try:
            clause = f' TEMPLATE "{template}"' if template else ""
            await conn.execute(f'CREATE DATABASE "{name}"{clause}')
        finally:
            await conn.close()
        return name

    async def drop_database(self, name: str) -> None:
        conn = await self.admin()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    def target_for(self, database: str) -> str:
        assert self.admin_url is not None
        return _pg_target(self.admin_url, database)

    # -- both ----------------------------------------------------------------------
    async def prepare_template(self) -> None:
        if self.is_postgres:
            self.template = await self.create_database()
            storage = SessionStorage(self.target_for(self.template))
        else:
            self.template = str(self.workdir / "template.db")
            storage = SessionStorage(self.template)
        await storage.connect()
        await storage.close()

    async def fresh_migrated(self, tmp: Path) -> tuple[str, Callable[[], Awaitable[None]]]:
        """A new database already at head: (target, cleanup)."""
        assert self.template is not None
        if self.is_postgres:
            name = await self.create_database(self.template)
            return self.target_for(name), lambda: self.drop_database(name)
        path = tmp / f"sessions-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(self.template, path)
        os.chmod(path, 0o600)
        return str(path), _noop

    async def fresh_empty(self, tmp: Path) -> tuple[str, Callable[[], Awaitable[None]]]:
        """A new, empty database (no tables): (target, cleanup)."""
        if self.is_postgres:
            name = await self.create_database()
            return self.target_for(name), lambda: self.drop_database(name)
        return str(tmp / f"empty-{uuid.uuid4().hex[:8]}.db"), _noop


async def _noop() -> None:
    return None


async def _check_postgres(url: str) -> None:
    try:
        conn = await asyncio.wait_for(asyncpg.connect(_pg_admin_dsn(url)), timeout=10)
    except Exception as exc:  # the whole run must fail, loudly
        raise pytest.UsageError(
            f"{DATABASE_URL_ENV} names a PostgreSQL server that does not answer "
            f"({type(exc).__name__}: {exc}); start it or unset the variable"
        ) from exc
    await conn.close()


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    workdir = tmp_path_factory.mktemp("backend")
    if url:
        asyncio.run(_check_postgres(url))
        chosen = Backend("postgresql", url, workdir)
    else:
        chosen = Backend("sqlite", None, workdir)
    asyncio.run(chosen.prepare_template())
    yield chosen
    if chosen.is_postgres and chosen.template is not None:
        asyncio.run(chosen.drop_database(chosen.template))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "postgres_only: a behaviour only PostgreSQL has (server-side connection kills, "
        "logins); deselected, not skipped, when the backend is SQLite",
    )
    config.addinivalue_line(
        "markers",
        "sqlite_only: a mechanism only SQLite has (its write lock, the append view of "
        "revision 0008 and its fallback); deselected, not skipped, when the backend is "
        "PostgreSQL",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    other = "sqlite_only" if os.environ.get(DATABASE_URL_ENV, "").strip() else "postgres_only"
    dropped = [item for item in items if item.get_closest_marker(other) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker(other) is None]


def pytest_report_header(config: pytest.Config) -> str:
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    shown = make_url(url).render_as_string(hide_password=True) if url else "sqlite"
    return f"opensquilla-session test backend: {shown}"


@pytest.fixture
async def database(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    """The target of a fresh database at head, for tests that open storages themselves."""
    target, cleanup = await backend.fresh_migrated(tmp_path)
    try:
        yield target
    finally:
        await cleanup()


@pytest.fixture
async def empty_database(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    """The target of a fresh, empty database (no schema yet)."""
    target, cleanup = await backend.fresh_empty(tmp_path)
    try:
        yield target
    finally:
        await cleanup()


@pytest.fixture
async def storage(database: str) -> AsyncIterator[SessionStorage]:
    store = SessionStorage(database)
    await store.connect()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def manager(storage: SessionStorage) -> SessionManager:
    return SessionManager(storage, inject_time_prefix=False)


@pytest.fixture(autouse=True)
def _archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Reset archives of every test go to its own directory, never to the real home."""
    directory = tmp_path / "archives"
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(directory))
    monkeypatch.setenv("OPENSQUILLA_STATE_DIR", str(tmp_path / "home"))
    monkeypatch.delenv("OPENSQUILLA_SESSION_ARCHIVE_STORE", raising=False)  # files, by default
    for name in list(os.environ):  # the LLM summariser is configured by each test, never the host
        if name.startswith("OPENSQUILLA_SESSION_LLM_"):
            monkeypatch.delenv(name)
    return directory
