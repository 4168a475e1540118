"""Where one SQLite append's CPU goes: the event loop's thread against the driver's.

    python bench/append_profile.py [--backend sqlite|postgres] [-n 2000] [--batch 10]
                                   [--profile] [--top 30]

Runs ``n`` calls of ``append_message`` (and of ``append_messages`` of ``--batch``; and, on
SQLite, of OpenAI Agents' ``SQLiteSession.add_items([one])`` when installed) on a warm store
and prints, per call, the wall p50 and the CPU time of the event loop's thread and of the
driver's threads (aiosqlite's one thread per connection; ``SQLiteSession``'s
``asyncio.to_thread`` workers), read from the kernel's per-thread clocks. ``--profile``
adds a cProfile of the event loop's thread (the driver's thread runs SQLite's C code and
aiosqlite's queue loop, which the CPU split already shows).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common import MESSAGE, fresh_target

from opensquilla.session import SessionManager, SessionStorage

Call = Callable[[], Awaitable[Any]]


def _thread_cpu_ns(exclude: int) -> int:
    """The CPU time of every thread of this process but ``exclude`` (the loop's)."""
    total = 0
    for thread in threading.enumerate():
        if thread.ident is None or thread.ident == exclude:
            continue
        try:
            total += time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ProcessLookupError):  # ended meanwhile
            continue
    return total


async def measure(fn: Call, n: int, *, profile: cProfile.Profile | None = None) -> dict[str, float]:
    loop_thread = threading.get_ident()
    samples: list[int] = []
    loop_cpu = time.thread_time_ns()
    other_cpu = _thread_cpu_ns(loop_thread)
    if profile is not None:
        profile.enable()
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        samples.append(time.perf_counter_ns() - start)
    if profile is not None:
        profile.disable()
    loop_cpu = time.thread_time_ns() - loop_cpu
    other_cpu = _thread_cpu_ns(loop_thread) - other_cpu
    return {
        "p50_ms": statistics.median(samples) / 1e6,
        "loop_cpu_ms": loop_cpu / n / 1e6,
        "driver_cpu_ms": other_cpu / n / 1e6,
    }


async def run(backend: str, n: int, batch: int, profile: bool, top: int) -> None:
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        manager = SessionManager(storage, inject_time_prefix=False)
        one_key = (await manager.create("agent:main:one")).session_key
        many_key = (await manager.create("agent:main:many")).session_key
        messages: list[Any] = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": MESSAGE, "token_count": 50}
            for i in range(batch)
        ]

        async def one() -> None:
            await manager.append_message(one_key, "user", MESSAGE, token_count=50)

        async def many() -> None:
            await manager.append_messages(many_key, messages)

        calls: dict[str, Call] = {"append_message": one, f"append_messages_{batch}": many}
        closers: list[Callable[[], Awaitable[Any]]] = [storage.close]
        if backend == "sqlite":
            try:
                from agents import SQLiteSession
            except ImportError:
                print("openai-agents is not installed: no SQLiteSession row")
            else:
                peer = SQLiteSession("bench", str(Path(target).with_name("openai.db")))
                item: Any = {"role": "user", "content": MESSAGE}

                async def peer_one() -> None:
                    await peer.add_items([item])

                calls["openai_sqlite_add_items_1"] = peer_one
                closers.append(lambda: asyncio.to_thread(peer.close))
        try:
            for fn in calls.values():
                await measure(fn, 100)  # warm
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in calls}
            for _ in range(3):  # interleaved thirds
                for name, fn in calls.items():
                    rows[name].append(await measure(fn, max(1, n // 3)))
            for name, parts in rows.items():
                figures = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
                print(
                    f"{name:28} p50 {figures['p50_ms']:.3f} ms; CPU per call: event loop "
                    f"{figures['loop_cpu_ms']:.3f} ms, driver threads "
                    f"{figures['driver_cpu_ms']:.3f} ms"
                )
            if profile:
                for name, fn in calls.items():
                    prof = cProfile.Profile(time.thread_time)  # CPU, not wall
                    await measure(fn, n, profile=prof)
                    out = io.StringIO()
                    stats = pstats.Stats(prof, stream=out)
                    stats.sort_stats("tottime").print_stats(top)
                    stats.sort_stats("cumulative").print_stats(top)
                    print(f"==== {name}: cProfile of the event loop's thread, {n} calls")
                    print(out.getvalue())
        finally:
            for close in reversed(closers):
                await close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    arguments = parser.parse_args()
    backend = "postgresql" if arguments.backend == "postgres" else "sqlite"
    asyncio.run(run(backend, arguments.n, arguments.batch, arguments.profile, arguments.top))
