"""Helpers for the command-line tests: run the CLI, seed databases, read them back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from typer.testing import CliRunner, Result

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.cli import app
from opensquilla.session.cli.demo import SCRIPT
from opensquilla.session.db.tables import (
    compacted_transcript_entries,
    session_context_states,
    session_summaries,
    sessions,
    transcript_entries,
)
from opensquilla.session.models import SessionContextState, TranscriptEntry

T = TypeVar("T")
TABLES = {
    "sessions": (sessions, sessions.c.session_key),
    "transcript_entries": (transcript_entries, transcript_entries.c.id),
    "compacted_transcript_entries": (
        compacted_transcript_entries,
        compacted_transcript_entries.c.id,
    ),
    "session_summaries": (session_summaries, session_summaries.c.id),
    "session_context_states": (session_context_states, session_context_states.c.id),
}
ONE_MB = 1024 * 1024
NUL_TEXT = "before\x00after, a backslash \\0 and the escape marker \ufdd0 too"

_runner = CliRunner()


def cli(dsn: str | None, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run ``opensquilla-session [--dsn DSN] ARGS``; exceptions become exit codes."""
    argv = (["--dsn", dsn] if dsn is not None else []) + list(args)
    return _runner.invoke(app, argv, env=env)


def created_empty(target: str) -> None:
    """Make the file of a SQLite target exist, empty (a PostgreSQL database exists already):
    an empty database, not a missing one, which reading commands refuse."""
    if "://" not in target:
        Path(target).touch(mode=0o600)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def opened(dsn: str) -> AsyncIterator[SessionManager]:
    async with SessionStorage(dsn) as storage:
        yield SessionManager(storage, inject_time_prefix=False)


async def dump_tables(dsn: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the five tables, every column, as the store types them (primary-key
    order): what "intact" is compared on."""
    async with SessionStorage(dsn) as storage, storage.engine.connect() as conn:
        dumped: dict[str, list[dict[str, Any]]] = {}
        for name, (table, key) in TABLES.items():
            rows = await conn.execute(sa.select(table).order_by(key))
            dumped[name] = [dict(row._mapping) for row in rows]
        return dumped


async def append_script(manager: SessionManager, key: str) -> list[TranscriptEntry]:
    """The demo's conversation (tool calls included) on ``key``."""
    entries = []
    for role, content, tool_calls, tool_call_id, tokens in SCRIPT:
        entries.append(
            await manager.append_message(
                key,
                role,
                content,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                token_count=tokens,
            )
        )
    return entries


@dataclass
class Seeded:
    keys: list[str] = field(default_factory=list)
    compacted: str = ""
    branch: str = ""
    reset: str = ""


async def seed_rich(dsn: str, *, big: bool = True) -> Seeded:
    """Sessions exercising every table and the awkward values: NUL characters, a 1 MB
    message (``big``), JSON values, floats, an archive, summaries, context states of two
    generations, and a row left under a key by an older generation."""
    seeded = Seeded()
    async with opened(dsn) as manager:
        storage = manager.storage
        key = "agent:main:rich"
        await manager.create(
            key,
            model="model-x",
            label=NUL_TEXT,
            delivery_context={"channel": "web\x00chat", "nested": {"n": [1, 2.5, None, True]}},
            origin={"kind": "test", "ünïcode": "✓ \x00"},
        )
        await manager.update(key, estimated_cost_usd=0.1 + 0.2, fast_mode=True)
        # A 1 MB message (or a short one, for tests that do not need the size).
        size = ONE_MB if big else 100
        content = ("0123456789abcdé" * (size // 15 + 1))[:size]
        await manager.append_message(key, "user", content, token_count=900)
        await manager.append_message(
            key,
            "assistant",
            NUL_TEXT,
            reasoning_content="thinking \x00 hard",
            turn_usage={"input": 10, "output": 3, "cost": 0.000125},
            turn_context={"tz": "Europe/Lisbon"},
            provenance={"kind": "external_user", "source_channel": "web"},
            token_count=40,
        )
        await append_script(manager, key)
        result = await manager.compact_with_result(key, 2000, compaction_id="cmp_seed")
        assert result.removed_count > 0, result.skip_reason
        node = await manager.get_session(key)
        assert node is not None
        await manager.save_context_state(
            SessionContextState(
                session_id=node.session_id,
                session_key=key,
                provider="openai",
                model="model-x",
                state_kind="response_id",
                payload={"id": "resp_\x00", "weights": [0.5, 1.25]},
                expires_at=node.created_at + 60_000,
            )
        )
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id="an-older-generation",
                session_key=key,
                role="user",
                content="left behind by an older generation",
            )
        )
        seeded.compacted = key

        child = "agent:helper:branch"
        await manager.branch(key, child, fork_transcript=True)
        seeded.branch = child

        reset_key = "agent:main:reset-me"
        await manager.create(reset_key)
        await manager.append_message(reset_key, "user", "first generation", token_count=3)
        first = await manager.get_session(reset_key)
        assert first is not None
        await manager.save_context_state(
            SessionContextState(
                session_id=first.session_id,
                session_key=reset_key,
                state_kind="portable_note",
                payload={"note": "from generation one"},
            )
        )
        await manager.reset(reset_key)
        await manager.append_message(reset_key, "user", "second generation", token_count=3)
        seeded.reset = reset_key

        await manager.create("subagent:agent:main:empty")
        seeded.keys = sorted([key, child, reset_key, "subagent:agent:main:empty"])
    return seeded
