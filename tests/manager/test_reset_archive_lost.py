"""A best-effort reset that loses the history says so loudly (issue 31, item 9).

By default (the contract) a reset whose archive cannot be written goes on, and the old
generation's history is gone. It used to be one WARNING; now it is an ERROR naming the key
and the reason, a count in ``stats()`` (``reset_archives_lost``) and ``archive_error`` in
the reset report, so a gateway can alert. A full archive disk is the case in the field.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.fs import reset_archive

KEY = "agent:main:lost-history"


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reset_archive, "stage_file", full)


async def _history(manager: SessionManager) -> str:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "the only copy of this")
    return node.session_id


async def test_a_reset_on_a_full_archive_disk_reports_the_lost_history(
    manager: SessionManager,
    storage: SessionStorage,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old_id = await _history(manager)
    assert (await manager.stats()).reset_archives_lost == 0
    _disk_full(monkeypatch)

    with caplog.at_level(logging.WARNING, logger="opensquilla.session"):
        report = await manager.reset_with_report(KEY)

    assert report.previous_session_id == old_id and report.session.session_id != old_id
    assert report.archive_path is None and report.archive_id is None
    assert report.archive_error is not None
    assert "No space left on device" in report.archive_error, report.archive_error
    assert await storage.count_transcript_entries(old_id) == 0  # the reset went on
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [(r.levelname, r.getMessage()) for r in caplog.records]
    message = errors[0].getMessage()
    assert KEY in message and old_id in message and "No space left on device" in message
    assert "history is lost" in message
    assert (await manager.stats()).reset_archives_lost == 1

    monkeypatch.undo()  # space again: a reset that archives is not counted
    await manager.append_message(KEY, "user", "kept this time")
    kept = await manager.reset_with_report(KEY)
    assert kept.archive_error is None and kept.archive_path is not None
    assert (await manager.stats()).reset_archives_lost == 1


async def test_a_reset_with_nothing_to_archive_loses_nothing(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    _disk_full(monkeypatch)
    report = await manager.reset_with_report(KEY)
    assert report.archive_error is None
    assert (await manager.stats()).reset_archives_lost == 0


async def test_a_database_archive_that_cannot_be_encoded_is_reported_too(
    database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _history(manager)

        def refuse(document: object) -> str:
            raise ValueError("cannot encode this generation")

        monkeypatch.setattr("opensquilla.session.usecases.session_archive.document_text", refuse)
        with caplog.at_level(logging.ERROR, logger="opensquilla.session"):
            report = await manager.reset_with_report(KEY)
        assert report.archive_error == "ValueError: cannot encode this generation"
        assert any(KEY in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
        assert (await manager.stats()).reset_archives_lost == 1


def test_the_cli_reset_says_the_history_is_lost(
    database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.cli.support import cli, opened, run

    async def seed() -> None:
        async with opened(database) as manager:
            await _history(manager)

    run(seed())
    _disk_full(monkeypatch)
    result = cli(database, "reset", KEY)
    assert result.exit_code == 0, result.output
    assert "archive: NOT WRITTEN" in result.stdout and "history is lost" in result.stdout
    assert "No space left on device" in result.stdout
