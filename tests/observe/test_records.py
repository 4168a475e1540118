"""The debug record of every operation: key, duration, rows; never content."""

from __future__ import annotations

import logging

import pytest

from opensquilla.session import SessionManager, SessionNotFoundError
from opensquilla.session.observe import OPERATIONS_LOGGER, operations

from .scenario import KEY, SECRET, converse


def records(caplog: pytest.LogCaptureFixture, operation: str) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == OPERATIONS_LOGGER and record.__dict__["operation"] == operation
    ]


def everything_said(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{record.getMessage()} {record.__dict__!r}" for record in caplog.records)


async def test_each_operation_is_one_debug_record_with_key_duration_and_rows(
    manager: SessionManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=OPERATIONS_LOGGER)
    await converse(manager)

    appends = records(caplog, "append_message")
    assert len(appends) == 8
    for record in appends:
        assert record.levelno == logging.DEBUG
        assert record.__dict__["session_key"] == KEY
        assert record.__dict__["rows"] == 1
        assert record.__dict__["duration_ms"] >= 0
        assert record.__dict__["error_type"] is None
        assert f"operation=append_message key={KEY} duration_ms=" in record.getMessage()
    [read] = records(caplog, "get_transcript")
    assert (read.__dict__["session_key"], read.__dict__["rows"]) == (KEY, 8)
    [compaction] = records(caplog, "compact_with_result")
    assert compaction.__dict__["session_key"] == KEY
    assert compaction.__dict__["rows"] > 0  # the rows it removed
    # One operation per call: the manager's append runs its use case itself (issue 27's one
    # route), so no storage operation is nested in it; a storage call is an operation of
    # its own, named as such.
    assert not [r for r in caplog.records if r.__dict__.get("operation", "").startswith("storage.")]
    session = await manager.get_session(KEY)
    assert session is not None
    live = await manager.storage.get_transcript(session.session_id)
    [direct] = records(caplog, "storage.get_transcript")
    assert direct.__dict__["rows"] == len(live) > 0
    assert SECRET not in everything_said(caplog)


async def test_a_failed_operation_records_the_error_type_only(
    manager: SessionManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=OPERATIONS_LOGGER)
    with pytest.raises(SessionNotFoundError):
        await manager.append_message("agent:main:missing", "user", SECRET)
    [record] = records(caplog, "append_message")
    assert record.__dict__["error_type"] == "SessionNotFoundError"
    assert record.__dict__["rows"] is None
    assert record.__dict__["session_key"] == "agent:main:missing"
    assert SECRET not in everything_said(caplog)


async def test_nothing_is_recorded_above_debug(
    manager: SessionManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=OPERATIONS_LOGGER)
    await converse(manager)
    assert not [record for record in caplog.records if record.name == OPERATIONS_LOGGER]


async def test_without_opentelemetry_the_records_are_the_same(
    manager: SessionManager, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "TELEMETRY", None)  # as when the package is missing
    caplog.set_level(logging.DEBUG, logger=OPERATIONS_LOGGER)
    await converse(manager)
    assert len(records(caplog, "append_message")) == 8
    [read] = records(caplog, "get_transcript")
    assert read.__dict__["rows"] == 8
    assert SECRET not in everything_said(caplog)

    caplog.clear()
    caplog.set_level(logging.INFO, logger=OPERATIONS_LOGGER)
    assert len(await manager.get_transcript(KEY)) > 0
    assert not caplog.records
