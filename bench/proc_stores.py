"""The stores of ``bench/processes.py``: set up a database, append in a worker process,
count what was stored. Every store appends the same 200-character user message, one call
per message; peers are imported only by the processes that run them. And the CPU time of
a PostgreSQL server on this machine, from ``/proc``."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections import Counter
from typing import Any

from common import MESSAGE

TOKENS = 50  # token_count of each of our appends: total_tokens must be rows * TOKENS
ADK_APP, ADK_USER = "bench", "u"
ITEM = {"role": "user", "content": MESSAGE}


def _async_url(target: str) -> str:
    if target.startswith("postgresql"):
        return target.replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"sqlite+aiosqlite:///{target}"


def error_name(exc: BaseException) -> str:
    """An exception's type and the start of its first line (SQLAlchemy puts the driver's
    message there, e.g. ``(sqlite3.OperationalError) database is locked``)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:70]}" if text else type(exc).__name__


class Store:
    """One worker process's view of a store: ``append(key)`` appends one message."""

    stale_retries = 0

    async def append(self, key: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class Ours(Store):
    async def open(self, target: str) -> None:
        from opensquilla.session import SessionManager, SessionStorage

        self.storage = SessionStorage(target)
        await self.storage.connect()
        self.manager = SessionManager(self.storage, inject_time_prefix=False)

    async def append(self, key: str) -> None:
        await self.manager.append_message(key, "user", MESSAGE, token_count=TOKENS)

    async def close(self) -> None:
        await self.storage.close()


class OpenAISqlite(Store):
    async def open(self, target: str, keys: list[str]) -> None:
        from agents import SQLiteSession

        self.sessions = {key: SQLiteSession(key, target) for key in keys}

    async def append(self, key: str) -> None:
        await self.sessions[key].add_items([ITEM])

    async def close(self) -> None:
        for session in self.sessions.values():
            session.close()


class OpenAISqlalchemy(Store):
    """One engine per process (as a gateway process would hold), a session per key."""

    async def open(self, target: str, keys: list[str]) -> None:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(_async_url(target))
        self.sessions = {key: SQLAlchemySession(key, engine=self.engine) for key in keys}

    async def append(self, key: str) -> None:
        await self.sessions[key].add_items([ITEM])

    async def close(self) -> None:
        await self.engine.dispose()


def _adk_event() -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(
        author="user",
        invocation_id=uuid.uuid4().hex,
        content=types.Content(role="user", parts=[types.Part(text=MESSAGE)]),
    )


class Adk(Store):
    """One service per process; the writers of one session in a process share its object.
    A ``StaleSessionError`` (another process appended since the object was loaded) makes
    the writer reload the session without events and try again, as ADK's message asks."""

    RETRIES = 100

    async def open(self, target: str, keys: list[str]) -> None:
        from google.adk.sessions import DatabaseSessionService

        self.service = DatabaseSessionService(db_url=_async_url(target))
        self.sessions = {key: await self._load(key) for key in keys}

    async def _load(self, key: str) -> Any:
        from google.adk.sessions.base_session_service import GetSessionConfig

        return await self.service.get_session(
            app_name=ADK_APP,
            user_id=ADK_USER,
            session_id=key,
            config=GetSessionConfig(num_recent_events=0),
        )

    async def append(self, key: str) -> None:
        from google.adk.errors import StaleSessionError

        for _ in range(self.RETRIES):
            try:
                await self.service.append_event(self.sessions[key], _adk_event())
                return
            except StaleSessionError:
                self.stale_retries += 1
                self.sessions[key] = await self._load(key)
        raise RuntimeError(f"stale {self.RETRIES} times in a row")

    async def close(self) -> None:
        await self.service.close()


async def open_store(store: str, target: str, keys: list[str]) -> Store:
    distinct = sorted(set(keys))
    if store == "ours":
        ours = Ours()
        await ours.open(target)
        return ours
    peer: OpenAISqlite | OpenAISqlalchemy | Adk = {
        "openai_sqlite": OpenAISqlite,
        "openai_sqlalchemy": OpenAISqlalchemy,
        "adk": Adk,
    }[store]()
    await peer.open(target, distinct)
    return peer


async def prepare(store: str, target: str, keys: list[str]) -> dict[str, int]:
    """Schema and sessions, made before any worker starts (not timed); the messages this
    stored per key (the OpenAI stores make a session by its first message: one each)."""
    if store == "ours":
        from opensquilla.session import SessionManager, SessionStorage

        async with SessionStorage(target) as storage:
            manager = SessionManager(storage)
            for key in keys:
                await manager.create(key)
        return {}
    if store == "openai_sqlite":
        from agents import SQLiteSession

        for key in keys:
            session = SQLiteSession(key, target)
            await session.add_items([ITEM])
            session.close()
        return dict.fromkeys(keys, 1)
    if store == "openai_sqlalchemy":
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(_async_url(target))
        try:
            for key in keys:
                session = SQLAlchemySession(key, engine=engine, create_tables=True)
                await session.add_items([ITEM])
        finally:
            await engine.dispose()
        return dict.fromkeys(keys, 1)
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(db_url=_async_url(target))
    try:
        for key in keys:
            await service.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=key)
    finally:
        await service.close()
    return {}


