"""The test matrix: ``nox`` runs lint and the whole suite on SQLite and on PostgreSQL.

    nox                       # lint, docs, tests(sqlite), tests(postgres), bench (--quick smoke)
    nox -s docs               # the documentation site: mkdocs build --strict
    nox -s "tests(sqlite)"    # only the SQLite half: needs no PostgreSQL
    nox -s "tests(postgres)" -- -k branch
    nox -s contract           # ../shared/spec/run_contract.py on both backends

The Postgres server comes from OPENSQUILLA_TEST_POSTGRES_URL (default: the local server,
postgresql://postgres@127.0.0.1:5432/postgres). If it does not answer, tests(postgres)
fails: a missing backend is never a skip.

Virtual environments are made by uv when it is installed (``pip install 'nox[uv]'``), else
by virtualenv, and reused from one run to the next: every run still installs the project
and its extras into them, so a changed dependency is picked up.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = [
    "lint",
    "docs",
    "tests(sqlite)",
    "tests(postgres)",
    "tests(postgres-partitioned)",
    "bench",
]

# The layout of tests(postgres-partitioned)'s databases (docs/scaling.md#the-partitioned-layout).
PARTITIONED_LAYOUT = "partitioned:8"
nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"

# This machine kind sets PYTHONDONTWRITEBYTECODE=1 and uv installs without compiling, so
# every process (each xdist worker, each subprocess a test starts) compiled every module it
# imported from source: a collection took 22 s of CPU instead of 8, ``import
# opensquilla.session.cli.app`` 3.0 s instead of 1.3. The sessions write bytecode caches (in
# their virtual environments and the checkout's ``__pycache__``, which git ignores). An empty
# value is "not set" to Python.
os.environ["PYTHONDONTWRITEBYTECODE"] = ""

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SPEC_DIR = Path(__file__).resolve().parent.parent / "shared" / "spec"
PYTEST_ASYNCIO_OPTS = "-o asyncio_default_fixture_loop_scope=function"
# pytest-xdist workers: one per core (at most 4, so a big machine stays well inside the
# server's connection limit); the reliability suite stays on one of them (its process pool
# and barriers; tests/conftest.py puts it in one group).
WORKERS = str(min(os.cpu_count() or 1, 4))


def postgres_url() -> str:
    return os.environ.get("OPENSQUILLA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def require_postgres(session: nox.Session, url: str) -> None:
    probe = (
        "import asyncio, sys, asyncpg\n"
        "async def main():\n"
        "    conn = await asyncio.wait_for(asyncpg.connect(sys.argv[1]), 10)\n"
        "    await conn.close()\n"
        "asyncio.run(main())\n"
    )
    try:
        session.run("python", "-c", probe, url.replace("+asyncpg", ""), silent=True)
    except nox.command.CommandFailed:
        session.error(f"PostgreSQL does not answer at {url}; start it (see README)")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-e", ".[lint,test]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports")  # the layering contracts in pyproject.toml


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs.yml), strict: a broken link, a missing anchor, an
    included section that is gone or a docstring mkdocstrings cannot read fails the build."""
    session.install("-e", ".[docs]")
    site = Path(session.create_tmp()) / "site"
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(site), env={"NO_MKDOCS_2_WARNING": "1"}
    )


@nox.session
@nox.parametrize(
    "backend",
    [
        nox.param("sqlite", id="sqlite"),
        nox.param("postgres", id="postgres"),
        nox.param("postgres-partitioned", id="postgres-partitioned"),
    ],
)
def tests(session: nox.Session, backend: str) -> None:
    """The suite on one backend. Tests that use no database run in the SQLite session
    only (tests/conftest.py); ``-- -n 0`` runs in one process (for ``pdb``)."""
    # pip itself too: uv's environments come without it, and the wheel test builds with it.
    session.install("-e", ".[test]", "pip")
    env = {"OPENSQUILLA_TEST_DATABASE_URL": ""}
    if backend.startswith("postgres"):
        url = postgres_url()
        require_postgres(session, url)
        env["OPENSQUILLA_TEST_DATABASE_URL"] = url
    if backend == "postgres-partitioned":
        # The suite's migrated databases are hash-partitioned by session_key (tests/conftest.py).
        env["OPENSQUILLA_TEST_PG_LAYOUT"] = PARTITIONED_LAYOUT
    session.run("pytest", "-n", WORKERS, "--dist", "loadgroup", *session.posargs, env=env)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark's --quick run on both backends: a smoke test, no time is asserted."""
    session.install("-e", ".")
    url = postgres_url()
    require_postgres(session, url)
    out = Path(session.create_tmp())
    for backend in ("sqlite", "postgres"):
        session.run(
            "python",
            "bench/run.py",
            "--backend",
            backend,
            "--quick",
            "--json",
            str(out / f"{backend}.json"),
            env={"BENCH_POSTGRES_URL": url},
        )
    # The partitioned layout against the plain one (docs/scaling.md), 10,000 entries.
    session.run("python", "bench/partitioned.py", "--quick", env={"BENCH_POSTGRES_URL": url})


@nox.session
def contract(session: nox.Session) -> None:
    """The contract (../shared/spec) against the installed package, on both backends."""
    runner = SPEC_DIR / "run_contract.py"
    if not runner.is_file():
        session.skip(f"no contract runner at {runner}")
    session.install("-e", ".[test]")
    url = postgres_url()
    require_postgres(session, url)
    pg_url = url.replace("postgresql://", "postgresql+asyncpg://", 1)
    env = {"PYTEST_ADDOPTS": PYTEST_ASYNCIO_OPTS}
    session.run("python", str(runner), "--pg-url", pg_url, env=env)
    # Once more on PostgreSQL, every database the contract creates laid out partitioned
    # (the storage's layout setting, read from the environment for a new database).
    partitioned = {**env, "OPENSQUILLA_SESSION_LAYOUT": PARTITIONED_LAYOUT}
    session.run("python", str(runner), "--backend", "postgres", "--pg-url", pg_url, env=partitioned)
