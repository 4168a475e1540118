"""The partitioned layout against the plain one, in the same run (docs/scaling.md).

    python bench/partitioned.py [--quick] [--entries N] [--sessions N] [--repeat N]

Two PostgreSQL databases, ``bench_plain`` and ``bench_part`` (``--layout partitioned:16``),
are created on ``$BENCH_POSTGRES_URL`` (dropped afterwards), each filled through the store's
own schema with the same rows (default 1,000,000 transcript entries over 10,000 sessions, by
``INSERT ... SELECT generate_series``; ``--quick``: 10,000 over 100, seconds), then settled
(``VACUUM ANALYZE``). Each operation is timed on both in interleaved rounds, on the same
random sessions, so a load that comes and goes hits both alike; the table gives p50 and p95
in milliseconds and the partitioned/plain ratio of the p50 against the issue's targets:
<= 1.1x for the per-session operations (append, transcript page, context view, recent tail),
<= 2x for the listing page and the search across sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import sqlalchemy as sa
from common import MESSAGE, PG_URL, Timings, bulk_sessions, settle

from opensquilla.session import SessionManager, SessionStorage

DATABASES = {"plain": "bench_plain", "partitioned": "bench_part"}
LAYOUTS = {"plain": "plain", "partitioned": "partitioned:16"}
PER_SESSION_TARGET = 1.1
ACROSS_TARGET = 2.0
PREFIX = "agent:main:s"

FILL = sa.text(
    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
    "created_at, token_count, schema_version) "
    "SELECT s.session_id, s.session_key, 'bench-' || i, "
    "CASE WHEN i % 2 = 1 THEN 'assistant' ELSE 'user' END, :content || ' n' || i, "
    "s.created_at + i, 50, 1 "
    "FROM sessions s CROSS JOIN generate_series(0, CAST(:per AS BIGINT) - 1) AS i "
    "WHERE s.session_key >= :low AND s.session_key < :high"
)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _url(name: str) -> str:
    return sa.engine.make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


async def _filled(name: str, layout: str, sessions: int, per: int) -> SessionStorage:
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await _admin(f'CREATE DATABASE "{name}"')
    storage = SessionStorage(_url(name), layout=layout)
    await storage.connect()
    await bulk_sessions(storage, sessions, PREFIX)
    step = 500
    for start in range(0, sessions, step):
        async with storage.engine.begin() as conn:
            await conn.execute(
                FILL,
                {
                    "content": MESSAGE,
                    "per": per,
                    "low": f"{PREFIX}{start:07d}",
                    "high": f"{PREFIX}{start + step:07d}",
                },
            )
    await settle(storage)
    return storage


Operation = Callable[[SessionManager, str], Awaitable[Any]]

OPERATIONS: dict[str, tuple[Operation, float]] = {
    "append": (lambda m, k: m.append_message(k, "user", MESSAGE), PER_SESSION_TARGET),
    "transcript page": (
        lambda m, k: m.get_canonical_transcript_page(k, limit=50),
        PER_SESSION_TARGET,
    ),
    "context view": (lambda m, k: m.get_context_view(k, max_tokens=4000), PER_SESSION_TARGET),
    "recent tail": (lambda m, k: m.get_recent_transcript(k, 20), PER_SESSION_TARGET),
    "listing page": (lambda m, k: m.list_sessions_page(limit=50), ACROSS_TARGET),
    "search": (lambda m, k: m.search_transcript("quick fox", limit=20), ACROSS_TARGET),
}


async def run(entries: int, sessions: int, repeat: int) -> dict[str, dict[str, float]]:
    per = max(1, entries // sessions)
    managers: dict[str, SessionManager] = {}
    storages: list[SessionStorage] = []
    try:
        for kind, name in DATABASES.items():
            start = time.perf_counter()
            storage = await _filled(name, LAYOUTS[kind], sessions, per)
            storages.append(storage)
            managers[kind] = SessionManager(storage, inject_time_prefix=False)
            took = time.perf_counter() - start
            print(f"filled {name}: {sessions * per:,} entries in {took:.1f}s")
        chooser = random.Random(30)
        result: dict[str, dict[str, float]] = {}
        for op_name, (operation, target) in OPERATIONS.items():
            timings = {kind: Timings() for kind in managers}
            for _ in range(3):  # warm both: the first calls pay for plans and caches
                key = f"{PREFIX}{chooser.randrange(sessions):07d}"
                for manager in managers.values():
                    await operation(manager, key)
            for n in range(repeat):
                key = f"{PREFIX}{chooser.randrange(sessions):07d}"
                order = list(managers.items())
                if n % 2:
                    order.reverse()
                for kind, manager in order:
                    began = time.perf_counter_ns()
                    await operation(manager, key)
                    timings[kind].add(time.perf_counter_ns() - began)
            plain, part = timings["plain"], timings["partitioned"]
            result[op_name] = {
                "plain_p50": plain.p50,
                "plain_p95": plain.ms(0.95),
                "part_p50": part.p50,
                "part_p95": part.ms(0.95),
                "ratio": part.p50 / plain.p50 if plain.p50 else 0.0,
                "target": target,
            }
        return result
    finally:
        for storage in storages:
            await storage.close()
        for name in DATABASES.values():
            await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _print(result: dict[str, dict[str, float]]) -> None:
    print(
        f"{'operation':16} {'plain p50':>10} {'plain p95':>10} {'part p50':>10} "
        f"{'part p95':>10} {'ratio':>7} {'target':>7}"
    )
    for name, row in result.items():
        verdict = "ok" if row["ratio"] <= row["target"] else "OVER"
        print(
            f"{name:16} {row['plain_p50']:10.3f} {row['plain_p95']:10.3f} "
            f"{row['part_p50']:10.3f} {row['part_p95']:10.3f} {row['ratio']:6.2f}x "
            f"{row['target']:5.1f}x {verdict}"
        )
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 entries over 100 sessions")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    if args.quick:
        args.entries, args.sessions, args.repeat = 10_000, 100, 30
    _print(asyncio.run(run(args.entries, args.sessions, args.repeat)))


if __name__ == "__main__":
    main()
