"""Our figures: each scenario of the performance issue, through the public API."""

from __future__ import annotations

import asyncio
import contextlib
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import floors
from common import (
    MESSAGE,
    Timings,
    bulk_fill,
    bulk_sessions,
    fresh_target,
    interleaved_p50,
    p50_of,
    timed,
)

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


async def reads(backend: str, size: int, *, peers: bool, repeats: int) -> dict[str, float]:
    """The live transcript read of ``size`` entries beside its driver floor (and OpenAI
    Agents' ``SQLAlchemySession.get_items`` of as many messages, with ``peers``), measured
    in interleaved rounds; per-message microseconds and the ratios, the canonical read,
    and the peak of Python allocations during one read."""
    async with fresh_target(backend) as target, contextlib.AsyncExitStack() as stack:
        storage, manager = await _store(target)
        stack.push_async_callback(storage.close)
        node = await manager.create("agent:main:read")
        await bulk_fill(storage, node.session_key, node.session_id, size)
        key = node.session_key
        contenders: dict[str, Callable[[], Awaitable[Any]]] = {
            "ours": lambda: manager.get_transcript(key),
            "floor": await stack.enter_async_context(
                floors.transcript_reader(target, node.session_id)
            ),
        }
        if peers:
            import peers as peer_stores

            peer_target = await stack.enter_async_context(fresh_target(backend))
            contenders["openai"] = await stack.enter_async_context(
                peer_stores.openai_reader(peer_target, size)
            )
        for read in contenders.values():
            await read()  # warm-up: statement caches, pools
        p50 = await interleaved_p50(contenders, repeats)
        canonical = await p50_of(lambda: manager.get_canonical_transcript(key), repeats)
        tracemalloc.start()
        await manager.get_transcript(key)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        per_message = {name: ms * 1000 / size for name, ms in p50.items()}
        out = {
            "ms": p50["ours"],
            "us_per_msg": per_message["ours"],
            "floor_us_per_msg": per_message["floor"],
            "vs_floor": per_message["ours"] / per_message["floor"],
            "canonical_ms": canonical,
            "peak_mb": peak / 2**20,
        }
        if peers:
            out["openai_us_per_msg"] = per_message["openai"]
            out["vs_openai"] = per_message["ours"] / per_message["openai"]
        return out


async def prefill(backend: str, count: int, archived: int) -> float:
    """Seconds to build a session of ``count`` entries, the first ``archived`` of them
    compacted away (the fixture large-read scenarios start from)."""
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:prefill")
            start = time.perf_counter()
            await bulk_fill(storage, node.session_key, node.session_id, count, archived=archived)
            elapsed = time.perf_counter() - start
            assert await manager.count_transcript_entries(node.session_key) == count - archived
            return elapsed
        finally:
            await storage.close()


LIVE_TAIL = 1_000  # live rows left after the fixture's compaction


async def transcript_api(backend: str, size: int, *, repeats: int) -> dict[str, float]:
    """The per-turn reads on a compacted session of ``size`` entries (all but the newest
    :data:`LIVE_TAIL` archived, with their summary): a canonical page of 100 (newest, and
    in the middle of the archive; the manager's page includes its coverage read, and
    ``page100_rows`` is the storage's page statement alone), the coverage, the recent 50,
    the context view of 8,000 tokens, an append; and, for sizes up to 100,000, the peak of
    Python allocations while ``iter_canonical_transcript`` walks everything in pages of
    500."""
    async with fresh_target(backend) as target:
        storage, manager = await _store(target)
        try:
            node = await manager.create("agent:main:api")
            key = node.session_key
            await bulk_fill(storage, key, node.session_id, size, archived=max(0, size - LIVE_TAIL))
            middle = await manager.get_canonical_transcript_page(key, limit=1)
            walk = middle.entries[0]
            # A cursor in the archive's middle, found by pages (setup, not measured).
            for _ in range(3):
                page = await manager.get_canonical_transcript_page(
                    key, limit=max(1, size // 8), before=(walk.created_at, walk.id or 0)
                )
                walk = page.entries[0]
            cursor = (walk.created_at, walk.id or 0)
            contenders: dict[str, Callable[[], Awaitable[Any]]] = {
                "page100_newest": lambda: manager.get_canonical_transcript_page(key, limit=100),
                "page100_archive": lambda: manager.get_canonical_transcript_page(
                    key, limit=100, before=cursor
                ),
                "page100_rows": lambda: storage.get_canonical_transcript_page(
                    node.session_id, limit=100, before=cursor
                ),
                "coverage": lambda: storage.get_canonical_transcript_coverage(node.session_id),
                "recent50": lambda: manager.get_recent_transcript(key, 50),
                "context_view": lambda: manager.get_context_view(key, max_tokens=8_000),
            }
            for read in contenders.values():
                await read()
            out = {
                f"{name}_p50_ms": ms
                for name, ms in (await interleaved_p50(contenders, repeats)).items()
            }
            view = await manager.get_context_view(key, max_tokens=8_000)
            out["context_view_messages"] = float(len(view.messages))
            appends = await timed(
                lambda: manager.append_message(key, "user", MESSAGE, token_count=20), 200
            )
            out["append_p50_ms"] = appends.p50
            if size <= 100_000:
                tracemalloc.start()
                count = 0
                async for _ in manager.iter_canonical_transcript(key, page_size=500):
                    count += 1
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                assert count == size + 200
                out["iter_peak_mb"] = peak / 2**20
            return out
        finally:
            await storage.close()


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
            return await p50_of(
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
            return await p50_of(lambda: storage.list_sessions(limit=50, offset=100), 5)
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
            pruned = await prune_stale(storage.uow, 1_700_000_000_000 + sessions)
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
