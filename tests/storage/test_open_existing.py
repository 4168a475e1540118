"""Opening an existing database only (``SessionStorage(..., create=False)``) and the
no-argument default (``SessionStorage()`` is ``":memory:"``)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from opensquilla.session import SessionStorage
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.engine import create_engine, dispose_engine
from opensquilla.session.errors import ConfigurationError, DatabaseNotFoundError
from tests.conftest import Backend

from . import new_session

KEY = "agent:main:main"
# Characters a SQLite URI gives a meaning to: the path must be quoted, not parsed.
ODD_NAME = "odd ?mode=ro#x%41 name.db"


def _tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def _missing_target(backend: Backend, tmp_path: Path) -> str:
    if backend.is_postgres:
        return backend.target_for("osq_missing_" + uuid.uuid4().hex[:16])
    return str(tmp_path / "no" / "such" / "dir" / ODD_NAME)


async def test_no_target_is_an_in_memory_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    storage = SessionStorage()
    assert storage.target.memory
    async with storage:
        await new_session(storage, KEY)
        assert await storage.get_session(KEY) is not None
    async with SessionStorage() as fresh:  # nothing was kept anywhere
        assert await fresh.get_session(KEY) is None
    assert _tree(tmp_path) == before


async def test_create_false_refuses_a_missing_database_and_creates_nothing(
    backend: Backend, tmp_path: Path
) -> None:
    target = _missing_target(backend, tmp_path)
    before = _tree(tmp_path)
    storage = SessionStorage(target, create=False)
    with pytest.raises(DatabaseNotFoundError, match="nothing was created") as raised:
        await storage.connect()
    assert not storage.is_connected
    named = target.rsplit("/", 1)[-1]
    assert named in str(raised.value)
    assert _tree(tmp_path) == before
    if not backend.is_postgres:
        with pytest.raises(DatabaseNotFoundError):
            await SessionStorage(target, create=False).connect_without_migrating()
        assert _tree(tmp_path) == before


async def test_create_false_opens_an_existing_database(database: str) -> None:
    async with SessionStorage(database) as writer:
        await new_session(writer, KEY)
    async with SessionStorage(database, create=False) as reader:
        assert await reader.get_session(KEY) is not None


async def test_create_false_opens_a_file_whose_name_looks_like_a_uri(tmp_path: Path) -> None:
    path = tmp_path / ODD_NAME
    async with SessionStorage(path) as writer:
        await new_session(writer, KEY)
    async with SessionStorage(path, create=False) as reader:
        assert await reader.get_session(KEY) is not None
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [
        ODD_NAME
    ]


async def test_an_engine_opened_without_create_never_creates_the_file(tmp_path: Path) -> None:
    """The existence check and the open are two steps: a file removed between them must
    still not be created (SQLite's ``mode=rw``)."""
    path = tmp_path / ODD_NAME
    engine = create_engine(parse_target(path), create=False)
    running = set(threading.enumerate())
    try:
        with pytest.raises(OperationalError, match="unable to open database file"):
            async with engine.connect():
                pass
    finally:
        await dispose_engine(engine)
        # aiosqlite stops the failed connection's thread without waiting: wait for it
        # here, while this test's event loop can still take its last message.
        for thread in set(threading.enumerate()) - running:
            if "_connection_worker_thread" in thread.name:
                await asyncio.to_thread(thread.join)
    assert list(tmp_path.iterdir()) == []


def test_create_must_be_a_boolean() -> None:
    with pytest.raises(ConfigurationError, match="create must be True or False"):
        SessionStorage(":memory:", create="no")  # type: ignore[arg-type]
