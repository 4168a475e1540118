"""Transcript search (issue 13): search latency, the append overhead of the search objects,
and the online migration that adds them while a writer appends.

    python bench/search.py --backend sqlite|postgres [--quick] [--json PATH]

runs these scenarios alone; ``bench/run.py`` runs them with the rest. The searched rows are
made by the database (:func:`fill_vocabulary`): a common word in 10% of the rows, a rare
word in about ten, a CJK phrase in 1%, and varied filler words in all of them.
"""

# ruff: noqa: S608 (statements built from this file's constants; values are bound)

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import (
    MESSAGE,
    Timings,
    bulk_sessions,
    fresh_target,
    interleaved_p50,
    p50_of,
    settle,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate

HERE = Path(__file__).resolve().parent

COMMON = "deploy"  # in 10% of the rows
RARE = "zyzzyva"  # in about RARE_ROWS rows
RARE_ROWS = 10
CJK = "我们需要通知团队部署缓存"  # in 1% of the rows
CJK_SHORT = "部署"  # two characters: no trigram of its own
CJK_LONG = "通知团队"
TITLE_QUERY = "deploy window"
BEFORE_SEARCH = "0002"  # the revision before the search objects
MARKER = "onlinewriter"  # every row the online-migration writer appends


def plan(quick: bool) -> dict[str, Any]:
    """The sizes of these scenarios (merged into ``run.py``'s plan)."""
    if quick:
        return {
            "search": [20_000],
            "search_titles": 1_000,
            "search_repeats": 5,
            "search_appends": 300,
            "search_append_prefill": 2_000,
            "online_migration": 20_000,
        }
    return {
        "search": [1_000_000],
        "search_titles": 10_000,
        "search_repeats": 11,
        "search_appends": 3_000,
        "search_append_prefill": 100_000,
        "online_migration": 1_000_000,
    }


def _vocabulary_rows(dialect: str) -> str:
    """INSERT ... SELECT of ``:count`` transcript rows made by the database: row
    ``:first + i`` has three filler words of 50,000, :data:`COMMON` when ``i % 10 = 0``,
    :data:`RARE` when ``i % :rare_every = 7`` and :data:`CJK` when ``i % 100 = 3``."""
    columns = (
        "session_id, session_key, message_id, role, content, tool_calls, created_at, "
        "token_count, schema_version"
    )
    if dialect == "postgresql":
        series = "generate_series(CAST(:first AS BIGINT), CAST(:first AS BIGINT) + :count - 1)"
        series += " AS i"
        head = ""
    else:
        series = "seq"
        head = (
            "WITH RECURSIVE seq(i) AS (SELECT CAST(:first AS INTEGER) UNION ALL "
            "SELECT i + 1 FROM seq WHERE i + 1 < :first + :count) "
        )
    content = (
        "'note w' || ((i * 2654435761) % 50000) || ' w' || (((i + 1) * 2654435761) % 50000)"
        " || ' about the plan w' || ((i * 40503) % 50000)"
        f" || CASE WHEN i % 10 = 0 THEN ' {COMMON} it' ELSE '' END"
        f" || CASE WHEN i % :rare_every = 7 THEN ' {RARE}' ELSE '' END"
        f" || CASE WHEN i % 100 = 3 THEN ' {CJK}' ELSE '' END"
    )
    return (
        f"INSERT INTO transcript_entries ({columns}) {head}"
        f"SELECT :session_id, :session_key, 'search-' || i, "
        f"CASE WHEN i % 2 = 1 THEN 'assistant' ELSE 'user' END, {content}, NULL, "
        f"CAST(:start_ms AS BIGINT) + i, 30, 1 FROM {series}"
    )


async def fill_vocabulary(storage: SessionStorage, key: str, session_id: str, count: int) -> None:
    """``count`` rows of the search vocabulary in ``session_id`` (setup, not measured)."""
    batch = 200_000
    insert = sa.text(_vocabulary_rows(storage.engine.dialect.name))
    for start in range(0, count, batch):
        async with storage.engine.begin() as conn:
            await conn.execute(
                insert,
                {
                    "count": min(batch, count - start),
                    "first": start,
                    "rare_every": max(1, count // RARE_ROWS),
                    "session_id": session_id,
                    "session_key": key,
                    "start_ms": 1_700_000_000_000,
                },
            )


async def titled_sessions(storage: SessionStorage, count: int) -> None:
    """``count`` sessions, 1% of them titled with :data:`TITLE_QUERY` (setup)."""
    await bulk_sessions(storage, count, prefix="agent:main:t")
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE sessions SET derived_title = CASE WHEN created_at % 100 = 0 "
                "THEN 'Deploy window for release ' ELSE 'Chat about topic ' END "
                "|| (created_at % 100000)"
            )
        )


