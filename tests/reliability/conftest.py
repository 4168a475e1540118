"""Fixtures of the reliability suite: a warm pool of spawned worker processes.

Starting a Python interpreter and importing SQLAlchemy, asyncpg and the package takes a few
seconds per process on a small machine; the pool pays that once per run. Every task still
runs in a separate OS process with its own storage, engine and connection pool.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from . import workers
from .scenarios import Templates

POOL_SIZE = 5


@pytest.fixture(scope="session")
def spawn_pool() -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=POOL_SIZE, mp_context=context)
    # One busy task per worker forces the pool to start all of them now.
    warmups = [pool.submit(workers.warm, 1.5) for _ in range(POOL_SIZE)]
    pids = {future.result(timeout=120) for future in warmups}
    assert len(pids) == POOL_SIZE, f"the pool started {len(pids)} processes, not {POOL_SIZE}"
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
async def templates(backend: Any, tmp_path: Path) -> AsyncIterator[Templates]:
    """Populated databases to clone, dropped after the test."""
    templates = Templates(backend, tmp_path)
    try:
        yield templates
    finally:
        await templates.close()
