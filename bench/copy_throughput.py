"""Copy throughput, SQLite -> PostgreSQL: ``opensquilla-session copy`` as a library call.

    python bench/copy_throughput.py                       # 1,000 sessions x 100 entries
    python bench/copy_throughput.py --sessions 200 --entries 50 --batch-size 50 --jobs 1

Seeds a fresh SQLite file (bulk inserts, not timed), creates a scratch PostgreSQL database
(dropped afterwards), then times the copy and, separately, its verification. Prints a table
and one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from opensquilla.session import SessionStorage
from opensquilla.session.db.tables import CHILD_TABLES
from opensquilla.session.models.reports import SessionRows
from opensquilla.session.support.clock import new_message_id, now_ms
from opensquilla.session.transfer import copy_sessions, verify_copy

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


def _session_rows(layout: dict[str, Any], index: int, entries: int, base: int) -> SessionRows:
    key = f"agent:bench:s{index:06d}"
    session_id = str(uuid.uuid4())
    now = now_ms()
    session = {name: None for name, _ in layout["sessions"]}
    session.update(
        session_key=key,
        session_id=session_id,
        created_at=now,
        updated_at=now,
        model="bench-model",
        model_routing_revision=0,
        input_tokens=0,
        output_tokens=0,
        total_tokens=entries * 50,
        total_tokens_fresh=False,
        estimated_cost_usd=0.0,
        total_cost_usd=0.0,
        billed_cost_usd=0.0,
        estimated_cost_component_usd=0.0,
        cost_source="none",
        missing_cost_entries=0,
        cache_read=0,
        cache_write=0,
        compaction_count=0,
        forked_from_parent=False,
        spawn_depth=0,
        status="running",
        chat_type="direct",
        fast_mode=False,
        send_policy="allow",
        queue_mode="steer",
        collaboration_mode="default",
        collaboration_revision=0,
        agent_id="bench",
        schema_version=1,
        epoch=0,
        delivery_context={"channel": "bench", "thread": index},
    )
    transcript = []
    for position in range(entries):
        row = {name: None for name, _ in layout["transcript_entries"]}
        assistant = position % 2 == 1
        row.update(
            id=base + position,
            session_id=session_id,
            session_key=key,
            message_id=new_message_id(),
            role="assistant" if assistant else "user",
            content=f"message {position} of session {index}: " + "lorem ipsum dolor " * 20,
            tool_calls=(
                [{"id": f"call_{position}", "function": {"name": "lookup", "arguments": "{}"}}]
                if assistant and position % 10 == 1
                else None
            ),
            turn_usage={"input": 120, "output": 40} if assistant else None,
            created_at=now + position,
            token_count=50,
            schema_version=1,
        )
        transcript.append(row)
    children: dict[str, list[dict[str, Any]]] = {table: [] for table in CHILD_TABLES}
    children["transcript_entries"] = transcript
    return SessionRows(session, children)


async def seed(path: Path, sessions: int, entries: int) -> None:
    async with SessionStorage(path, sqlite_synchronous="OFF") as storage:
        layout = storage.table_layout()
        for index in range(sessions):
            rows = _session_rows(layout, index, entries, base=index * entries + 1)
            await storage.insert_session_rows(rows)


async def _admin(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="osq-bench-"))
    source = workdir / "source.db"
    started = time.perf_counter()
    await seed(source, args.sessions, args.entries)
    seeded = time.perf_counter() - started

    name = "osq_bench_" + uuid.uuid4().hex[:12]
    admin = await _admin(args.pg_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    target = make_url(args.pg_url).set(drivername="postgresql+asyncpg", database=name)
    try:
        async with (
            SessionStorage(source) as src,
            SessionStorage(target.render_as_string(False)) as dst,
        ):
            started = time.perf_counter()
            report = await copy_sessions(
                src, dst, batch_size=args.batch_size, jobs=args.jobs, verify=False
            )
            copy_seconds = time.perf_counter() - started
            keys = await src.list_session_keys()
            started = time.perf_counter()
            checks = await verify_copy(src, dst, keys, batch_size=args.batch_size)
            verify_seconds = time.perf_counter() - started
            started = time.perf_counter()
            rerun = await copy_sessions(
                src, dst, batch_size=args.batch_size, jobs=args.jobs, verify=False
            )
            rerun_seconds = time.perf_counter() - started
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    entries = report.rows["transcript_entries"]
    return {
        "sessions": report.copied,
        "entries": entries,
        "batch_size": args.batch_size,
        "jobs": args.jobs,
        "seed_seconds": round(seeded, 2),
        "copy_seconds": round(copy_seconds, 2),
        "sessions_per_second": round(report.copied / copy_seconds, 1),
        "entries_per_second": round(entries / copy_seconds, 1),
        "verify_seconds": round(verify_seconds, 2),
        "verified": all(check.ok for check in checks),
        "rerun_seconds": round(rerun_seconds, 2),
        "rerun_skipped": rerun.skipped,
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=4, help="sessions written at once")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    result = asyncio.run(main(parser.parse_args()))
    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    sys.exit(0 if result["verified"] else 1)


if __name__ == "__main__":
    cli()
