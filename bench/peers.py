"""The stores users would pick instead, on the same workload, in the same run.

* OpenAI Agents ``SQLiteSession`` (sqlite3 on a worker thread; WAL, synchronous=FULL);
* OpenAI Agents ``SQLAlchemySession`` (SQLAlchemy async; WAL, synchronous=FULL on SQLite);
* Google ADK ``DatabaseSessionService`` (SQLAlchemy async ORM; SQLite's default rollback
  journal, synchronous=FULL).

Installed from the ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from common import MESSAGE, fresh_target, p50_of, timed


def _async_url(target: str) -> str:
    if target.startswith("postgresql"):
        return target.replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"sqlite+aiosqlite:///{target}"


async def openai_sqlite(target: str, n: int) -> dict[str, float]:
    from agents import SQLiteSession

    session = SQLiteSession("bench", target)
    item = {"role": "user", "content": MESSAGE}
    await timed(lambda: session.add_items([item]), min(50, n))
    appends = await timed(lambda: session.add_items([item]), n)
    read = await p50_of(session.get_items, 3)
    session.close()
    return {"append_p50_ms": appends.p50, "read_ms": read, "items": n}


@contextlib.asynccontextmanager
async def openai_reader(target: str, n: int) -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    """OpenAI Agents ``SQLAlchemySession`` holding ``n`` messages (written in batches, not
    measured); yields its ``get_items``, the read our transcript read is compared with."""
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    session = SQLAlchemySession.from_url("bench", url=_async_url(target), create_tables=True)
    item = {"role": "user", "content": MESSAGE}
    for start in range(0, n, 5000):
        await session.add_items([item] * min(5000, n - start))
    try:
        yield session.get_items
    finally:
        await session.engine.dispose()


async def openai_sqlalchemy(target: str, n: int) -> dict[str, float]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    session = SQLAlchemySession.from_url("bench", url=_async_url(target), create_tables=True)
    item = {"role": "user", "content": MESSAGE}
    await timed(lambda: session.add_items([item]), min(50, n))
    appends = await timed(lambda: session.add_items([item]), n)
    read = await p50_of(session.get_items, 3)
    await session.engine.dispose()
    return {"append_p50_ms": appends.p50, "read_ms": read}


def _adk_event(text: str) -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(
        author="user",
        invocation_id=uuid.uuid4().hex,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


async def adk(target: str, n: int) -> dict[str, float]:
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(db_url=_async_url(target))
    session = await service.create_session(app_name="bench", user_id="u", session_id="s")

    async def one() -> None:
        await service.append_event(session, _adk_event(MESSAGE))

    await timed(one, min(50, n))
    appends = await timed(one, n)
    read = await p50_of(
        lambda: service.get_session(app_name="bench", user_id="u", session_id="s"), 3
    )
    return {"append_p50_ms": appends.p50, "read_ms": read}


async def openai_sqlalchemy_writers(target: str, count: int, per_writer: int) -> float:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    sessions = [
        SQLAlchemySession.from_url(
            f"w{i}",
            url=_async_url(target),
            create_tables=True,
            engine_kwargs={"pool_size": max(count, 5)},
        )
        for i in range(count)
    ]
    item = {"role": "user", "content": MESSAGE}

    async def writer(session: Any) -> None:
        for _ in range(per_writer):
            await session.add_items([item])

    await asyncio.gather(*(writer(s) for s in sessions))
    start = time.perf_counter()
    await asyncio.gather(*(writer(s) for s in sessions))
    elapsed = time.perf_counter() - start
    for session in sessions:
        await session.engine.dispose()
    return count * per_writer / elapsed


async def run(backend: str, plan: dict[str, Any]) -> dict[str, float]:
    """Every peer on ``backend``; keys are prefixed with the peer's name."""
    n = plan["appends"]
    out: dict[str, float] = {}
    runners = [("openai_sqlalchemy", openai_sqlalchemy), ("adk", adk)]
    if backend == "sqlite":
        runners.insert(0, ("openai_sqlite", openai_sqlite))
    for name, runner in runners:
        async with fresh_target(backend) as target:
            for key, value in (await runner(target, n)).items():
                out[f"peer_{name}_{key}"] = value
    if backend == "postgres":
        async with fresh_target(backend) as target:
            one = await openai_sqlalchemy_writers(target, 1, plan["per_writer"])
        async with fresh_target(backend) as target:
            eight = await openai_sqlalchemy_writers(target, 8, plan["per_writer"])
        out["peer_openai_sqlalchemy_writers_8_vs_1"] = eight / one
    return out
