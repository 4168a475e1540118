"""Entering WAL mode when several connections open one new file at once.

SQLite refuses a journal-mode switch that meets another connection's lock with "database is
locked" at once (its busy handler is not consulted), so workers creating one file together
used to fail their first ``connect()``. The switch is retried until the busy timeout.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session.db import engine as engine_module


class FlakyCursor:
    """Reports the rollback journal, then refuses the switch ``failures`` times."""

    def __init__(self, failures: int, mode: str = "delete") -> None:
        self.failures = failures
        self.mode = mode
        self.switches = 0

    def execute(self, sql: str) -> None:
        if sql == "PRAGMA journal_mode = WAL":
            self.switches += 1
            if self.switches <= self.failures:
                raise sqlite3.OperationalError("database is locked")
            self.mode = "wal"

    def fetchone(self) -> tuple[Any, ...]:
        return (self.mode,)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [(self.mode,)]


def test_a_locked_switch_is_retried_until_it_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module.time, "sleep", lambda _seconds: None)
    cursor = FlakyCursor(failures=3)
    engine_module._enter_wal(cursor)
    assert (cursor.mode, cursor.switches) == ("wal", 4)


def test_a_file_already_in_wal_mode_is_not_switched_again() -> None:
    cursor = FlakyCursor(failures=99, mode="wal")
    engine_module._enter_wal(cursor)
    assert cursor.switches == 0


def test_a_lock_that_outlasts_the_busy_timeout_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(range(0, 10_000))
    monkeypatch.setattr(engine_module.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(engine_module.time, "sleep", lambda _seconds: None)
    monkeypatch.setattr(engine_module, "BUSY_TIMEOUT_MS", 5_000)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        engine_module._enter_wal(FlakyCursor(failures=10_000))


def test_other_errors_are_not_retried() -> None:
    class Broken(FlakyCursor):
        def execute(self, sql: str) -> None:
            if sql == "PRAGMA journal_mode = WAL":
                raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk"):
        engine_module._enter_wal(Broken(failures=0))


def test_a_real_file_ends_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        engine_module._enter_wal(db.cursor())
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        db.close()
