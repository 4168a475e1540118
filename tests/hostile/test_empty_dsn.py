"""An explicit empty DSN is refused: never a fall-back to the environment or the default.

``opensquilla-session --dsn "$UNSET_VAR" cap --max 0`` used to run on
``$OPENSQUILLA_SESSION_DSN`` and delete everything there; ``alembic -x dsn=`` the same.
An empty or blank DSN that was given is one clear error, and nothing is touched.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.config import resolve_dsn
from opensquilla.session.errors import ConfigurationError
from tests.helpers import run_alembic

from ..cli.support import cli, dump_tables, run, seed_rich

# Commands that delete or rewrite, and some that only read: none may run.
COMMANDS = [
    ("cap", "--max", "0"),
    ("prune", "--older-than", "0s"),
    ("reset", "agent:main:rich"),
    ("truncate", "agent:main:rich", "0"),
    ("db", "downgrade", "base"),
    ("sessions", "list"),
    ("stats",),
    ("demo",),
]


@pytest.mark.parametrize("empty", ["", "   ", "\t\n"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_an_empty_dsn_option_is_refused_and_the_env_database_is_untouched(
    database: str, empty: str, command: tuple[str, ...]
) -> None:
    run(seed_rich(database, big=False))
    before = run(dump_tables(database))

    result = cli(empty, *command, env={"OPENSQUILLA_SESSION_DSN": database})

    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: --dsn was given but is empty")
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.output
    assert run(dump_tables(database)) == before


def test_an_empty_dsn_never_falls_back_to_the_default_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the environment variable the fall-back would be the embedded default file:
    it is not created, let alone used."""
    home = tmp_path / "home"
    monkeypatch.setenv("OPENSQUILLA_STATE_DIR", str(home))
    monkeypatch.delenv("OPENSQUILLA_SESSION_DSN", raising=False)
    result = cli("", "demo")
    assert result.exit_code == 1
    assert not (home / "sessions.db").exists()


@pytest.mark.parametrize("option", ["--from", "--to"])
def test_copy_refuses_an_empty_source_or_target(database: str, option: str) -> None:
    run(seed_rich(database, big=False))
    before = run(dump_tables(database))
    other = {"--from": database, "--to": database}
    other[option] = " "
    result = cli(None, "copy", "--from", other["--from"], "--to", other["--to"])
    assert result.exit_code == 1
    assert f"{option} was given but is empty" in result.stderr
    assert run(dump_tables(database)) == before


@pytest.mark.parametrize("empty", ["", "  "])
def test_the_library_refuses_an_empty_target(empty: str) -> None:
    with pytest.raises(ConfigurationError, match="empty"):
        SessionStorage(empty)
    with pytest.raises(ConfigurationError, match="the DSN was given but is empty"):
        resolve_dsn(empty)


def test_no_dsn_at_all_still_means_the_environment_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an explicit empty value is refused; leaving the option out is the documented
    fall-back."""
    monkeypatch.setenv("OPENSQUILLA_SESSION_DSN", str(tmp_path / "env.db"))
    assert resolve_dsn(None) == str(tmp_path / "env.db")
    monkeypatch.delenv("OPENSQUILLA_SESSION_DSN")
    monkeypatch.setenv("OPENSQUILLA_STATE_DIR", str(tmp_path / "home"))
    assert resolve_dsn(None) == str(tmp_path / "home" / "sessions.db")


@pytest.mark.parametrize("x_argument", ["dsn=", "dsn=  "])
async def test_alembic_with_an_empty_x_dsn_refuses_and_drops_nothing(
    database: str, x_argument: str
) -> None:
    await seed_rich(database, big=False)
    before = await dump_tables(database)

    result = await asyncio.to_thread(
        run_alembic, "-x", x_argument, "downgrade", "base", dsn=database
    )

    assert result.returncode != 0
    assert "-x dsn= was given but is empty" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert await dump_tables(database) == before