async def _at(target: str, revision: str) -> tuple[SessionStorage, SessionManager]:
    """A storage over ``target`` migrated to ``revision`` and left there."""
    storage = SessionStorage(target)
    await storage.connect_without_migrating()
    await migrate.upgrade(storage.engine, revision)
    return storage, SessionManager(storage, inject_time_prefix=False)


async def search(backend: str, size: int, *, titles: int, repeats: int) -> dict[str, float]:
    """The search calls over ``size`` live entries, p50 of interleaved rounds; the rows are
    loaded before the search objects exist and indexed by the upgrade (``index_s``)."""
    async with fresh_target(backend) as target:
        storage, manager = await _at(target, BEFORE_SEARCH)
        try:
            node = await manager.create("agent:main:search")
            await fill_vocabulary(storage, node.session_key, node.session_id, size)
            await titled_sessions(storage, titles)
            start = time.perf_counter()
            await migrate.upgrade(storage.engine, "head")
            index_s = time.perf_counter() - start
            await settle(storage)
            calls: dict[str, Callable[[], Awaitable[Any]]] = {
                "common": lambda: storage.search_transcript(COMMON),
                "rare": lambda: storage.search_transcript(RARE),
                "cjk2": lambda: storage.search_transcript_like(CJK_SHORT),
                "cjk4": lambda: storage.search_transcript_like(CJK_LONG),
                "titles": lambda: storage.search_sessions_by_title(TITLE_QUERY),
            }
            found = {name: len(await call()) for name, call in calls.items()}  # warm-up
            rare = await storage.search_transcript(RARE, limit=100)
            assert len(rare) == RARE_ROWS, len(rare)
            assert found["titles"] > 0 and found["rare"] == 10, found
            assert all(found[name] == 20 for name in ("common", "cjk2", "cjk4")), found
            out = {f"{name}_ms": ms for name, ms in (await interleaved_p50(calls, repeats)).items()}
            out["common_unwindowed_ms"] = await p50_of(
                lambda: storage.search_transcript(COMMON, rank_window=None), 3
            )
            out["index_s"] = index_s
            return out
        finally:
            await storage.close()


# What revision 0003 puts on the live table, which an append feeds: SQLite's FTS5 triggers,
# PostgreSQL's search-vector trigger and GIN indexes.
LIVE_SEARCH_OBJECTS = {
    "sqlite": [f"DROP TRIGGER transcript_fts_{op}" for op in ("ai", "ad", "au")],
    "postgresql": [
        "DROP TRIGGER transcript_entries_search_vector ON transcript_entries",
        "DROP INDEX ix_transcript_entries_search_vector",
        "DROP INDEX ix_transcript_entries_content_trgm",
    ],
}