COUNTS = {
    "ours": "SELECT session_key, count(*) FROM transcript_entries GROUP BY session_key",
    "openai_sqlite": "SELECT session_id, count(*) FROM agent_messages GROUP BY session_id",
    "openai_sqlalchemy": "SELECT session_id, count(*) FROM agent_messages GROUP BY session_id",
    "adk": "SELECT session_id, count(*) FROM events GROUP BY session_id",
}
TOTALS = "SELECT session_key, total_tokens FROM sessions"


async def _fetch(target: str, statement: str) -> list[tuple[Any, ...]]:
    if not target.startswith("postgresql"):
        with sqlite3.connect(target) as conn:
            return list(conn.execute(statement).fetchall())
    import asyncpg

    conn = await asyncpg.connect(target)
    try:
        return [tuple(row) for row in await conn.fetch(statement)]
    finally:
        await conn.close()


async def count_rows(
    store: str, target: str, keys: list[str]
) -> tuple[Counter[str], list[str] | None]:
    """Rows stored per key; for ours also the keys whose ``total_tokens`` is not
    ``rows * TOKENS`` (the session's counter disagrees with its transcript)."""
    found: Counter[str] = Counter({k: n for k, n in await _fetch(target, COUNTS[store])})
    if store != "ours":
        return found, None
    totals = dict(await _fetch(target, TOTALS))
    return found, [k for k in keys if totals.get(k) != found[k] * TOKENS]


# -- server CPU (PostgreSQL on this machine) ----------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _postgres_ticks() -> dict[int, int]:
    """utime+stime in clock ticks of every process named ``postgres``."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if name != "postgres":
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[int(entry)] = int(fields[11]) + int(fields[12])  # utime, stime
    return out


async def _other_client_backends(target: str) -> tuple[set[int], set[int]]:
    """(pids of client backends of the bench database, of every other database)."""
    import asyncpg

    conn = await asyncpg.connect(target)
    try:
        rows = await conn.fetch(
            "SELECT pid, datname = current_database() AS ours FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return {r["pid"] for r in rows if r["ours"]}, {r["pid"] for r in rows if not r["ours"]}


class ServerCpu:
    """Server CPU over a window, if the PostgreSQL server runs on this machine."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.before: dict[int, int] = {}
        self.mine: set[int] = set()
        self.others: set[int] = set()

    async def start(self) -> None:
        self.mine, self.others = await _other_client_backends(self.target)
        self.before = _postgres_ticks()

    async def stop(self) -> dict[str, float] | None:
        after = _postgres_ticks()
        mine, others = await _other_client_backends(self.target)
        if not after or not (self.mine | mine) & set(after):
            return None  # the server is not on this machine (or not visible)
        mine |= self.mine
        others = (others | self.others) - mine

        def delta(pids: set[int]) -> float:
            return sum(after[p] - self.before.get(p, 0) for p in pids) / TICK

        backends = set(after) & mine
        server = set(after) - others  # backends of the bench db, and the server's own
        return {
            "backends_cpu_s": delta(backends),
            "server_cpu_s": delta(server),
            "server_all_cpu_s": delta(set(after)),
        }
