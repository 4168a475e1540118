"""Helpers for the tests of the append's two paths (``db/direct_statement.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionStorage
from opensquilla.session.db import uow as uow_module
from opensquilla.session.db import uow_writes
from opensquilla.session.models import TranscriptEntry

KEY = "agent:main:direct"
HANG_GUARD = 60.0


@contextlib.contextmanager
def paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The path each append took: "direct" or "connection"."""
    taken: list[str] = []
    direct, connection = uow_writes.first_row, uow_module._run_on_connection

    def on_dbapi(*args: Any, **kwargs: Any) -> Any:
        taken.append("direct")
        return direct(*args, **kwargs)

    def on_connection(*args: Any, **kwargs: Any) -> Any:
        taken.append("connection")
        return connection(*args, **kwargs)

    monkeypatch.setattr(uow_writes, "first_row", on_dbapi)
    monkeypatch.setattr(uow_module, "_run_on_connection", on_connection)
    yield taken


@contextlib.contextmanager
def forced_connection_path() -> Iterator[None]:
    """The Connection path, as if a listener watched the statements."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uow_writes, "statements_watched", lambda engine: True)
        yield


def force_path(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """The direct path as it is (``fast``), or the Connection path forced."""
    if not fast:
        monkeypatch.setattr(uow_writes, "statements_watched", lambda engine: True)


@contextlib.contextmanager
def listening(storage: SessionStorage, name: str, fn: Any) -> Iterator[None]:
    event.listen(storage.engine.sync_engine, name, fn)
    try:
        yield
    finally:
        event.remove(storage.engine.sync_engine, name, fn)


def entry(node: Any, content: str, *, session_id: str | None = None) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=session_id or node.session_id,
        session_key=KEY,
        role="user",
        content=content,
        created_at=node.created_at + 1,
    )


def async_url(database: str) -> str:
    if database.startswith("postgresql://"):
        return database.replace("postgresql://", "postgresql+asyncpg://", 1)
    if "://" in database:
        return database
    return f"sqlite+aiosqlite:///{database}"
