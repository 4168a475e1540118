"""A crash between a reset's commit and the archive's publish loses nothing.

A reset stages the old generation's archive (a hidden temporary file, fsynced) inside its
transaction and renames it into place after the COMMIT. A process that dies in between
leaves the only copy of that generation under the hidden name. The store's next start
settles it: the database says whether the reset committed (the session's generation has
moved on: publish) or not (the archived generation is still current: the rows are all
still there, discard the stale copy); ``stats`` and ``repair list`` report what it did and
what is still unpublished. Files a live reset still holds and files of other databases
are left alone.

The crash is real and deterministic: a child process runs the reset and ``os._exit``s at
exactly that point (the kernel drops its file lock and its connection, as on a kill).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.fs.reset_archive import (
    INCOMPLETE_GRACE_SECONDS,
    stage_reset_archive,
    store_tag,
)
from opensquilla.session.models import GenerationSnapshot
from tests.cli.support import cli

KEY = "agent:main:precious"
AFTER_COMMIT, INSIDE_TRANSACTION = 17, 18

# Runs the reset in a child process and dies at the chosen point.
_CRASHING_RESET = """
import asyncio, os, sys
from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.fs import reset_archive as archive, files

target, point = sys.argv[1], sys.argv[2]
if point == "after_commit":
    # publish() is the rename after the COMMIT: die instead of renaming.
    files.StagedFile.publish = lambda self: os._exit(17)
else:
    real_stage = archive._stage

    def stage_then_die(*args):
        real_stage(*args)  # complete, fsynced and labelled, inside the open transaction
        os._exit(18)

    archive._stage = stage_then_die


async def main():
    async with SessionStorage(target) as storage:
        await SessionManager(storage, inject_time_prefix=False).reset(sys.argv[3])


asyncio.run(main())
sys.exit(3)  # not reached: the point was never hit
"""


def _crash_a_reset(target: str, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_RESET, target, point, KEY],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    expected = AFTER_COMMIT if point == "after_commit" else INSIDE_TRANSACTION
    assert done.returncode == expected, done.stderr


async def _seed(target: str) -> str:
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        node = await manager.create(KEY)
        await manager.append_message(KEY, "user", "the only copy of this")
        await manager.append_message(KEY, "assistant", "and of this")
        return node.session_id


async def _current_id_and_transcript(target: str) -> tuple[str, list[str | None]]:
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        node = await manager.get_session(KEY)
        assert node is not None
        return node.session_id, [e.content for e in await manager.get_transcript(KEY)]


def _hidden(directory: Path) -> list[Path]:
    if not directory.exists():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith("."))


def _published(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.exists() else []


@pytest.mark.parametrize("reported_by", ["connect", "stats", "repair list"])
def test_a_crash_between_the_resets_commit_and_the_publish_loses_nothing(
    reported_by: str, database: str, _archive_dir: Path
) -> None:
    old_id = asyncio.run(_seed(database))
    _crash_a_reset(database, "after_commit")

    # The reset committed; the old generation exists only in the hidden file.
    new_id, transcript = asyncio.run(_current_id_and_transcript_raw(database))
    assert new_id != old_id and transcript == []
    assert len(_hidden(_archive_dir)) == 1 and _published(_archive_dir) == []

    if reported_by == "connect":

        async def start() -> list[tuple[str, str, str]]:
            async with SessionStorage(database) as storage:
                return [
                    (item.outcome, item.session_key, item.session_id)
                    for item in storage.recovered_archives
                ]

        assert asyncio.run(start()) == [("published", KEY, old_id)]
    else:
        command = ["stats", "--json"] if reported_by == "stats" else ["repair", "list", "--json"]
        result = cli(database, *command)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        archives = report["reset_archives"]
        assert archives["unpublished"] == []
        (recovered,) = archives["recovered"]
        assert (recovered["outcome"], recovered["session_key"], recovered["session_id"]) == (
            "published",
            KEY,
            old_id,
        )
        assert Path(recovered["path"]) == _published(_archive_dir)[0]

    (archive_file,) = _published(_archive_dir)
    assert _hidden(_archive_dir) == []
    document = json.loads(archive_file.read_text(encoding="utf-8"))
    assert document["session_id"] == old_id
    assert [e["content"] for e in document["transcript_entries"]] == [
        "the only copy of this",
        "and of this",
    ]
    # Settled once: the next start has nothing left to do.
    later = cli(database, "repair", "list", "--json")
    assert json.loads(later.stdout)["reset_archives"] == {"unpublished": [], "recovered": []}


async def _current_id_and_transcript_raw(target: str) -> tuple[str, list[str | None]]:
    """Like ``_current_id_and_transcript`` but without ``connect()``'s recovery (which
    would settle the file before the test looks at it)."""
    storage = SessionStorage(target)
    await storage.connect_without_migrating()
    try:
        node = await storage.get_session(KEY)
        assert node is not None
        entries = await storage.get_transcript(node.session_id)
        return node.session_id, [e.content for e in entries]
    finally:
        await storage.close()


def test_a_crash_inside_the_reset_transaction_discards_the_staged_copy(
    database: str, _archive_dir: Path
) -> None:
    old_id = asyncio.run(_seed(database))
    _crash_a_reset(database, "inside_transaction")

    assert len(_hidden(_archive_dir)) == 1
    assert asyncio.run(_current_id_and_transcript_raw(database))[0] == old_id

    result = cli(database, "repair", "list")

    assert result.exit_code == 0, result.output
    assert "reset archive discarded at start" in result.stdout
    assert "did not commit" in result.stdout
    assert _hidden(_archive_dir) == [] and _published(_archive_dir) == []
    # Nothing was lost: the reset never happened.
    assert asyncio.run(_current_id_and_transcript(database)) == (
        old_id,
        ["the only copy of this", "and of this"],
    )


async def _stage_for(storage: SessionStorage, tag: str):  # type: ignore[no-untyped-def]
    """A staged archive of KEY's current generation, as a reset in flight holds it."""
    node = await storage.get_session(KEY)
    assert node is not None
    snapshot = GenerationSnapshot(
        session=node,
        transcript=await storage.get_canonical_transcript(node.session_id),
        summaries=[],
    )
    staged = await stage_reset_archive(
        snapshot, directory=storage.archive_directory(), now_ms=1, store_tag=tag
    )
    assert staged is not None
    return staged


