"""No password, anywhere: not in a repr, an error, a log line or any command's output.

``postgresql://app@host/db?password=S3CRET`` (asyncpg takes the password from the query)
showed it in ``repr(SessionStorage(...))``, connect errors, ``copy``'s header and
``demo --json``; malformed URLs echoed it, and ``postgresql//app:pw@host/db`` became a
SQLite *path* with the password as a directory name. A URL-shaped string is never a path,
and every rendering of a DSN masks passwords and secret-looking parameters.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from opensquilla.session import SessionStorage
from opensquilla.session.errors import ConfigurationError, SessionStoreError
from tests.helpers import run_alembic

from ..cli.support import cli, run, seed_rich

SECRET = "S3CRET-never-shown"
CLOSED = "127.0.0.1:1"  # nothing listens on port 1

WELL_FORMED = [
    f"postgresql://app@{CLOSED}/db?password={SECRET}",
    f"postgresql://app:{SECRET}@{CLOSED}/db",
    f"postgresql+asyncpg://app@{CLOSED}/db?ssl=disable&password={SECRET}",
    f"postgres://app:wrong@{CLOSED}/db?password={SECRET}",
]
MALFORMED = [
    f"postgresql:/app:{SECRET}@host/db",
    f"postgresql//app:{SECRET}@host/db",
    f"postgres//app:{SECRET}@host/db",
    f"//app:{SECRET}@host/db",
    f"app:{SECRET}@host/db",
    f"postgresql:app:{SECRET}@host/db",
    f"postgresql://app:{SECRET}@host:notaport/db",
    f"postgresql://app:{SECRET}@host:99999/db",
    f"host=db user=app password={SECRET}",
    f"sessions.db?password={SECRET}",
    f"nosuchdb://app:{SECRET}@host/db",
    # Parameters asyncpg does not take (it would fail the connection with a TypeError).
    f"postgresql://app@host/db?sslpassword={SECRET}",
    f"postgresql://app@host/db?sslmode=sometimes&password={SECRET}",
    f"sqlite:///x.db?password={SECRET}",
]


def _all_text(exc: BaseException) -> str:
    """Everything a log could show of an error: the traceback and every chained error."""
    parts = ["".join(traceback.format_exception(exc))]
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(current.args)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _debug_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    for name in ("", "sqlalchemy", "alembic", "asyncpg", "aiosqlite", "opensquilla"):
        caplog.set_level(logging.DEBUG, logger=name)


@pytest.mark.parametrize("dsn", WELL_FORMED)
def test_reprs_and_renderings_hide_query_passwords(dsn: str) -> None:
    storage = SessionStorage(dsn)
    for shown in (
        repr(storage),
        str(storage),
        repr(storage.target),
        str(storage.target),
        storage.target.render(),
    ):
        assert SECRET not in shown, shown
        assert "app" in shown and "127.0.0.1" in shown


def test_a_query_password_still_reaches_the_driver() -> None:
    """Masking moves ``?password=`` into the URL's password; the login is unchanged."""
    target = SessionStorage(f"postgresql://app@{CLOSED}/db?password={SECRET}").target
    assert target.url.password == SECRET
    assert "password" not in target.url.query
    assert SECRET not in repr(target.url)


@pytest.mark.parametrize("dsn", WELL_FORMED)
async def test_a_connect_error_against_a_closed_port_shows_no_password(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    _debug_everywhere(caplog)
    storage = SessionStorage(dsn)
    with pytest.raises(SessionStoreError) as caught:
        await storage.connect()
    assert SECRET not in _all_text(caught.value)
    assert SECRET not in caplog.text
    assert all(SECRET not in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("dsn", MALFORMED)
def test_a_malformed_url_is_refused_masked_and_never_becomes_a_path(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        SessionStorage(dsn)
    assert SECRET not in _all_text(caught.value)
    assert "***" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dsn", MALFORMED + WELL_FORMED)
def test_the_cli_never_shows_the_password_even_at_debug(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli(dsn, "-vv", "sessions", "list", "--json")
    assert result.exit_code == 1
    assert SECRET not in result.output
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert list(tmp_path.iterdir()) == []  # no SQLite file or directory was made of it


def test_copy_names_its_endpoints_without_the_password(database: str, tmp_path: Path) -> None:
    run(seed_rich(database, big=False))
    result = cli(None, "copy", "--from", database, "--to", WELL_FORMED[0])
    assert result.exit_code == 1
    assert SECRET not in result.output


@pytest.mark.parametrize("dsn", [WELL_FORMED[0], MALFORMED[1], MALFORMED[0]])
async def test_alembic_errors_show_no_password(dsn: str) -> None:
    result = await asyncio.to_thread(run_alembic, "-x", f"dsn={dsn}", "current")
    assert result.returncode != 0
    assert SECRET not in result.stdout + result.stderr


def _with_password(database: str) -> str:
    """The test database's URL with a password in the query (the local server trusts
    every login, so it connects)."""
    url = make_url(database)
    return url.render_as_string(hide_password=False) + f"?password={SECRET}"


@pytest.mark.postgres_only
def test_every_command_output_on_a_working_connection_hides_the_password(
    database: str, tmp_path: Path
) -> None:
    dsn = _with_password(database)
    outputs: list[Any] = [
        cli(dsn, "-vv", "demo", "--json"),
        cli(dsn, "-vv", "demo"),
        cli(dsn, "-vv", "stats", "--json"),
        cli(dsn, "-vv", "db", "current", "--json"),
        cli(dsn, "-vv", "db", "check"),
        cli(None, "-vv", "copy", "--from", dsn, "--to", str(tmp_path / "copy.db")),
        cli(None, "-vv", "copy", "--from", str(tmp_path / "copy.db"), "--to", dsn, "--json"),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    assert "***" in outputs[0].stdout  # demo --json names its database, masked
    assert "copying" in outputs[5].stderr and "***" in outputs[5].stderr
