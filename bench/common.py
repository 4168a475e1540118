"""Shared bench plumbing: timing, fresh databases, bulk fixtures, the message shape."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.support.clock import new_message_id, new_session_id

PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MESSAGE = ("The quick brown fox jumps over the lazy dog while the agent plans its next step. " * 3)[
    :200
]


@dataclass
class Timings:
    samples_ns: list[int] = field(default_factory=list)

    def add(self, ns: int) -> None:
        self.samples_ns.append(ns)

    def ms(self, q: float) -> float:
        ordered = sorted(self.samples_ns)
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index] / 1e6

    @property
    def p50(self) -> float:
        return self.ms(0.5)

    @property
    def p99(self) -> float:
        return self.ms(0.99)

    @property
    def per_second(self) -> float:
        total = sum(self.samples_ns)
        return len(self.samples_ns) / (total / 1e9) if total else 0.0


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> Timings:
    out = Timings()
    for _ in range(repeat):
        start = time.perf_counter_ns()
        await fn()
        out.add(time.perf_counter_ns() - start)
    return out


async def median_ms(fn: Callable[[], Awaitable[Any]], repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        await fn()
        runs.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(runs)


@contextlib.asynccontextmanager
async def fresh_target(backend: str) -> AsyncIterator[str]:
    """A fresh, empty database: a temporary SQLite file or a new Postgres database."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="osq-bench-") as tmp:
            yield str(Path(tmp) / "bench.db")
        return
    name = "osq_bench_" + uuid.uuid4().hex[:12]
    admin = await asyncpg.connect(PG_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield sa.engine.make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        admin = await asyncpg.connect(PG_URL)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def transcript_rows(session_id: str, key: str, count: int, start_ms: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        assistant = i % 2 == 1
        rows.append(
            {
                "session_id": session_id,
                "session_key": key,
                "message_id": new_message_id(),
                "role": "assistant" if assistant else "user",
                "content": MESSAGE,
                "tool_calls": [{"id": f"call_{i}", "type": "function"}] if assistant else None,
                "tool_call_id": None,
                "reasoning_content": None,
                "turn_usage": None,
                "turn_context": None,
                "created_at": start_ms + i,
                "token_count": 50,
                "provenance_kind": None,
                "provenance_origin_session_id": None,
                "provenance_source_session_key": None,
                "provenance_source_channel": None,
                "provenance_source_tool": None,
                "schema_version": 1,
            }
        )
    return rows


async def bulk_fill(storage: SessionStorage, key: str, session_id: str, count: int) -> None:
    """Fixture data written straight through the engine (setup, not measured)."""
    from opensquilla.session.db.tables import transcript_entries

    batch = 5000
    for start in range(0, count, batch):
        rows = transcript_rows(
            session_id, key, min(batch, count - start), 1_700_000_000_000 + start
        )
        async with storage.engine.begin() as conn:
            await conn.execute(transcript_entries.insert(), rows)


async def bulk_sessions(storage: SessionStorage, count: int, prefix: str = "agent:main:s") -> None:
    from opensquilla.session.db.rows import values_of
    from opensquilla.session.db.tables import sessions
    from opensquilla.session.models import SessionNode

    batch = 5000
    for start in range(0, count, batch):
        rows = []
        for i in range(start, min(count, start + batch)):
            node = SessionNode(
                session_key=f"{prefix}{i:07d}",
                session_id=new_session_id(),
                created_at=1_700_000_000_000 + i,
                updated_at=1_700_000_000_000 + (i * 7919) % count,
            )
            rows.append(values_of(node, sessions))
        async with storage.engine.begin() as conn:
            await conn.execute(sessions.insert(), rows)