async def append_overhead(backend: str, prefill: int, n: int) -> dict[str, float]:
    """Append p50 on a head database whose live table lost the search objects and on one
    that has them, the same append path and the same rows in each, in interleaved rounds.
    (A database at 0002 would also append by another path: 0008's one statement.)"""
    async with fresh_target(backend) as plain, fresh_target(backend) as indexed:
        stores = [await _at(plain, "head"), await _at(indexed, "head")]
        async with stores[0][0].engine.begin() as conn:
            for statement in LIVE_SEARCH_OBJECTS[conn.dialect.name]:
                await conn.execute(sa.text(statement))
        try:
            appenders: dict[str, Callable[[], Awaitable[Any]]] = {}
            for name, (storage, manager) in zip(("without", "with"), stores, strict=True):
                node = await manager.create("agent:main:append")
                await fill_vocabulary(storage, node.session_key, node.session_id, prefill)
                await settle(storage)
                appenders[name] = _appender(manager, node.session_key)
            await interleaved_p50(appenders, min(50, n))  # warm-up: statement caches, pools
            p50 = await interleaved_p50(appenders, n)
            return {
                "without_p50_ms": p50["without"],
                "with_p50_ms": p50["with"],
                "ratio": p50["with"] / p50["without"],
            }
        finally:
            for storage, _ in stores:
                await storage.close()


def _appender(manager: SessionManager, key: str) -> Callable[[], Awaitable[Any]]:
    roles = iter(["user", "assistant"] * 10**6)

    def one() -> Awaitable[Any]:
        return manager.append_message(key, next(roles), f"{MESSAGE} {COMMON}", token_count=50)

    return one


_OLD_TOUCH = sa.text(
    "UPDATE sessions SET updated_at = :now, total_tokens = total_tokens + 50 "
    "WHERE session_key = :key"
)
_OLD_INSERT = sa.text(
    "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
    "created_at, token_count) VALUES (:session_id, :key, :message_id, 'user', :content, :now, 50)"
)


@dataclass
class Writer:
    """Appends until told to stop; what each append took and how each ended.

    It writes as a worker of the release the database was at does while the new release
    upgrades it: the entry with the columns revision 0002 has, and the session touch, in one
    transaction (this package's own append writes columns a later revision adds, so it
    runs only against a database at head)."""

    engine: AsyncEngine
    key: str
    session_id: str
    latencies: Timings = field(default_factory=Timings)
    attempted: int = 0
    failures: list[str] = field(default_factory=list)
    # (index, started, ended) of each append that returned, perf_counter seconds
    spans: list[tuple[int, float, float]] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # set after each append

    async def run(self) -> None:
        while not self.stop.is_set():
            index = self.attempted
            self.attempted += 1
            start = time.perf_counter()
            try:
                await self._append(index)
            except Exception as exc:  # the scenario reports failures, it does not stop
                self.failures.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                end = time.perf_counter()
                self.latencies.add(int((end - start) * 1e9))
                self.spans.append((index, start, end))
            self.progress.set()
            await asyncio.sleep(0)

    async def _append(self, index: int) -> None:
        now = int(time.time() * 1000)
        async with self.engine.begin() as conn:
            await conn.execute(_OLD_TOUCH, {"key": self.key, "now": now})
            await conn.execute(
                _OLD_INSERT,
                {
                    "session_id": self.session_id,
                    "key": self.key,
                    "message_id": f"w{index:07d}",
                    "content": f"{MARKER} w{index:07d} {MESSAGE}",
                    "now": now,
                },
            )

    async def until(self, count: int) -> None:
        """Wait until ``count`` more appends have returned."""
        goal = len(self.spans) + count
        while len(self.spans) < goal and len(self.failures) < 100:
            self.progress.clear()
            await self.progress.wait()


