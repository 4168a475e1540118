"""Test backends: one environment variable picks the database for every storage test.

``OPENSQUILLA_TEST_DATABASE_URL`` unset means SQLite. Set it to a Postgres server URL
(``postgresql://postgres@127.0.0.1:5432/postgres``) to run the same tests on Postgres: a
template database is migrated once per process, and tests get databases from the pools of
``tests/pg_pool.py`` (reused, put back the way they were handed out, or dropped when a test
changed their schema). A Postgres URL whose server does not answer is an error, never a skip.

SQLite tests get a copy of a migrated file, so ``connect()`` only confirms the head.

Speed without losing a test:

* Test databases do not wait for the disk: ``$OPENSQUILLA_SQLITE_SYNCHRONOUS`` is ``OFF``
  (worker processes inherit it) and PostgreSQL databases run with
  ``synchronous_commit = off``. Tests marked ``durable`` (the kill, crash-point and
  power-loss style tests) get the store's own defaults: ``FULL`` and a database with the
  server's setting.
* A whole-process scenario marked ``once`` (the wheel build, the soak, the process
  benchmark) runs in one backend's session only.
* A test that uses no database fixture (it does not depend on ``backend``) runs the same
  whatever the backend: it is marked ``backend_free`` and runs in the SQLite session only;
  the PostgreSQL session deselects it (``OPENSQUILLA_TEST_ALL=1`` runs it there too).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, settings
from sqlalchemy.engine import make_url
from xdist.scheduler import LoadGroupScheduling

from opensquilla.session import SessionManager, SessionStorage

from .pg_pool import PostgresDatabases

pytest_plugins = ["tests.statement_audit"]  # every child-table statement carries session_key
DATABASE_URL_ENV = "OPENSQUILLA_TEST_DATABASE_URL"
PG_LAYOUT_ENV = "OPENSQUILLA_TEST_PG_LAYOUT"
SQLITE_SYNCHRONOUS_ENV = "OPENSQUILLA_SQLITE_SYNCHRONOUS"
RUN_ALL_ENV = "OPENSQUILLA_TEST_ALL"
# Session fixtures of tests/reliability/conftest.py that start processes: see _runs_here.
POOLED_FIXTURES = frozenset({"spawn_pool", "sync_manager"})
POOLED_GROUP = "reliability"
# Modules whose tests share one xdist worker, by group (PoolGroupScheduling): the tests that
# use the pool above, and the wheel build's module (its module fixture builds once). The
# controller sees node ids only, so a group is named here by module; an ``xdist_group``
# marker on a test whose module is not listed is an error, never a silent no-op.
ONE_WORKER_MODULES: dict[str, str] = {
    "tests/reliability/test_processes.py": POOLED_GROUP,
    "tests/reliability/test_compaction_lease_processes.py": POOLED_GROUP,
    "tests/distribution/test_wheel.py": "distribution",
}
# Set before any storage is made, so that spawned workers inherit it too.
os.environ.setdefault(SQLITE_SYNCHRONOUS_ENV, "OFF")

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
        self.databases = (
            PostgresDatabases(_pg_admin_dsn(admin_url)) if admin_url is not None else None
        )

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgresql"

    @property
    def layout(self) -> str | None:
        """The layout of the migrated databases (``$OPENSQUILLA_TEST_PG_LAYOUT``; PostgreSQL)."""
        return (os.environ.get(PG_LAYOUT_ENV) or "").strip() or None if self.is_postgres else None

    @property
    def partitioned(self) -> bool:
        return (self.layout or "plain").startswith("partitioned")

    # -- Postgres helpers -------------------------------------------------------------
    async def admin(self) -> asyncpg.Connection:
        assert self.admin_url is not None
        return await asyncpg.connect(_pg_admin_dsn(self.admin_url))

    def target_for(self, database: str) -> str:
        assert self.admin_url is not None
        return _pg_target(self.admin_url, database)

    # -- both ----------------------------------------------------------------------
    async def prepare_template(self) -> None:
        if self.databases is not None:
            self.template = await self.databases.take(migrated=False, durable=True)
            # OPENSQUILLA_TEST_PG_LAYOUT=partitioned:8: every migrated database the suite
            # hands out is hash-partitioned (nox -s "tests(postgres-partitioned)").
            storage = SessionStorage(self.target_for(self.template), layout=self.layout)
        else:
            self.template = str(self.workdir / "template.db")
            storage = SessionStorage(self.template)
        await storage.connect()
        await storage.close()
        if self.databases is not None:
            await self.databases.set_template(self.template)

    async def fresh_migrated(
        self, tmp: Path, *, durable: bool = False
    ) -> tuple[str, Callable[[], Awaitable[None]]]:
        """A database at head, every table empty but the version tables: (target, cleanup).
        ``durable``: PostgreSQL's own ``synchronous_commit`` (SQLite's is the storage's)."""
        assert self.template is not None
        if self.databases is not None:
            return await self._postgres(migrated=True, durable=durable)
        path = tmp / f"sessions-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(self.template, path)
        os.chmod(path, 0o600)
        return str(path), _noop

    async def fresh_empty(
        self, tmp: Path, *, durable: bool = False
    ) -> tuple[str, Callable[[], Awaitable[None]]]:
        """A database without any schema of ours: (target, cleanup)."""
        if self.databases is not None:
            return await self._postgres(migrated=False, durable=durable)
        return str(tmp / f"empty-{uuid.uuid4().hex[:8]}.db"), _noop

    async def _postgres(
        self, *, migrated: bool, durable: bool
    ) -> tuple[str, Callable[[], Awaitable[None]]]:
        databases = self.databases
        assert databases is not None
        name = await databases.take(migrated=migrated, durable=durable)
        return self.target_for(name), lambda: databases.give_back(name, durable=durable)

    async def close(self) -> None:
        if self.databases is not None:
            await self.databases.close()


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
    _IN_USE.append(chosen)
    yield chosen
    asyncio.run(chosen.close())


