"""db upgrade / downgrade / current / check / history."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.db import migrate

from .support import cli, created_empty, run

HEAD = migrate.head_revisions()[0]


def test_current_and_check_on_a_migrated_database(database: str) -> None:
    current = cli(database, "db", "current", "--json")
    assert current.exit_code == 0, current.output
    assert json.loads(current.stdout) == {"current": [HEAD]}

    check = cli(database, "db", "check")
    assert check.exit_code == 0, check.output
    assert "state: up-to-date" in check.stdout


def test_an_empty_database_is_behind_until_upgraded(empty_database: str) -> None:
    created_empty(empty_database)  # db check reads: it opens no missing file
    behind = cli(empty_database, "db", "check", "--json")
    assert behind.exit_code == 2
    report = json.loads(behind.stdout)
    assert report["state"] == "behind" and report["current"] == [] and report["ok"] is False
    assert cli(empty_database, "db", "current").stdout.startswith("none")

    upgraded = cli(empty_database, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert f"upgraded from base to {HEAD}" in upgraded.stdout
    assert cli(empty_database, "db", "check").exit_code == 0
    again = cli(empty_database, "db", "upgrade")
    assert again.exit_code == 0 and f"already at {HEAD}" in again.stdout


@pytest.mark.plain_layout  # a partitioned database cannot go below 0010
def test_downgrade_to_base_and_back(database: str) -> None:
    down = cli(database, "db", "downgrade", "base")
    assert down.exit_code == 0, down.output
    assert f"downgraded from {HEAD} to base" in down.stdout
    assert json.loads(cli(database, "db", "check", "--json").stdout)["state"] == "behind"
    assert cli(database, "db", "upgrade", HEAD).exit_code == 0
    assert cli(database, "db", "check").exit_code == 0


async def _execute(dsn: str, statement: sa.Executable) -> None:
    async with SessionStorage(dsn) as storage, storage.engine.begin() as conn:
        await conn.execute(statement)


def test_a_database_migrated_by_newer_code_is_ahead(database: str) -> None:
    version = sa.table("opensquilla_session_version", sa.column("version_num"))
    run(_execute(database, sa.update(version).values(version_num="ffffffffffff")))
    ahead = cli(database, "db", "check", "--json")
    assert ahead.exit_code == 2
    report = json.loads(ahead.stdout)
    assert report["state"] == "ahead" and report["unknown"] == ["ffffffffffff"]


def test_drift_is_reported(database: str) -> None:
    run(_execute(database, sa.text("DROP INDEX idx_sessions_workspace_id")))
    drifted = cli(database, "db", "check")
    assert drifted.exit_code == 2
    assert "state: drift" in drifted.stdout
    assert "idx_sessions_workspace_id" in drifted.stdout


def test_history_lists_the_head() -> None:
    result = cli(None, "db", "history", "--json")
    assert result.exit_code == 0, result.output
    revisions = json.loads(result.stdout)["revisions"]
    assert [r["revision"] for r in revisions if r["is_head"]] == [HEAD]
    assert revisions[-1]["down_revision"] is None
    assert HEAD in cli(None, "db", "history").stdout
