"""Where reset archives go (issue 15, item 4): a storage setting for the directory, archive
files that name their store so that ``stats`` counts only its own, and the opt-in
``archive_store="database"``, which keeps each archive as a row written in the reset's own
transaction (revision 0006)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import ArchiveWriteError, SessionManager, SessionStorage
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.errors import ConfigurationError, InvalidInputError
from opensquilla.session.models import SessionSummary
from tests.cli.support import cli
from tests.conftest import Backend
from tests.helpers import table_snapshot

KEY = "agent:main:archived"
NUL_TEXT = "before\x00after \\0 and the marker \ufdd0"


def _json_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


async def _history(manager: SessionManager, key: str = KEY, text: str = "worth keeping") -> str:
    node = await manager.create(key)
    await manager.append_message(key, "user", text)
    await manager.storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=key, summary_text="the gist")
    )
    return node.session_id


async def _archive_rows(storage: SessionStorage) -> list[tuple[Any, ...]]:
    async with storage.engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT * FROM session_archives ORDER BY id"))
        return [tuple(row) for row in rows]


@pytest.fixture
async def other_database(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    target, cleanup = await backend.fresh_migrated(tmp_path)
    try:
        yield target
    finally:
        await cleanup()


# -- the location --------------------------------------------------------------------------


async def test_archive_dir_setting_wins_over_the_environment_and_the_default(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _archive_dir: Path
) -> None:
    setting = tmp_path / "from-the-setting"
    async with SessionStorage(database, archive_dir=setting) as storage:
        assert storage.archive_directory() == setting
        manager = SessionManager(storage, inject_time_prefix=False)
        await _history(manager)
        report = await manager.reset_with_report(KEY)
    assert report.archive_path is not None and report.archive_path.parent == setting
    assert _json_files(_archive_dir) == []

    # Unset: the environment variable, read at each call; then the home's directory.
    async with SessionStorage(database) as storage:
        assert storage.archive_directory() == _archive_dir
        monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(tmp_path / "later"))
        assert storage.archive_directory() == tmp_path / "later"
        monkeypatch.delenv("OPENSQUILLA_SESSION_ARCHIVE_DIR")
        assert storage.archive_directory() == tmp_path / "home" / "session-archive"


async def test_archive_dir_expands_the_home_directory(
    database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    storage = SessionStorage(database, archive_dir="~/archives")
    assert storage.archive_directory() == tmp_path / "user" / "archives"


@pytest.mark.parametrize(
    "options",
    [
        {"archive_dir": ""},
        {"archive_dir": "   "},
        {"archive_dir": 42},
        {"archive_store": "cloud"},
        {"archive_store": True},
    ],
)
def test_bad_archive_settings_are_refused_before_anything_opens(
    options: dict[str, Any],
) -> None:
    name = next(iter(options))
    with pytest.raises(ConfigurationError, match=name):
        SessionStorage(":memory:", **options)


def test_archive_store_comes_from_the_environment_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert SessionStorage(":memory:").archive_store == "files"
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_STORE", " Database ")
    assert SessionStorage(":memory:").archive_store == "database"
    assert SessionStorage(":memory:", archive_store="files").archive_store == "files"
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_STORE", "s3")
    with pytest.raises(ConfigurationError, match="OPENSQUILLA_SESSION_ARCHIVE_STORE"):
        SessionStorage(":memory:")


# -- stats counts only its own store's files --------------------------------------------------


async def test_stats_counts_only_the_archives_of_its_own_store(
    database: str, other_database: str, _archive_dir: Path
) -> None:
    """Two stores, one directory: each counts its own files, and sees the rest as others'."""
    async with SessionStorage(database) as mine, SessionStorage(other_database) as theirs:
        assert mine.archive_store_tag != theirs.archive_store_tag
        for storage, resets in ((mine, 1), (theirs, 2)):
            manager = SessionManager(storage, inject_time_prefix=False)
            await manager.create(KEY)
            for n in range(resets):
                await manager.append_message(KEY, "user", f"generation {n}")
                await manager.reset(KEY)
        # A file of an older release, whose name says nothing of its store.
        untagged = _archive_dir / f"1-agent-main-x-sid-{'0' * 32}.json"
        untagged.write_text("{}", encoding="utf-8")

        mine_stats = await SessionManager(mine).stats()
        theirs_stats = await SessionManager(theirs).stats()
        tag = mine.archive_store_tag

    files = _json_files(_archive_dir)
    assert len(files) == 4
    mine_files = [p for p in files if p.name.endswith(f".{tag}.json")]
    assert len(mine_files) == 1
    assert (mine_stats.reset_archive_files, mine_stats.other_reset_archive_files) == (1, 3)
    assert mine_stats.reset_archive_bytes == sum(p.stat().st_size for p in mine_files)
    assert (theirs_stats.reset_archive_files, theirs_stats.other_reset_archive_files) == (2, 2)
    assert mine_stats.reset_archive_rows == theirs_stats.reset_archive_rows == 0