def _staged_for(database: str, *, other_store: bool = False):  # type: ignore[no-untyped-def]
    async def stage():  # type: ignore[no-untyped-def]
        await _seed(database)
        async with SessionStorage(database) as storage:
            tag = store_tag("sqlite:/somewhere/else.db") if other_store else None
            return await _stage_for(storage, tag or storage.archive_store_tag)

    return asyncio.run(stage())


async def _recovered_at_start(database: str) -> list[str]:
    async with SessionStorage(database) as start:
        return [item.outcome for item in start.recovered_archives]


def test_an_archive_a_live_reset_still_holds_is_left_alone(
    database: str, _archive_dir: Path
) -> None:
    staged = _staged_for(database)
    try:
        assert asyncio.run(_recovered_at_start(database)) == []
        assert _hidden(_archive_dir) == [staged.temporary]
        stats = json.loads(cli(database, "stats", "--json").stdout)["reset_archives"]
        assert [item["path"] for item in stats["unpublished"]] == [str(staged.temporary)]
        assert stats["unpublished"][0]["this_store"] is True
    finally:
        staged.release()  # as when its process dies: the lock goes with it

    assert asyncio.run(_recovered_at_start(database)) == ["discarded"]
    assert _hidden(_archive_dir) == []


def test_archives_staged_for_another_database_are_reported_and_left_alone(
    database: str, _archive_dir: Path
) -> None:
    staged = _staged_for(database, other_store=True)
    staged.release()

    assert asyncio.run(_recovered_at_start(database)) == []
    result = cli(database, "stats")
    assert result.exit_code == 0, result.output
    assert "unpublished reset archive" in result.stdout
    assert staged.temporary.name in result.stdout.replace("\n", "")
    report = json.loads(cli(database, "stats", "--json").stdout)["reset_archives"]
    assert report["unpublished"][0]["this_store"] is False
    assert _hidden(_archive_dir) == [staged.temporary]


async def test_a_staged_file_its_writer_never_finished_is_discarded_once_surely_abandoned(
    database: str, _archive_dir: Path
) -> None:
    """A partly written file cannot be from a committed reset (the file is complete and
    fsynced before the COMMIT); it goes, but only once its writer is surely gone."""
    await _seed(database)
    async with SessionStorage(database) as storage:
        tag = storage.archive_store_tag
    assert tag is not None
    _archive_dir.mkdir(parents=True, exist_ok=True)
    partial = _archive_dir / f".1-agent-main-precious-x-0badc0de.json.{'0' * 32}.{tag}.tmp"
    partial.write_text('{"schema_version": 1, "session_key": "agent:ma', encoding="utf-8")

    async with SessionStorage(database):
        pass
    assert partial.exists()  # young: its writer may be about to lock it

    old = time.time() - INCOMPLETE_GRACE_SECONDS - 60
    os.utime(partial, (old, old))
    async with SessionStorage(database):
        pass
    assert not partial.exists()
    assert (await asyncio.to_thread(lambda: _published(_archive_dir))) == []


async def test_a_reset_that_publishes_normally_leaves_nothing_to_recover(
    database: str, _archive_dir: Path
) -> None:
    await _seed(database)
    async with SessionStorage(database) as storage:
        report = await SessionManager(storage).reset_with_report(KEY)
    assert report.archive_path is not None and report.archive_path.exists()
    assert not report.archive_path.name.startswith(".")
    async with SessionStorage(database) as start:
        assert start.recovered_archives == ()
    assert _hidden(_archive_dir) == []
