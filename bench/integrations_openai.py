"""The OpenAI Agents SDK integration against the SDK's own backends (issue 29).

    python bench/integrations_openai.py --backend sqlite|postgres [-n 300]

One run, on one fresh database, calls in turn (``common.interleaved_p50``): ``add_items``
of a 5-item turn (a user message, a reasoning item, a function call, its output, the
answer) on ``OpenSquillaSession`` and on the SDK's backend of that database
(``SQLiteSession`` on a SQLite file; ``SQLAlchemySession`` on PostgreSQL, asyncpg), and
``get_items()`` of a 1,000-item session on ours and on ``SQLiteSession`` (a file beside it,
on both backends: the SDK's reference). Targets: ``add_items`` of 5 <= 1.5x
``SQLiteSession`` (SQLite), <= 0.5x ``SQLAlchemySession`` (PostgreSQL); ``get_items`` of
1,000 <= 1.5x ``SQLiteSession``. In the same rounds, the floor of ``add_items``
(``floors.batch_appenders``): five rows written as our batch writes them (the session row's
fence, one multi-row ``INSERT`` into our transcript table with its indexes and search
triggers, one transaction) through the bare driver, on a database of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import floors
from agents.memory import SQLiteSession
from common import MESSAGE, fresh_target, interleaved_p50, script_main

from opensquilla.session import SessionStorage
from opensquilla.session.integrations.openai_agents import OpenSquillaSession
from opensquilla.session.integrations.openai_agents.items import to_message

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def turn(i: int) -> list[Any]:
    """A 5-item turn as the Runner saves it."""
    call_id = f"call_{i}"
    return [
        {"role": "user", "content": f"question {i}: {MESSAGE}"},
        {
            "type": "reasoning",
            "id": f"rs_{i}",
            "summary": [{"type": "summary_text", "text": MESSAGE}],
        },
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": call_id,
            "name": "lookup",
            "arguments": json.dumps({"query": MESSAGE[:60], "limit": 5}),
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": call_id, "output": MESSAGE},
        {
            "type": "message",
            "id": f"msg_{i}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": MESSAGE, "annotations": []}],
        },
    ]


async def fill(session: Any, items: int) -> None:
    for i in range(items // 5):
        await session.add_items(turn(i))


async def run(backend: str, n: int) -> dict[str, float]:
    """p50 milliseconds of add_items(5) and get_items() of 1,000 items, ours and theirs,
    and the ratios."""
    with tempfile.TemporaryDirectory(prefix="osq-bench-sdk-") as tmp:
        async with fresh_target(backend) as target:
            storage = SessionStorage(target)
            await storage.connect()
            ours_add = OpenSquillaSession("bench-add", storage)
            ours_read = OpenSquillaSession("bench-read", storage)
            reference = SQLiteSession("bench-read", Path(tmp) / "sdk.db")
            peer: Any
            engine: Any = None
            SQLAlchemySession: Any = None
            if backend == "sqlite":
                peer_name = "sqlite_session"
                peer = SQLiteSession("bench-add", Path(tmp) / "sdk.db")
            else:
                from agents.extensions.memory.sqlalchemy_session import (
                    SQLAlchemySession,
                )
                from sqlalchemy.ext.asyncio import create_async_engine

                peer_name = "sqlalchemy_session"
                engine = create_async_engine(
                    target.replace("postgresql://", "postgresql+asyncpg://")
                )
                peer = SQLAlchemySession("bench-add", engine=engine, create_tables=True)
            try:
                await fill(ours_read, 1000)
                await fill(reference, 1000)
                counter = iter(range(10**9))

                async def ours_add_5() -> None:
                    await ours_add.add_items(turn(next(counter)))

                async def peer_add_5() -> None:
                    await peer.add_items(turn(next(counter)))

                async def ours_get() -> None:
                    assert len(await ours_read.get_items()) == 1000

                async def reference_get() -> None:
                    assert len(await reference.get_items()) == 1000

                manager = await ours_read.manager()
                core_key = "agent:main:bench-core"
                await manager.create(core_key)

                async def core_append_5() -> None:  # the floor: the same rows, by the manager
                    mapped = [to_message(item) for item in turn(next(counter))]
                    await manager.append_messages(core_key, mapped)

                async def core_transcript() -> None:  # the floor: the store's own read
                    assert len(await manager.get_transcript(ours_read.session_key)) == 1000

                calls: dict[str, Callable[[], Awaitable[Any]]] = {
                    "ours_add_items_5": ours_add_5,
                    f"{peer_name}_add_items_5": peer_add_5,
                    "ours_get_items_1000": ours_get,
                    "sqlite_session_get_items_1000": reference_get,
                    "core_get_transcript_1000": core_transcript,
                    "core_append_messages_5": core_append_5,
                }
                if backend != "sqlite":
                    peer_read = SQLAlchemySession("bench-read", engine=engine, create_tables=True)
                    await fill(peer_read, 1000)

                    async def peer_get() -> None:
                        assert len(await peer_read.get_items()) == 1000

                    calls["sqlalchemy_session_get_items_1000"] = peer_get
                async with (
                    floors.floor_database(backend, "agent:main:bench-floor", 0) as floor_session,
                    floors.batch_appenders(*floor_session, (5,)) as floor,
                ):
                    # Beside the two add_items: a call after the 1,000-row reads pays for
                    # their garbage (a collection that its own allocations set off).
                    adds = list(calls.items())[:2]
                    calls = {**dict(adds), "floor_append_5": floor[5], **calls}
                    await interleaved_p50(calls, min(20, n))  # warm: caches, the pool
                    figures = await interleaved_p50(calls, n)
            finally:
                await ours_add.close()
                await ours_read.close()
                reference.close()
                if engine is not None:
                    await engine.dispose()
                else:
                    peer.close()
                await storage.close()
    result = {f"{name}_p50_ms": value for name, value in figures.items()}
    result[f"add_items_5_over_{peer_name}"] = (
        figures["ours_add_items_5"] / figures[f"{peer_name}_add_items_5"]
    )
    result[f"floor_append_5_over_{peer_name}"] = (
        figures["floor_append_5"] / figures[f"{peer_name}_add_items_5"]
    )
    result["get_items_1000_over_sqlite_session"] = (
        figures["ours_get_items_1000"] / figures["sqlite_session_get_items_1000"]
    )
    result["core_get_transcript_1000_over_sqlite_session"] = (
        figures["core_get_transcript_1000"] / figures["sqlite_session_get_items_1000"]
    )
    if "sqlalchemy_session_get_items_1000" in figures:
        result["get_items_1000_over_sqlalchemy_session"] = (
            figures["ours_get_items_1000"] / figures["sqlalchemy_session_get_items_1000"]
        )
    return result


if __name__ == "__main__":
    script_main(__doc__, run, 300)
