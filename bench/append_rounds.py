"""The append against its peers in interleaved same-run rounds, both of its paths.

    python bench/append_rounds.py --backend sqlite|postgres [--rounds 8] [-n 300]

Each round runs ``n`` appends of each contender in turn, on its own warm store: ours on the
direct path (``db/direct_statement.py``, the default while nothing listens for statements),
ours forced through SQLAlchemy's ``Connection`` (the path before it, and the one taken with
a listener), the driver floor (SQLite: our one statement through bare aiosqlite; PostgreSQL:
fence and insert in one transaction through bare asyncpg, as ``bench/run.py``'s floor) and,
on SQLite, OpenAI Agents' ``SQLiteSession`` (``pip install -e '.[bench]'``). A load that comes
and goes hits every contender of a round alike: the ratios of the medians of the rounds'
p50s are what to compare on a shared machine, and the client CPU per append (this process,
its driver threads included; not the PostgreSQL server's), which a busy machine moves far
less than wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import floors
from common import MESSAGE, fresh_target

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import uow_writes

Append = Callable[[], Awaitable[Any]]


def _p50(samples: list[int]) -> float:
    return statistics.median(samples) / 1e6


CPU: dict[str, list[float]] = {}  # contender -> this process's CPU ms per append, per round


async def _round(fn: Append, n: int, name: str | None = None) -> float:
    samples = []
    cpu = time.process_time_ns()
    for _ in range(n):
        start = time.perf_counter_ns()
        await fn()
        samples.append(time.perf_counter_ns() - start)
    if name is not None:
        CPU.setdefault(name, []).append((time.process_time_ns() - cpu) / n / 1e6)
    return _p50(samples)


WATCHED = uow_writes.statements_watched


def _watched(engine: Any) -> bool:
    return True


def _ours(manager: SessionManager, key: str, *, direct: bool) -> Append:
    roles = ["user", "assistant"]
    count = 0

    async def one() -> None:
        nonlocal count
        count += 1
        if direct:
            await manager.append_message(key, roles[count % 2], MESSAGE, token_count=50)
            return
        # The Connection path, as when a listener watches the statements.
        uow_writes.statements_watched = _watched
        try:
            await manager.append_message(key, roles[count % 2], MESSAGE, token_count=50)
        finally:
            uow_writes.statements_watched = WATCHED

    return one


async def run(backend: str, rounds: int, n: int) -> dict[str, Any]:
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        manager = SessionManager(storage, inject_time_prefix=False)
        direct_node = await manager.create("agent:main:direct")
        connection_node = await manager.create("agent:main:connection")
        floor_node = await manager.create("agent:main:floor")
        contenders: dict[str, Append] = {
            "ours_direct": _ours(manager, direct_node.session_key, direct=True),
            "ours_connection": _ours(manager, connection_node.session_key, direct=False),
        }
        closers: list[Callable[[], Awaitable[Any]]] = [storage.close]
        counter = iter(range(10**9))
        key, session_id = floor_node.session_key, floor_node.session_id
        if backend == "sqlite":
            conn = await aiosqlite.connect(target, isolation_level=None)
            await conn.execute("PRAGMA synchronous=FULL")
            closers.append(conn.close)
            columns = (
                f"{floors.INSERT_COLUMNS}, fence_epoch, touched_at, token_delta, tokens_ceiling"
            )
            append = (
                f"INSERT INTO transcript_appends ({columns}) VALUES ({', '.join('?' * 22)}) "  # noqa: S608
                "RETURNING (SELECT max(id) FROM transcript_entries)"
            )

            async def floor() -> None:
                i = next(counter)
                fence = (0, 1_800_000_000_000 + i, 50, 2**63 - 1 - 50)
                assert await conn.execute_fetchall(
                    append, floors._values(session_id, key, i) + fence
                )

            contenders["floor_one_hop"] = floor
            try:
                from agents import SQLiteSession
            except ImportError:
                print("openai-agents is not installed (pip install -e '.[bench]'): no peer")
            else:
                peer = SQLiteSession("bench", str(Path(target).with_name("openai.db")))
                item = {"role": "user", "content": MESSAGE}
                contenders["openai_sqlite"] = lambda: peer.add_items([item])
                closers.append(lambda: asyncio.to_thread(peer.close))
        else:
            pg = await asyncpg.connect(floors._pg_dsn(target))
            closers.append(pg.close)
            placeholders = ", ".join(f"${i}" for i in range(1, 19))
            insert = (
                f"INSERT INTO transcript_entries ({floors.INSERT_COLUMNS}) VALUES ({placeholders})"  # noqa: S608
            )
            update = (
                "UPDATE sessions SET updated_at = $1, total_tokens = total_tokens + $2, "
                "total_tokens_fresh = false WHERE session_key = $3 AND epoch = $4"
            )

            async def floor() -> None:
                i = next(counter)
                async with pg.transaction():
                    await pg.execute(update, 1_800_000_000_000 + i, 50, key, 0)
                    await pg.execute(insert, *floors._values(session_id, key, i))

            contenders["floor_asyncpg"] = floor
        try:
            for fn in contenders.values():  # warm: pools, statement caches, the view lookup
                await _round(fn, 50)
            per_round: dict[str, list[float]] = {name: [] for name in contenders}
            for _ in range(rounds):
                for name, fn in contenders.items():
                    per_round[name].append(await _round(fn, n, name))
        finally:
            for close in reversed(closers):
                await close()
    medians = {name: statistics.median(values) for name, values in per_round.items()}
    floor_name = "floor_one_hop" if backend == "sqlite" else "floor_asyncpg"
    pairs = [("ours_direct", "ours_connection")]
    for other in (floor_name, "openai_sqlite"):
        if other in per_round:
            pairs += [("ours_direct", other), ("ours_connection", other)]
    # Each ratio within a round (the same moment of the machine), then their median; and
    # the ratio of the best rounds (the quietest moment each contender saw).
    ratios = {
        f"{a}/{b}": statistics.median(
            x / y for x, y in zip(per_round[a], per_round[b], strict=True)
        )
        for a, b in pairs
    }
    best = {f"{a}/{b}": min(per_round[a]) / min(per_round[b]) for a, b in pairs}
    return {
        "backend": backend,
        "cpu_ms_per_append": {name: statistics.median(v) for name, v in CPU.items()},
        "rounds": per_round,
        "median_p50_ms": medians,
        "ratios": ratios,
        "best_round_ratios": best,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("-n", type=int, default=300)
    arguments = parser.parse_args()
    report = asyncio.run(run(arguments.backend, arguments.rounds, arguments.n))
    for name, value in report["median_p50_ms"].items():
        spread = report["rounds"][name]
        cpu = report["cpu_ms_per_append"][name]
        print(
            f"{name:16} p50 {value:.3f} ms (rounds {min(spread):.3f}-{max(spread):.3f}); "
            f"client CPU {cpu:.3f} ms per append"
        )
    for name, value in report["ratios"].items():
        best = report["best_round_ratios"][name]
        print(f"{name:32} {value:.2f} (median of the rounds' ratios; best rounds {best:.2f})")
    print(json.dumps({"ratios": report["ratios"], "best": report["best_round_ratios"]}))
