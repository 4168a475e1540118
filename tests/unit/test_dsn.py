"""Storage targets: every accepted spelling and every refusal (DESIGN §2).

A mistyped DSN must fail at construction with an error naming the accepted forms, and a
password in a URL must never show up in an error, a traceback or a ``repr``.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.config import mask_password
from opensquilla.session.db.dsn import ACCEPTED_FORMS, parse_target
from opensquilla.session.errors import ConfigurationError, SessionStoreError

SECRET = "hunter2-Sekr3t"


def test_memory() -> None:
    """``:memory:`` is a private in-memory SQLite database with no file."""
    target = parse_target(":memory:")
    assert target.backend == "sqlite"
    assert target.memory
    assert target.path is None
    assert target.url.drivername == "sqlite+aiosqlite"


@pytest.mark.parametrize("spelling", ["sqlite:///:memory:", "sqlite://", "sqlite+aiosqlite://"])
def test_memory_urls_match_the_memory_shorthand(spelling: str) -> None:
    """The URL spellings of an in-memory database mean exactly what ``:memory:`` means."""
    target = parse_target(spelling)
    assert target.memory
    assert target.path is None
    assert target.render() == parse_target(":memory:").render()


def test_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative path is resolved once, so a later chdir cannot move the database."""
    monkeypatch.chdir(tmp_path)
    target = parse_target("data/sessions.db")
    assert target.backend == "sqlite"
    assert not target.memory
    assert target.path == tmp_path / "data" / "sessions.db"
    assert target.url.drivername == "sqlite+aiosqlite"
    assert target.url.database == str(tmp_path / "data" / "sessions.db")


def test_absolute_path(tmp_path: Path) -> None:
    target = parse_target(str(tmp_path / "abs.db"))
    assert target.path == tmp_path / "abs.db"


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``~`` means the user's home, as it does on a command line."""
    monkeypatch.setenv("HOME", str(tmp_path))
    target = parse_target("~/state/s.db")
    assert target.path == tmp_path / "state" / "s.db"


def test_pathlib_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_target(Path("p.db")).path == tmp_path / "p.db"
    assert parse_target(tmp_path / "q.db").path == tmp_path / "q.db"


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+aiosqlite"])
def test_sqlite_urls(scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain ``sqlite://`` is normalised to the async driver; relative URL paths resolve."""
    monkeypatch.chdir(tmp_path)
    relative = parse_target(f"{scheme}:///rel.db")
    assert relative.url.drivername == "sqlite+aiosqlite"
    assert relative.path == tmp_path / "rel.db"
    absolute = parse_target(f"{scheme}:///{tmp_path}/abs.db")
    assert absolute.path == tmp_path / "abs.db"
    assert absolute.backend == "sqlite"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:pw@db.example:5433/sessions",
        "postgres://user:pw@db.example:5433/sessions",
        "postgresql+asyncpg://user:pw@db.example:5433/sessions",
    ],
)
def test_postgres_urls(url: str) -> None:
    """Every Postgres spelling ends up on asyncpg with the URL parts intact."""
    target = parse_target(url)
    assert target.backend == "postgresql"
    assert target.path is None
    assert not target.memory
    assert target.url.drivername == "postgresql+asyncpg"
    assert (target.url.username, target.url.password) == ("user", "pw")
    assert (target.url.host, target.url.port, target.url.database) == (
        "db.example",
        5433,
        "sessions",
    )


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_target("  postgresql://u@h/d \n").backend == "postgresql"


@pytest.mark.parametrize(
    "target",
    [
        f"postgresql+psycopg2://bob:{SECRET}@h/db",
        f"postgresql+psycopg://bob:{SECRET}@h/db",
        "sqlite+pysqlite:///x.db",
        f"mysql://bob:{SECRET}@h/db",
        f"mysql+aiomysql://bob:{SECRET}@h/db",
        "",
        "   ",
        f"postgresql://bob:{SECRET}@h:notaport/db",
        f"nosuchdb://bob:{SECRET}@h/db",
    ],
)
def test_refusals_name_the_accepted_forms(target: str) -> None:
    """A sync driver, an unknown database or a broken URL is refused up front."""
    with pytest.raises(ConfigurationError) as info:
        parse_target(target)
    message = str(info.value)
    assert ACCEPTED_FORMS in message
    for form in (":memory:", "sqlite+aiosqlite://", "postgresql+asyncpg://"):
        assert form in message
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, SessionStoreError)


@pytest.mark.parametrize("target", [None, 42, b"sqlite:///x.db"])
def test_non_string_targets_are_refused(target: Any) -> None:
    with pytest.raises(ConfigurationError, match="accepted forms"):
        parse_target(target)


def test_sync_driver_error_suggests_the_async_one() -> None:
    with pytest.raises(ConfigurationError, match=r"postgresql\+asyncpg"):
        parse_target("postgresql+psycopg2://u@h/db")
    with pytest.raises(ConfigurationError, match=r"sqlite\+aiosqlite"):
        parse_target("sqlite+pysqlite:///x.db")


def _all_text(exc: BaseException) -> str:
    """Everything a log could show: the formatted traceback and every chained exception."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(current.args)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    "target",
    [
        f"postgresql+psycopg2://bob:{SECRET}@h/db",
        f"sqlite+pysqlite://bob:{SECRET}@h/x.db",
        f"mysql://bob:{SECRET}@h/db",
        f"postgresql://bob:{SECRET}@h:notaport/db",
        f"postgresql://bob:{SECRET}@h:/db?x=1",
        f"nosuchdb://bob:{SECRET}@h/db",
    ],
)
def test_password_never_appears_in_errors(target: str) -> None:
    """Errors end up in logs; the password must not, whichever way the error is shown."""
    with pytest.raises(ConfigurationError) as info:
        SessionStorage(target)
    text = _all_text(info.value)
    assert "bob:***@" in str(info.value)  # the error does show the URL...
    assert SECRET not in text  # ...but never its password


def test_storage_repr_hides_the_password() -> None:
    """A repr lands in logs and debuggers: user and host are useful, the password is not."""
    storage = SessionStorage(f"postgresql://bob:{SECRET}@db.example/sessions")
    shown = repr(storage)
    assert SECRET not in shown
    assert "bob" in shown and "db.example" in shown
    assert SECRET not in storage.target.render()
    assert SECRET not in str(storage.target)


def test_mask_password() -> None:
    assert mask_password(f"postgresql://bob:{SECRET}@h/db") == "postgresql://bob:***@h/db"
    assert mask_password("postgresql://bob@h/db") == "postgresql://bob@h/db"
