"""The prefix listing (issue 28, item 6): one page of one app and user's sessions, at 1k,
10k and 100k sessions in the store, on both backends.

One store per size (``ANALYZE`` run after the load, as a live database's maintenance
would have), the three timed in interleaved rounds: every app/user holds about 100
sessions, the one listed exactly 100, and ``updated_at`` is shuffled over the whole store
so that the listing order interleaves every user. A page is ``list_sessions_page(limit=50,
key_prefix="agent:main:app-7:user-3:")`` through the manager; the target is a flat p50
(100k <= ~1.3x 1k): the key's index serves the range (``idx_sessions_key_prefix`` on
PostgreSQL, the primary key's on SQLite), so the cost follows the user's sessions, not the
store's.

    python bench/primitives_listing.py [--backend sqlite|postgresql|both] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import fresh_target, interleaved_p50, settle

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.support.clock import new_session_id

SIZES = (1_000, 10_000, 100_000)
PER_USER = 100
PAGE = 50
TARGET_APP, TARGET_USER = 7, 3
PREFIX = f"agent:main:app-{TARGET_APP}:user-{TARGET_USER}:"
BASE_MS = 1_700_000_000_000


def _key(i: int) -> str:
    """The key of session ``i``: users of ``PER_USER`` sessions each, ten users an app; the
    first ``PER_USER`` are the listed user's (in the store from the first size on)."""
    user = i // PER_USER
    if user == 0:
        return f"{PREFIX}s{i:07d}"
    return f"agent:main:app-{100 + user // 10}:user-{user % 10}:s{i:07d}"


async def _grow(storage: SessionStorage, start: int, stop: int, rng: random.Random) -> None:
    """Sessions ``start`` to ``stop`` (setup, not measured), raw inserts of whole rows."""
    from opensquilla.session.db.rows import values_of
    from opensquilla.session.db.tables import sessions
    from opensquilla.session.models import SessionNode

    batch = 5_000
    for first in range(start, stop, batch):
        rows = []
        for i in range(first, min(stop, first + batch)):
            node = SessionNode(
                session_key=_key(i),
                session_id=new_session_id(),
                created_at=BASE_MS + i,
                updated_at=BASE_MS + rng.randrange(10 * SIZES[-1]),
            )
            rows.append(values_of(node, sessions))
        async with storage.engine.begin() as conn:
            await conn.execute(sessions.insert(), rows)
    await settle(storage)


async def run(backend: str, repeat: int = 200) -> dict[str, float]:
    """``{"prefix_page_<size>_ms": p50, ..., "prefix_page_ratio_100k_1k": ...}``: one
    store per size, open at once, their pages timed in interleaved rounds (a load that
    comes and goes on the machine hits every size alike)."""
    rng = random.Random(28)
    figures: dict[str, float] = {}
    async with contextlib.AsyncExitStack() as stack:
        calls: dict[str, Callable[[], Awaitable[None]]] = {}
        for size in SIZES:
            target = await stack.enter_async_context(fresh_target(backend))
            storage = SessionStorage(target)
            await storage.connect()
            stack.push_async_callback(storage.close)
            await _grow(storage, 0, size, rng)
            label = f"{size // 1000}k"
            calls[f"page_{label}"], calls[f"two_{label}"] = _pages(
                SessionManager(storage, inject_time_prefix=False)
            )
        for call in calls.values():
            await call()  # warm: the statements' compiled forms, the pools
        times = await interleaved_p50(calls, repeat)
    for size in SIZES:
        label = f"{size // 1000}k"
        figures[f"prefix_page_{label}_ms"] = round(times[f"page_{label}"], 3)
        figures[f"prefix_two_pages_{label}_ms"] = round(times[f"two_{label}"], 3)
    figures["prefix_page_ratio_100k_1k"] = round(
        figures["prefix_page_100k_ms"] / figures["prefix_page_1k_ms"], 2
    )
    return figures


def _pages(
    manager: SessionManager,
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """The first page of the listed user's sessions, and a walk of both its pages."""

    async def page() -> None:
        got = await manager.list_sessions_page(limit=PAGE, key_prefix=PREFIX)
        assert len(got.sessions) == PAGE and got.has_more

    async def two_pages() -> None:
        first = await manager.list_sessions_page(limit=PAGE, key_prefix=PREFIX)
        rest = await manager.list_sessions_page(
            limit=PAGE, cursor=first.next_cursor, key_prefix=PREFIX
        )
        assert len(rest.sessions) == PER_USER - PAGE and not rest.has_more

    return page, two_pages


async def _main(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    return {backend: await run(backend, args.repeat) for backend in backends}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=200)
    print(json.dumps(asyncio.run(_main(parser.parse_args())), indent=2))
