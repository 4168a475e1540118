"""``SessionManager(..., archive_required=True)``: a reset whose archive cannot be written
changes nothing and raises (upstream HEAD), while the default keeps the contract's
best-effort archive (the reset goes on)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import ArchiveWriteError, SessionManager, SessionStorage
from opensquilla.session.db.repos.summaries import SummaryRepository
from opensquilla.session.fs import files, reset_archive
from opensquilla.session.models import SessionContextState, SessionIntent, SessionSummary
from tests.helpers import table_snapshot

KEY = "agent:main:kept"
RESET = SessionIntent.RESET_SAME_KEY


def _files(directory: Path) -> list[str]:
    """Every name in the archive directory, hidden temporaries included."""
    return sorted(os.listdir(directory)) if directory.is_dir() else []


async def _with_history(manager: SessionManager, storage: SessionStorage) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "history worth keeping")
    await manager.append_message(KEY, "assistant", "indeed")
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="gist")
    )
    await manager.save_context_state(
        SessionContextState(
            session_id=node.session_id,
            session_key=KEY,
            state_kind="structured_summary_v1",
            payload={"goal": "keep"},
        )
    )


def _unusable_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    occupied = tmp_path / "a-regular-file"
    occupied.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(occupied))
    return tmp_path / "unused"


def _capture_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def refuse(document: object) -> bytes:
        raise ValueError("cannot encode this generation")

    monkeypatch.setattr(reset_archive, "encode_document", refuse)
    return tmp_path / "archives"


def _publish_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def refuse(source: object, target: object) -> None:
        raise PermissionError(13, "rename refused", str(target))

    monkeypatch.setattr(files.os, "replace", refuse)
    return tmp_path / "archives"


FAILURES: dict[str, Callable[[Path, pytest.MonkeyPatch], Path]] = {
    "unusable directory": _unusable_directory,
    "capture": _capture_fails,
    "publish": _publish_fails,
}


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_required_archive_failure_preserves_history(
    storage: SessionStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    manager = SessionManager(storage, inject_time_prefix=False, archive_required=True)
    await _with_history(manager, storage)
    before = await storage.get_session(KEY)
    assert before is not None
    tables = await table_snapshot(storage)
    cached = manager.get_cached_epoch(KEY)
    directory = FAILURES[failure](tmp_path, monkeypatch)

    with pytest.raises(ArchiveWriteError, match="nothing was changed") as raised:
        await manager.apply_intent(KEY, RESET)

    assert isinstance(raised.value, OSError)
    assert raised.value.__cause__ is not None
    assert KEY in str(raised.value) and before.session_id in str(raised.value)
    after = await storage.get_session(KEY)
    assert after is not None
    assert (after.session_id, after.epoch) == (before.session_id, before.epoch)
    assert manager.get_cached_epoch(KEY) == cached == before.epoch
    assert await table_snapshot(storage) == tables  # transcript, summaries, states, row
    assert [e.content for e in await manager.get_transcript(KEY)] == [
        "history worth keeping",
        "indeed",
    ]
    assert [s.summary_text for s in await manager.get_summaries(KEY)] == ["gist"]
    assert _files(directory) == []  # no temporary left behind


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_default_archive_failure_does_not_block_the_reset(
    manager: SessionManager,
    storage: SessionStorage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    """The contract's behaviour stays the default: the reset goes on without its archive."""
    await _with_history(manager, storage)
    before = await storage.get_session(KEY)
    assert before is not None
    FAILURES[failure](tmp_path, monkeypatch)

    applied, rotated = await manager.apply_intent(KEY, RESET)

    assert rotated is True
    assert applied.session_id != before.session_id
    assert applied.epoch == before.epoch + 1
    assert await storage.count_transcript_entries(before.session_id) == 0
    assert await storage.get_all_summaries(before.session_id) == []


async def test_required_archive_is_published_by_the_reset(
    storage: SessionStorage, _archive_dir: Path
) -> None:
    manager = SessionManager(storage, inject_time_prefix=False, archive_required=True)
    await _with_history(manager, storage)

    report = await manager.reset_with_report(KEY)

    assert report.archive_path is not None
    assert _files(_archive_dir) == [report.archive_path.name]
    assert await manager.get_transcript(KEY) == []


async def test_required_empty_generation_needs_no_archive_directory(
    storage: SessionStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to archive, nothing to fail: the reset of an empty generation goes on."""
    _unusable_directory(tmp_path, monkeypatch)
    manager = SessionManager(storage, inject_time_prefix=False, archive_required=True)
    node = await manager.create(KEY)

    renewed = await manager.reset(KEY)

    assert renewed.session_id != node.session_id


def _fail_after_publishing(monkeypatch: pytest.MonkeyPatch) -> None:
    publish = files.StagedFile.publish

    def publish_then_fail(self: files.StagedFile) -> Path:
        publish(self)
        raise RuntimeError("the transaction fails after the archive is published")

    monkeypatch.setattr(files.StagedFile, "publish", publish_then_fail)


def _fail_mid_delete(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(self: SummaryRepository, session_id: str, **_: Any) -> int:
        raise RuntimeError("the transaction fails between two deletes")

    monkeypatch.setattr(SummaryRepository, "delete_for_session", refuse)


@pytest.mark.parametrize("inject", [_fail_after_publishing, _fail_mid_delete])
async def test_required_reset_rolled_back_leaves_no_archive(
    storage: SessionStorage,
    _archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    inject: Callable[[pytest.MonkeyPatch], None],
) -> None:
    """The archive goes with the transaction: a reset that rolls back, even after its
    archive was renamed into place, leaves the session as it was and no file."""
    manager = SessionManager(storage, inject_time_prefix=False, archive_required=True)
    await _with_history(manager, storage)
    tables = await table_snapshot(storage)
    inject(monkeypatch)

    with pytest.raises(RuntimeError, match="the transaction fails"):
        await manager.reset(KEY)

    assert await table_snapshot(storage) == tables
    assert _files(_archive_dir) == []
