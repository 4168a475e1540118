"""Where an append's tail comes from: each append timed by phase, with the collections of
Python's garbage collector that fell inside it.

    python bench/tails.py --backend sqlite|postgres [-n 5000]

Phases, from the engine's events (the store's public seam): ``before`` is the manager's
and the unit of work's Python up to the pool's checkout (the in-process write lock
included), ``checkout`` the checkout listeners (on PostgreSQL the liveness ping, one round
trip), ``prepare`` the rest up to the statement (SQLAlchemy's execute path, the bound
values), ``statement`` the driver's execution of the one statement (the round trip, or the
SQLite thread hop, its commit included), ``after`` the rest (the connection's return, the
returned entry).
Its listeners are statement events, so the appends it times take the Connection path
(``db/direct_statement.py``: the direct path runs only while no one listens); ``bench/run.py``
times the direct one.
Prints the percentiles, the phase percentiles, and the slowest 1% with their phases, GC
collections (generation, ms) and the second of the run they fell in (a burst of slow ones in
the same second is the machine, not the store). Client CPU per append is reported too:
on a shared machine it moves far less than wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from typing import Any

from common import MESSAGE, fresh_target
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage


def _q(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1e6


async def run(backend: str, n: int) -> None:
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        manager = SessionManager(storage, inject_time_prefix=False)
        node = await manager.create("agent:main:tails")
        marks: dict[str, int] = {}
        engine = storage.engine.sync_engine

        def mark(name: str) -> Any:
            return lambda *_: marks.__setitem__(name, time.perf_counter_ns())

        event.listen(engine, "checkout", mark("checkout"), insert=True)
        event.listen(engine, "checkout", mark("checked_out"))
        event.listen(engine, "before_cursor_execute", mark("before"))
        event.listen(engine, "after_cursor_execute", mark("after"))
        collections: list[list[int]] = []

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                collections.append([time.perf_counter_ns(), 0, info["generation"]])
            elif collections:
                collections[-1][1] = time.perf_counter_ns()

        rows: list[dict[str, Any]] = []
        gc.callbacks.append(on_gc)
        cpu_start = wall_start = 0
        try:
            for i in range(n + 50):  # the first 50 warm the pool and the statement caches
                if i == 50:
                    cpu_start, wall_start = time.process_time_ns(), time.perf_counter_ns()
                marks.clear()
                seen = len(collections)
                start = time.perf_counter_ns()
                await manager.append_message(node.session_key, "user", MESSAGE, token_count=50)
                end = time.perf_counter_ns()
                if i < 50:
                    continue
                before, after = marks.get("before", start), marks.get("after", end)
                checkout = marks.get("checkout", start)
                checked_out = marks.get("checked_out", checkout)
                rows.append(
                    {
                        "total": end - start,
                        "before": checkout - start,
                        "checkout": checked_out - checkout,
                        "prepare": before - checked_out,
                        "statement": after - before,
                        "after": end - after,
                        "gc": [(g[2], ((g[1] or end) - g[0]) / 1e6) for g in collections[seen:]],
                        "second": (start - wall_start) / 1e9,
                    }
                )
            cpu = time.process_time_ns() - cpu_start
        finally:
            gc.callbacks.remove(on_gc)
            await storage.close()
    totals = [r["total"] for r in rows]
    p50, p99 = _q(totals, 0.5), _q(totals, 0.99)
    print(
        f"{backend}: {n} appends to one session; p50 {p50:.3f} ms, p90 {_q(totals, 0.9):.3f}, "
        f"p99 {p99:.3f} (p99/p50 {p99 / p50:.1f}), max {max(totals) / 1e6:.1f}; "
        f"client CPU {cpu / n / 1e6:.3f} ms per append"
    )
    phases = ("before", "checkout", "prepare", "statement", "after")
    for phase in phases:
        values = [r[phase] for r in rows]
        print(f"  {phase:9}: p50 {_q(values, 0.5):.3f} ms, p99 {_q(values, 0.99):.3f} ms")
    slow = sorted(rows, key=lambda r: -r["total"])[: max(1, n // 100)]
    with_gc = [r for r in slow if r["gc"]]
    print(
        f"  slowest 1% ({len(slow)}): median {'/'.join(phases)} "
        + " / ".join(f"{statistics.median(r[p] for r in slow) / 1e6:.2f}" for p in phases)
        + f" ms; {len(with_gc)} had a GC collection "
        f"({sum(1 for r in rows if r['gc'])} appends of all had one)"
    )
    for r in slow[:10]:
        print(
            f"    at {r['second']:7.2f} s: {r['total'] / 1e6:7.2f} ms = "
            + " + ".join(f"{p} {r[p] / 1e6:.2f}" for p in phases)
            + f"; gc {r['gc']}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("-n", type=int, default=5000)
    arguments = parser.parse_args()
    asyncio.run(run(arguments.backend, arguments.n))
