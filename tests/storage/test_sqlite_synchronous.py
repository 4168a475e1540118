"""``sqlite_synchronous``: the argument, else ``$OPENSQUILLA_SQLITE_SYNCHRONOUS``, else FULL;
what the store's connections then run with."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from opensquilla.session import SessionStorage
from opensquilla.session.errors import ConfigurationError

ENV = "OPENSQUILLA_SQLITE_SYNCHRONOUS"
LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


async def _level(path: Path, **options: object) -> str:
    storage = SessionStorage(path, **options)  # type: ignore[arg-type]
    await storage.connect()
    try:
        async with storage.engine.connect() as conn:
            value = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar_one()
    finally:
        await storage.close()
    return LEVELS[int(value)]


async def test_full_unless_told_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert await _level(tmp_path / "a.db") == "FULL"


@pytest.mark.parametrize("value", ["normal", " OFF ", "Extra"])
async def test_the_environment_sets_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV, value)
    assert await _level(tmp_path / "a.db") == value.strip().upper()


async def test_the_argument_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "OFF")
    assert await _level(tmp_path / "a.db", sqlite_synchronous="FULL") == "FULL"


async def test_a_bad_environment_value_is_refused_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "sometimes")
    with pytest.raises(ConfigurationError, match=r"\$OPENSQUILLA_SQLITE_SYNCHRONOUS .*'sometimes'"):
        SessionStorage(tmp_path / "a.db")
    assert not (tmp_path / "a.db").exists()


@pytest.mark.durable
async def test_a_durable_test_gets_the_stores_default(tmp_path: Path) -> None:
    """The test suite's own switch: ``durable`` tests run with what users get."""
    assert await _level(tmp_path / "a.db") == "FULL"


async def test_other_tests_run_without_fsync(tmp_path: Path) -> None:
    assert await _level(tmp_path / "a.db") == "OFF"


async def test_the_pragma_reaches_an_application_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "NORMAL")
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.db'}")
    try:
        storage = SessionStorage(engine)
        await storage.connect()
        async with engine.connect() as conn:
            value = (await conn.execute(sa.text("PRAGMA synchronous"))).scalar_one()
        await storage.close()
    finally:
        await engine.dispose()
    assert LEVELS[int(value)] == "NORMAL"