_IN_USE: list[Backend] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for used in _IN_USE:
        if used.databases is not None:
            counts = ", ".join(f"{n} {what}" for what, n in used.databases.stats.items())
            terminalreporter.write_line(f"PostgreSQL test databases: {counts}")


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
    config.addinivalue_line(
        "markers",
        "plain_layout: a behaviour of the plain layout only (a downgrade below revision 0010, "
        "the global unique session id, keys or columns changed in place, a concurrent index "
        "repair); deselected, not skipped, when the databases are partitioned "
        "(OPENSQUILLA_TEST_PG_LAYOUT, docs/scaling.md#the-partitioned-layout)",
    )
    config.addinivalue_line(
        "markers",
        "durable: checks what survives a kill or a crash, so its databases keep the "
        "store's own durability (SQLite synchronous=FULL, PostgreSQL's synchronous_commit)",
    )
    config.addinivalue_line(
        "markers",
        "once(backend='sqlite'): a whole-process scenario (a wheel build, a soak) whose cost "
        "is not in the backend it runs on: it runs in that backend's session only",
    )
    config.addinivalue_line(
        "markers",
        "backend_free: uses no database fixture, so it runs the same on every backend "
        "(set by the collection, not by hand); run in the SQLite session only",
    )


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _runs_here(item: pytest.Item, *, on_postgres: bool, run_all: bool) -> bool:
    other = "sqlite_only" if on_postgres else "postgres_only"
    if item.get_closest_marker(other) is not None:
        return False
    partitioned = on_postgres and (os.environ.get(PG_LAYOUT_ENV) or "").strip() not in ("", "plain")
    if partitioned and item.get_closest_marker("plain_layout") is not None:
        return False
    # The reliability suite's warm process pool and its barrier manager are made once per
    # pytest process: the tests that use them share one xdist worker (and one pool). The
    # scheduler groups them by module (the controller sees node ids only), so a test that
    # uses them elsewhere must have its module listed.
    pooled = POOLED_FIXTURES & set(getattr(item, "fixturenames", ()))
    if pooled and ONE_WORKER_MODULES.get(_module(item.nodeid)) != POOLED_GROUP:
        raise pytest.UsageError(
            f"{item.nodeid} uses {', '.join(sorted(POOLED_FIXTURES))}: add its module to "
            f"ONE_WORKER_MODULES in tests/conftest.py as {POOLED_GROUP!r} (one xdist "
            "worker runs them all)"
        )
    group = item.get_closest_marker("xdist_group")
    if group is not None and _module(item.nodeid) not in ONE_WORKER_MODULES:
        raise pytest.UsageError(
            f"{item.nodeid} is marked xdist_group, which groups nothing under pytest 9: add "
            "its module to ONE_WORKER_MODULES in tests/conftest.py instead"
        )
    once = item.get_closest_marker("once")
    if once is not None and not run_all:
        return once.kwargs.get("backend", "sqlite") == ("postgresql" if on_postgres else "sqlite")
    if "backend" not in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.backend_free)
        return run_all or not on_postgres
    return True


class PoolGroupScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the process-pool tests as one work unit.

    pytest-xdist (3.8) names a test's group by appending ``@group`` to ``item._nodeid``,
    which pytest 9 no longer reads (``nodeid`` comes from ``item._id``): its ``xdist_group``
    markers group nothing, and every worker would start a pool of its own. The controller
    only sees node ids, so the group is named here by module. Work units are handed out
    largest first (``--loadscope-reorder``, the default), so this one starts at once on one
    worker while the other takes the single tests."""

    def _split_scope(self, nodeid: str) -> str:
        group = ONE_WORKER_MODULES.get(_module(nodeid))
        return group if group is not None else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadGroupScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return PoolGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_postgres = bool(os.environ.get(DATABASE_URL_ENV, "").strip())
    run_all = os.environ.get(RUN_ALL_ENV, "").strip() not in ("", "0")
    keep = {
        id(item) for item in items if _runs_here(item, on_postgres=on_postgres, run_all=run_all)
    }
    dropped = [item for item in items if id(item) not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if id(item) in keep]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """Captured output that holds a lone surrogate (the hostile-input tests log such values)
    is shown escaped: pytest-xdist sends reports to the controller as UTF-8, which cannot
    carry one."""
    report = yield
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for title, text in report.sections
    ]
    return report


def pytest_report_header(config: pytest.Config) -> str:
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    shown = make_url(url).render_as_string(hide_password=True) if url else "sqlite"
    return f"opensquilla-session test backend: {shown}"


def _durable(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker("durable") is not None


@pytest.fixture
async def database(
    backend: Backend, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """The target of a fresh database at head, for tests that open storages themselves."""
    target, cleanup = await backend.fresh_migrated(tmp_path, durable=_durable(request))
    try:
        yield target
    finally:
        await cleanup()


@pytest.fixture
async def empty_database(
    backend: Backend, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """The target of a fresh, empty database (no schema yet)."""
    target, cleanup = await backend.fresh_empty(tmp_path, durable=_durable(request))
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
def _durability(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``durable`` test's SQLite storages (and its workers') commit with FULL."""
    if _durable(request):
        monkeypatch.delenv(SQLITE_SYNCHRONOUS_ENV, raising=False)


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
