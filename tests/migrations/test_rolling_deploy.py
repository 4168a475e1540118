"""Rolling deploys (docs/migrations.md#rolling-deploys): the previous release, run for real,
against a database a newer release has already upgraded.

"The previous release" is this tree without the revisions after 0002 (the search revision
0003 and what follows): its ``src`` and ``alembic`` copied into a temporary directory and run
in a subprocess whose ``PYTHONPATH`` puts them before the installed package. The commits
before the store had its own version table read ``alembic_version``; one of them (the newest
without 0003, taken out of git) is run too, for what such a release does across the move.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager
from opensquilla.session.db import migrate
from opensquilla.session.db.version_table import SHARED_VERSION_TABLE, VERSION_TABLE
from opensquilla.session.storage import SessionStorage
from opensquilla.session.usecases import overview

REPO = Path(__file__).resolve().parents[2]
NEW_REVISION = "alembic/versions/20261130_0003_transcript_search.py"
LAST_OLD_REVISION = "0002"

OLD_RELEASE_SCRIPT = r"""
import asyncio, json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
import opensquilla.session as package
from opensquilla.session import SessionManager
from opensquilla.session.db import migrate
from opensquilla.session.storage import SessionStorage

async def main(target):
    storage = SessionStorage(target)
    try:
        await storage.connect()
    except Exception as exc:
        print(json.dumps({"refused": f"{type(exc).__name__}: {exc}"}))
        return
    try:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.append_message("agent:main:rolling", "user", "written by the old release")
        entries = await manager.get_transcript("agent:main:rolling")
        print(json.dumps({
            "package": package.__file__,
            "heads": list(migrate.head_revisions()),
            "current": list(await migrate.current_revisions(storage.engine)),
            "contents": [entry.content for entry in entries],
        }))
    finally:
        await storage.close()

asyncio.run(main(sys.argv[1]))
"""


def _previous_release(tmp_path: Path) -> Path:
    """This tree's ``src`` and ``alembic`` without the revisions after 0002: a release at
    0002 that records its revision where this one does (releases older than the store's own
    version table read ``alembic_version`` and cannot see a newer revision at all,
    docs/migrations.md#version-table)."""
    release = tmp_path / "previous-release"
    for part in ("src", "alembic"):
        shutil.copytree(
            REPO / part, release / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    for script in (release / "alembic" / "versions").glob("*.py"):
        if script.name.split("_")[1] > LAST_OLD_REVISION:
            script.unlink()
    assert not (release / NEW_REVISION).exists()
    return release


def _pre_move_release(tmp_path: Path) -> Path:
    """The repository's ``src`` and ``alembic`` at the newest commit without 0003: a real
    earlier release, which recorded its revision in ``alembic_version``."""
    log = subprocess.run(
        ["git", "-C", str(REPO), "log", "--diff-filter=A", "--format=%H", "--", NEW_REVISION],
        capture_output=True,
        text=True,
        check=False,
    )
    assert log.returncode == 0 and log.stdout.split(), f"needs the git history: {log.stderr}"
    commit = f"{log.stdout.split()[-1]}^"
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "src", "alembic"],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, archive.stderr.decode()
    release = tmp_path / "pre-move-release"
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(release, filter="data")
    assert not (release / "src/opensquilla/session/db/version_table.py").exists()
    return release


def _run_previous(release: Path, target: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(release / "src")}
    done = subprocess.run(
        [sys.executable, "-c", OLD_RELEASE_SCRIPT, target],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


async def _seed(target: str) -> None:
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:rolling")
        await manager.append_message("agent:main:rolling", "user", "written by the new release")


def test_the_previous_release_runs_against_a_database_at_the_new_head(
    database: str, tmp_path: Path
) -> None:
    """0003 is expand-only: the previous release connects without migrating anything (it
    logs that the database is newer), writes, reads, and what it wrote is searchable by the
    new release, because the database keeps the search objects current itself."""
    release = _previous_release(tmp_path)
    asyncio.run(_seed(database))

    result = _run_previous(release, database)

    assert "refused" not in result, result
    assert str(release) in str(result["package"])
    assert "0003" not in result["heads"]  # type: ignore[operator]
    assert result["current"] == list(migrate.head_revisions())
    assert result["contents"] == ["written by the new release", "written by the old release"]
    assert "expand-only" in str(result["stderr"])

    async def search() -> list[str]:
        async with SessionStorage(database) as storage:
            hits = await storage.search_transcript("old release")
            return [hit["snippet"] for hit in hits]

    (snippet,) = asyncio.run(search())
    assert snippet.startswith("written by the >>>old<<< ")


@pytest.mark.parametrize("record", ["not-expand-only", "missing"])
def test_the_previous_release_refuses_a_newer_schema_it_cannot_trust(
    database: str, tmp_path: Path, record: str
) -> None:
    """Without a record that every newer revision is expand-only, the previous release
    refuses to run, naming the revision, and changes nothing."""
    release = _previous_release(tmp_path)

    async def tamper() -> None:
        async with SessionStorage(database) as storage, storage.engine.begin() as conn:
            table = sa.table(migrate.POLICY_TABLE, sa.column("revision"), sa.column("expand_only"))
            if record == "missing":
                await conn.execute(sa.delete(table))
            else:
                await conn.execute(sa.update(table).values(expand_only=False))

    asyncio.run(tamper())
    result = _run_previous(release, database)

    refusal = str(result.get("refused"))
    assert refusal.startswith("MigrationError"), result
    # The newest revision is the first one the walk down from the database meets.
    (head,) = migrate.head_revisions()
    assert f"revision {head}" in refusal
    assert "expand-only" in refusal


def test_a_release_from_before_the_version_table_runs_and_its_row_goes_later(
    database: str, tmp_path: Path
) -> None:
    """A release that reads ``alembic_version`` (docs/migrations.md#version-table) finds no
    revision there, replays its own revisions over the newer schema (they are idempotent),
    records its head in ``alembic_version`` and runs; the store's own version stays at head,
    and the next ``db upgrade`` deletes the row it left."""
    release = _pre_move_release(tmp_path)
    asyncio.run(_seed(database))

    result = _run_previous(release, database)

    async def versions(table: str) -> list[str]:
        async with overview.unmigrated(database) as storage, storage.engine.connect() as conn:
            present = await conn.run_sync(lambda sync: sa.inspect(sync).has_table(table))
            if not present:
                return []
            rows = await conn.execute(sa.text(f"SELECT version_num FROM {table}"))
            return sorted(row[0] for row in rows)

    if database.startswith("postgresql"):
        # Revision 0010's keys (session_key first) are not ones that release's 0001 knows:
        # it refuses the tables before writing anything (docs/migrations.md#rolling-deploys).
        refusal = str(result.get("refused"))
        assert refusal.startswith("MigrationError"), result
        assert "its primary key is (session_key, id), not (id)" in refusal
        assert asyncio.run(versions(VERSION_TABLE)) == list(migrate.head_revisions())
        assert asyncio.run(versions(SHARED_VERSION_TABLE)) == []
        assert asyncio.run(overview.schema_report(database)).ok
        return
    assert "refused" not in result, result
    assert result["current"] == ["0002"]
    assert result["contents"] == ["written by the new release", "written by the old release"]

    assert asyncio.run(versions(VERSION_TABLE)) == list(migrate.head_revisions())
    assert asyncio.run(versions(SHARED_VERSION_TABLE)) == ["0002"]
    asyncio.run(overview.upgrade(database))
    assert asyncio.run(versions(SHARED_VERSION_TABLE)) == []
    assert asyncio.run(overview.schema_report(database)).ok
