"""Fixtures of the reliability suite: a warm pool of spawned worker processes, and a
manager process for the barriers and events through which those workers synchronise.

Starting a Python interpreter and importing SQLAlchemy, asyncpg and the package takes a few
seconds per process on a small machine; the pool pays that once per run. Every task still
runs in a separate OS process with its own storage, engine and connection pool.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any

import pytest

from . import workers
from .scenarios import Templates
from .support import HANG_GUARD

POOL_SIZE = 5


@pytest.fixture(scope="session")
def sync_manager() -> Iterator[SyncManager]:
    """``sync_manager.Barrier(n)`` and ``sync_manager.Event()`` give proxies that a test
    passes to its workers (they pickle, and reconnect in the worker)."""
    manager = multiprocessing.get_context("spawn").Manager()
    try:
        yield manager
    finally:
        manager.shutdown()


@pytest.fixture(scope="session")
def spawn_pool(sync_manager: SyncManager) -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=POOL_SIZE, mp_context=context)
    # One warm-up per worker, each waiting at one barrier until all have started: no worker
    # can finish its warm-up and take another, so the pool starts all of them now.
    started = sync_manager.Barrier(POOL_SIZE)
    warmups = [pool.submit(workers.warm, started) for _ in range(POOL_SIZE)]
    pids = {future.result(timeout=HANG_GUARD + 60) for future in warmups}
    assert len(pids) == POOL_SIZE, f"the pool started {len(pids)} processes, not {POOL_SIZE}"
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
async def templates(
    backend: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Templates]:
    """Populated databases to clone, dropped after the test."""
    durable = request.node.get_closest_marker("durable") is not None
    templates = Templates(backend, tmp_path, durable=durable)
    try:
        yield templates
    finally:
        await templates.close()
