"""Our figures: each scenario of the performance issue, through the public API."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

from common import MESSAGE, Timings, bulk_fill, bulk_sessions, fresh_target, median_ms, timed

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.usecases.retention import prune_stale


async def _store(target: str, **options: Any) -> tuple[SessionStorage, SessionManager]:
    storage = SessionStorage(target, **options)
    await storage.connect()
    return storage, SessionManager(storage, inject_time_prefix=False)


async def create(backend: str, n: int) -> Timings:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        counter = iter(range(10**9))
        try:
            return await timed(lambda: manager.create(f"agent:main:c{next(counter)}"), n)
        finally:
            await storage.close()


async def append(backend: str, prefill: int, n: int) -> Timings:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:append")
            await bulk_fill(storage, node.session_key, node.session_id, prefill)
            roles = iter(["user", "assistant"] * n)

            async def one() -> None:
                await manager.append_message(node.session_key, next(roles), MESSAGE, token_count=50)

            await timed(one, min(50, n))  # warm-up: statement caches, pool
            return await timed(one, n)
        finally:
            await storage.close()


async def reads(backend: str, size: int) -> dict[str, float]:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:read")
            await bulk_fill(storage, node.session_key, node.session_id, size)
            await manager.get_transcript(node.session_key)
            live = await median_ms(lambda: manager.get_transcript(node.session_key), 5)
            canonical = await median_ms(
                lambda: manager.get_canonical_transcript(node.session_key), 5
            )
            tracemalloc.start()
            await manager.get_transcript(node.session_key)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            return {
                "live_ms": live,
                "canonical_ms": canonical,
                "peak_mb": peak / 2**20,
                "session_id": node.session_id,
                "target": target,
            }  # type: ignore[dict-item]
        finally:
            await storage.close()


async def read_floor_fixture(backend: str, size: int, floor: Any) -> float:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:floor")
            await bulk_fill(storage, node.session_key, node.session_id, size)
        finally:
            await storage.close()
        return await floor(target, node.session_id)


async def compaction(backend: str, size: int) -> dict[str, float]:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:compact")
            await bulk_fill(storage, node.session_key, node.session_id, size)
            window = size * 50 // 2  # half the transcript is over budget
            start = time.perf_counter_ns()
            result = await manager.compact_with_result(
                node.session_key, window, CompactionConfig(safety_margin=1.0)
            )
            elapsed = (time.perf_counter_ns() - start) / 1e6
            assert result.removed_count > 0, result.skip_reason
            return {"ms": elapsed, "removed": result.removed_count}
        finally:
            await storage.close()


async def fork(backend: str, size: int) -> float:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:fork")
            await bulk_fill(storage, node.session_key, node.session_id, size)
            counter = iter(range(100))
            return await median_ms(
                lambda: manager.branch(
                    node.session_key, f"agent:main:child{next(counter)}", fork_transcript=True
                ),
                3,
            )
        finally:
            await storage.close()


async def listing(backend: str, sessions: int) -> float:
    async with fresh_target(backend) as target:
        storage, _ = await _store(target)
        try:
            await bulk_sessions(storage, sessions)
            await storage.list_sessions(limit=50)
            return await median_ms(lambda: storage.list_sessions(limit=50, offset=100), 5)
        finally:
            await storage.close()


async def retention(backend: str, sessions: int) -> dict[str, float]:
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            await bulk_sessions(storage, sessions)
            start = time.perf_counter_ns()
            capped = await manager.cap_entries(sessions // 2)
            cap_ms = (time.perf_counter_ns() - start) / 1e6
            start = time.perf_counter_ns()
            pruned = await prune_stale(storage, 1_700_000_000_000 + sessions)
            prune_ms = (time.perf_counter_ns() - start) / 1e6
            return {"cap_ms": cap_ms, "capped": capped, "prune_ms": prune_ms, "pruned": pruned}
        finally:
            await storage.close()


async def writers(backend: str, count: int, per_writer: int) -> float:
    """Messages per second with ``count`` concurrent writers, each on its own session."""
    async with fresh_target(backend) as target:
        storage, manager = await _store(target, pool_size=max(count, 5))
        try:
            keys = [f"agent:main:w{i}" for i in range(count)]
            for key in keys:
                await manager.create(key)

            async def writer(key: str) -> None:
                for _ in range(per_writer):
                    await manager.append_message(key, "user", MESSAGE, token_count=50)

            await asyncio.gather(*(writer(k) for k in keys))  # warm-up
            start = time.perf_counter_ns()
            await asyncio.gather(*(writer(k) for k in keys))
            elapsed = (time.perf_counter_ns() - start) / 1e9
            return count * per_writer / elapsed
        finally:
            await storage.close()