async def test_write_session_archive_names_its_store_too(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    await _history(manager)
    node = await manager.get_session(KEY)
    assert node is not None
    await manager.write_session_archive(node, *await manager.capture_session_archive(node))

    (written,) = _json_files(_archive_dir)
    assert written.name.endswith(f".{storage.archive_store_tag}.json")
    assert (await manager.stats()).reset_archive_files == 1


def test_the_store_tag_holds_no_credentials() -> None:
    with_password = SessionStorage("postgresql://ana:s3cret@db.example:5432/sessions")
    other_user = SessionStorage("postgresql://bob:other@db.example:5432/sessions")
    elsewhere = SessionStorage("postgresql://ana:s3cret@db.example:5432/other")
    assert with_password.archive_store_tag == other_user.archive_store_tag
    assert with_password.archive_store_tag != elsewhere.archive_store_tag
    memory_one, memory_two = SessionStorage(":memory:"), SessionStorage(":memory:")
    assert memory_one.archive_store_tag != memory_two.archive_store_tag


# -- archive_store="database" ----------------------------------------------------------------


async def test_database_mode_keeps_the_archive_as_a_row(database: str, _archive_dir: Path) -> None:
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        old_id = await _history(manager, text=NUL_TEXT)

        report = await manager.reset_with_report(KEY)

        assert report.archive_path is None and report.archive_id is not None
        assert _json_files(_archive_dir) == [] and not _archive_dir.exists()
        (listed,) = await manager.list_session_archives(KEY)
        assert listed.id == report.archive_id
        assert (listed.session_key, listed.session_id) == (KEY, old_id)
        assert (listed.epoch, listed.reason) == (report.session.epoch, "reset_same_key")
        document = await manager.read_session_archive(listed.id)
        assert document is not None
        assert document["session_id"] == old_id and document["session"]["epoch"] == 1
        assert [e["content"] for e in document["transcript_entries"]] == [NUL_TEXT]
        assert [s["summary_text"] for s in document["summaries"]] == ["the gist"]
        text = (await _archive_rows(storage))[0][-1]
        assert listed.size_bytes == len(text.encode("utf-8"))
        assert json.loads(text) == document

        stats = await manager.stats()
        assert (stats.reset_archive_store, stats.reset_archive_rows) == ("database", 1)
        assert stats.reset_archive_row_bytes == listed.size_bytes
        assert stats.reset_archive_files == 0

        # An empty generation needs no archive; the other calls read nothing else.
        assert (await manager.reset_with_report(KEY)).archive_id is None
        assert await manager.list_session_archives("agent:main:none") == []
        assert await manager.read_session_archive(listed.id + 1) is None


async def test_database_archives_outlive_the_sessions_they_archive(database: str) -> None:
    """They are the archive: delete, prune and cap leave them alone."""
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        keys = [f"agent:main:s{n}" for n in range(3)]
        for key in keys:
            await _history(manager, key)
            await manager.reset(key)
        before = await manager.list_session_archives()
        assert [a.session_key for a in before] == keys

        assert await manager.delete(keys[0])
        await manager.cap_entries(1)
        await manager.prune_stale(1)

        assert await manager.count_sessions() == 0
        assert await manager.list_session_archives() == before
        assert len(await manager.list_session_archives(limit=2)) == 2


async def test_write_session_archive_in_database_mode_writes_a_row(
    database: str, _archive_dir: Path
) -> None:
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _history(manager)
        node = await manager.get_session(KEY)
        assert node is not None
        await manager.write_session_archive(node, [], [])  # nothing to keep
        await manager.write_session_archive(node, *await manager.capture_session_archive(node))

        (listed,) = await manager.list_session_archives(KEY)
        document = await manager.read_session_archive(listed.id)
        assert document is not None and document["session_id"] == node.session_id
        assert listed.epoch == node.epoch
    assert _json_files(_archive_dir) == []


class InjectedCrash(Exception):
    """Raised by the test inside the reset's transaction."""


@pytest.mark.parametrize("required", [False, True])
async def test_database_archive_and_reset_commit_together_or_not_at_all(
    database: str, monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    """A crash at the reset's first delete, after its archive row was inserted, leaves
    neither the row nor the reset."""
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False, archive_required=required)
        old_id = await _history(manager)
        tables, cached = await table_snapshot(storage), manager.get_cached_epoch(KEY)

        async def crash(self: object, session_id: str, *, session_key: str) -> None:
            assert len(await _rows_in(self)) == 1  # the row is in this transaction
            raise InjectedCrash("crash at the delete")

        monkeypatch.setattr(TranscriptRepository, "delete_all", crash)
        with pytest.raises(InjectedCrash):
            await manager.reset(KEY)
        monkeypatch.undo()

        assert await table_snapshot(storage) == tables
        assert await _archive_rows(storage) == []
        assert manager.get_cached_epoch(KEY) == cached
        renewed = await manager.reset_with_report(KEY)
        assert renewed.previous_session_id == old_id and renewed.archive_id is not None
        assert len(await _archive_rows(storage)) == 1


async def _rows_in(repository: object) -> list[Any]:
    conn = repository.conn  # type: ignore[attr-defined]
    query = sa.text("SELECT id FROM session_archives WHERE session_key = :key")
    return list(await conn.execute(query, {"key": KEY}))


@pytest.mark.parametrize("required", [False, True])
async def test_database_archive_that_cannot_be_encoded(
    database: str, monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    """``archive_required`` holds in database mode: the reset is refused and nothing
    changes; by default the reset goes on without its archive (the contract)."""
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False, archive_required=required)
        old_id = await _history(manager)
        tables = await table_snapshot(storage)

        def refuse(document: object) -> str:
            raise ValueError("cannot encode this generation")

        monkeypatch.setattr("opensquilla.session.usecases.session_archive.document_text", refuse)
        if required:
            with pytest.raises(ArchiveWriteError, match="nothing was changed"):
                await manager.reset(KEY)
            assert await table_snapshot(storage) == tables
        else:
            report = await manager.reset_with_report(KEY)
            assert report.archive_id is None and report.previous_session_id == old_id
            assert await storage.count_transcript_entries(old_id) == 0
        assert await _archive_rows(storage) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.list_session_archives(limit=0),
        lambda s: s.list_session_archives(limit=True),
        lambda s: s.list_session_archives("agent:main:x\x00"),
        lambda s: s.read_session_archive(0),
        lambda s: s.read_session_archive("1"),
        lambda s: s.read_session_archive(2**63),
    ],
)
async def test_archive_reads_refuse_bad_arguments(storage: SessionStorage, call: Any) -> None:
    with pytest.raises(InvalidInputError):
        await call(storage)


def test_the_cli_follows_the_environment_to_the_database_archive(
    database: str, monkeypatch: pytest.MonkeyPatch, _archive_dir: Path
) -> None:
    """``$OPENSQUILLA_SESSION_ARCHIVE_STORE`` reaches the command line: ``reset`` names the
    row it wrote and ``stats`` counts it."""

    async def seed() -> None:
        async with SessionStorage(database) as storage:
            await _history(SessionManager(storage, inject_time_prefix=False))

    asyncio.run(seed())
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_STORE", "database")

    reset = cli(database, "reset", KEY)
    assert reset.exit_code == 0, reset.output
    assert "archive: row 1 of session_archives" in reset.stdout
    stats = json.loads(cli(database, "stats", "--json").stdout)["reset_archives"]
    assert (stats["store"], stats["files"], stats["other_files"]) == ("database", 0, 0)
    assert stats["database"]["archives"] == 1 and stats["database"]["bytes"] > 0
    assert "1 in the database" in cli(database, "stats").stdout
    assert _json_files(_archive_dir) == []
