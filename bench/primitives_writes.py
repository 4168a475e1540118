"""The framework primitives' writes (issue 28): one append, a batch of 10, a pop.

    python bench/primitives_writes.py --backend sqlite|postgres [-n 300]

Each round calls one ``append_message``, one ``append_messages`` of 10 and one
``pop_message`` in turn (``common.interleaved_p50``: a load that comes and goes hits them
alike), on one warm store whose session keeps about 1,000 live entries (each round adds 11
and pops 1, after a prefill). The targets: ``append_messages`` of 10 p50 <= 2x one
append, ``pop_message`` p50 <= 1.2x one append. In the same rounds, the driver floor of
the batch target (``floors.batch_appenders``): the fence and a 10-row ``INSERT`` against the
fence and a 1-row one, through the bare driver, on a database of its own laid out and
filled alike (so that neither's writes make the other's SQLite connection reload its cache).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import floors
from common import MESSAGE, bulk_fill, fresh_target, interleaved_p50, script_main

from opensquilla.session import SessionManager, SessionStorage

KEY = "agent:main:primitives"


async def run(backend: str, n: int) -> dict[str, float]:
    """p50 milliseconds of one append, an append_messages of 10 and a pop, and the ratios."""
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        manager = SessionManager(storage, inject_time_prefix=False)
        try:
            node = await manager.create(KEY)
            await bulk_fill(storage, KEY, node.session_id, 1000)
            batch: list[Any] = [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "content": MESSAGE,
                    "token_count": 50,
                }
                for i in range(10)
            ]

            async def one() -> None:
                await manager.append_message(KEY, "user", MESSAGE, token_count=50)

            async def ten() -> None:
                await manager.append_messages(KEY, batch)

            async def pop() -> None:
                await manager.pop_message(KEY)

            async with (
                floors.floor_database(backend, KEY) as floor_session,
                floors.batch_appenders(*floor_session) as floor,
            ):
                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "append_message": one,
                    "append_messages_10": ten,
                    "pop_message": pop,
                    "floor_1": floor[1],
                    "floor_10": floor[10],
                }
                await interleaved_p50(calls, min(30, n))  # warm: statement caches, the pool
                figures = await interleaved_p50(calls, n)
        finally:
            await storage.close()
    one_ms = figures["append_message"]
    return {
        "append_message_p50_ms": one_ms,
        "append_messages_10_p50_ms": figures["append_messages_10"],
        "pop_message_p50_ms": figures["pop_message"],
        "append_messages_10_over_append": figures["append_messages_10"] / one_ms,
        "pop_over_append": figures["pop_message"] / one_ms,
        "floor_append_1_p50_ms": figures["floor_1"],
        "floor_append_10_p50_ms": figures["floor_10"],
        "floor_10_over_1": figures["floor_10"] / figures["floor_1"],
    }


if __name__ == "__main__":
    script_main(__doc__, run, 300)