async def online_migration(backend: str, size: int) -> dict[str, Any]:
    """A database at 0002 holding ``size`` entries is upgraded to head on one engine while
    a writer appends continuously through another (opened without migrating): the upgrade's
    duration, the writer's appends and longest wait, whether every append is there and
    whether those written during the upgrade are searchable."""
    async with fresh_target(backend) as target:
        storage, manager = await _at(target, BEFORE_SEARCH)
        upgrader = SessionStorage(target)
        checker = SessionStorage(target)
        try:
            node = await manager.create("agent:main:bulk")
            await fill_vocabulary(storage, node.session_key, node.session_id, size)
            await settle(storage)
            writer_node = await manager.create("agent:main:writer")
            await upgrader.connect_without_migrating()
            writer = Writer(storage.engine, writer_node.session_key, writer_node.session_id)
            task = asyncio.create_task(writer.run())
            await writer.until(20)  # the writer is going before the upgrade starts
            before = writer.latencies.samples_ns.copy()
            start = time.perf_counter()
            await migrate.upgrade(upgrader.engine, "head")
            end = time.perf_counter()
            await writer.until(20)  # and after it
            writer.stop.set()
            await task
            during_ns = [int((e - s) * 1e9) for _, s, e in writer.spans if s < end and e > start]
            await checker.connect()  # at head now: no migration runs
            found = await _count(checker, writer_node.session_id, searchable=False)
            searchable = await _count(checker, writer_node.session_id, searchable=True)
            inside = [i for i, s, e in writer.spans if s >= start and e <= end]
            probe = inside[len(inside) // 2] if inside else None
            probe_found = None
            if probe is not None:
                hits = await checker.search_transcript(f"w{probe:07d}", writer_node.session_id)
                probe_found = len(hits) == 1
            return {
                "upgrade_s": end - start,
                "appends_attempted": writer.attempted,
                "appends_failed": len(writer.failures),
                "first_failure": writer.failures[0] if writer.failures else None,
                "rows_found": found,
                "rows_searchable": searchable,
                "appends_during": len(during_ns),
                "appends_inside": len(inside),
                "longest_wait_ms": max(during_ns, default=0) / 1e6,
                "longest_append_ms": max(writer.latencies.samples_ns, default=0) / 1e6,
                "during_p50_ms": Timings(during_ns).p50 if during_ns else 0.0,
                "idle_p50_ms": Timings(before).p50,
                "mid_upgrade_row_searchable": probe_found,
                "lost": writer.attempted - len(writer.failures) - found,
            }
        finally:
            for each in (checker, upgrader, storage):
                await each.close()


async def _count(storage: SessionStorage, session_id: str, *, searchable: bool) -> int:
    if not searchable:
        statement = "SELECT count(*) FROM transcript_entries WHERE session_id = :session_id"
    elif storage.engine.dialect.name == "postgresql":
        statement = (
            "SELECT count(*) FROM transcript_entries WHERE session_id = :session_id "
            f"AND search_vector @@ plainto_tsquery('simple', '{MARKER}')"
        )
    else:
        statement = (
            "SELECT count(*) FROM transcript_fts JOIN transcript_entries e "
            f"ON e.id = transcript_fts.rowid WHERE transcript_fts MATCH '{MARKER}' "
            "AND e.session_id = :session_id"
        )
    async with storage.engine.connect() as conn:
        return int(
            (await conn.execute(sa.text(statement), {"session_id": session_id})).scalar_one()
        )


async def run(backend: str, sizes: dict[str, Any]) -> dict[str, Any]:
    """Every scenario of this file with ``sizes`` (:func:`plan`'s keys): flat results."""
    results: dict[str, Any] = {}
    for size in sizes["search"]:
        found = await search(
            backend, size, titles=sizes["search_titles"], repeats=sizes["search_repeats"]
        )
        for name, value in found.items():
            results[f"search_{size}_{name}"] = value
    overhead = await append_overhead(
        backend, sizes["search_append_prefill"], sizes["search_appends"]
    )
    for name, value in overhead.items():
        results[f"append_search_objects_{name}"] = value
    size = sizes["online_migration"]
    for name, value in (await online_migration(backend, size)).items():
        results[f"online_migration_{size}_{name}"] = value
    return results


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "backend": args.backend,
        "quick": args.quick,
        "results": await run(args.backend, plan(args.quick)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke test)")
    parser.add_argument("--json", type=Path, help="where to write the JSON report")
    arguments = parser.parse_args()
    outcome = asyncio.run(_main(arguments))
    for key, value in outcome["results"].items():
        print(f"{key:60} {value:,.3f}" if isinstance(value, float) else f"{key:60} {value}")
    with contextlib.suppress(OSError):
        path = arguments.json or HERE / "results" / (
            f"search-{arguments.backend}{'-quick' if arguments.quick else ''}.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(outcome, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
