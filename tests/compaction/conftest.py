"""Fixtures shared by the compaction tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from opensquilla.session import SessionManager, SessionStorage


@pytest.fixture
async def managers(database: str) -> AsyncIterator[list[SessionManager]]:
    """Three managers, each over its own storage (its own engine and pool) on one database:
    what separate worker processes look like to the store."""
    stores = [SessionStorage(database) for _ in range(3)]
    for store in stores:
        await store.connect()
    try:
        yield [SessionManager(store, inject_time_prefix=False) for store in stores]
    finally:
        for store in stores:
            await store.close()
