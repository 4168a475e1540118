"""Several OS processes on one database (one Postgres database, or one SQLite file).

Each worker process (``workers.py``, started with ``spawn``) has its own storage, engine
and pool, and reports what it believes it did; the test then checks the database against
those reports. Races are started together (``start_at``) and every test checks that they
really overlapped, so a passing run is not a serial run in disguise.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage, migrate

from . import workers
from .support import (
    archive_documents,
    in_processes,
    orphan_rows,
    overlapping,
    raw_rows,
    start_soon,
    token_mismatches,
)

KEY = "agent:main:shared"
LEGACY_DIR = Path(
    os.environ.get(
        "OPENSQUILLA_LEGACY_FIXTURES",
        str(Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "legacy"),
    )
)
LEGACY_FILE = LEGACY_DIR / "sessions-2026-07.sqlite"


def _legacy_row_counts() -> dict[str, int]:
    """Row counts of the legacy file, from its manifest (computed without our code)."""
    manifest = json.loads(Path(f"{LEGACY_FILE}.manifest.json").read_text(encoding="utf-8"))
    counts = {table: info["row_count"] for table, info in manifest["tables"].items()}
    counts["agent_tasks"] = manifest["other_table_row_counts"]["agent_tasks"]
    return counts


def _no_errors(results: list[dict[str, Any]]) -> None:
    errors = [error for result in results for error in result["errors"]]
    assert errors == [], errors


# -- appends -------------------------------------------------------------------------------


async def test_appends_from_four_processes_are_all_kept_exactly_once(
    spawn_pool: ProcessPoolExecutor, database: str, manager: SessionManager
) -> None:
    """4 processes x 50 appends to one session: every message once, each writer's order
    kept, the token total exact (no lost increment), and the writers interleaved."""
    writers, per_writer = 4, 50
    await manager.create(KEY)
    start_at = start_soon()

    results = await in_processes(
        spawn_pool,
        [
            (workers.append_writer, (database, KEY, index, per_writer, start_at))
            for index in range(writers)
        ],
    )

    _no_errors(results)
    assert overlapping([(r["first"], r["last"]) for r in results])
    transcript = await manager.get_transcript(KEY)
    contents = [entry.content or "" for entry in transcript]
    assert len(contents) == writers * per_writer
    assert Counter(contents) == Counter(
        content for result in results for content, _, _ in result["done"]
    )
    assert max(Counter(contents).values()) == 1
    reported_ids = {content: row_id for r in results for content, row_id, _ in r["done"]}
    assert {entry.content: entry.id for entry in transcript} == reported_ids
    for index in range(writers):
        own = [c for c in contents if c.startswith(f"w{index}-")]
        assert own == [f"w{index}-{n:03d}" for n in range(per_writer)]
    switches = sum(1 for a, b in itertools.pairwise(contents) if a[:2] != b[:2])
    assert switches >= writers, "the writers never interleaved: the race did not happen"
    node = await manager.get_session(KEY)
    assert node is not None
    assert node.total_tokens == per_writer * sum(range(1, writers + 1))


async def test_get_or_create_from_four_processes_has_one_creator_per_key(
    spawn_pool: ProcessPoolExecutor, database: str, storage: SessionStorage
) -> None:
    """4 processes call ``get_or_create`` on the same key at the same moment, for 20 keys:
    one row per key, exactly one ``created=True`` for each, every caller gets that row,
    nobody errors."""
    keys = [f"agent:main:goc-{n:02d}" for n in range(20)]
    start_at = start_soon()

    results = await in_processes(
        spawn_pool,
        [(workers.get_or_create_caller, (database, keys, start_at, 0.04)) for _ in range(4)],
    )

    _no_errors(results)
    assert await storage.count_sessions() == len(keys)
    raced = 0
    for key in keys:
        assert sum(result["created"][key] for result in results) == 1, key
        row = await storage.get_session(key)
        assert row is not None
        assert {result["session_ids"][key] for result in results} == {row.session_id}
        if sum(result["attempts"].get(key, 0) for result in results) > 1:
            raced += 1
    assert raced > 0, "no key saw two processes try to insert it: nothing raced"


# -- appends racing resets -----------------------------------------------------------------


async def test_appends_racing_resets_land_in_their_generation_or_are_refused(
    spawn_pool: ProcessPoolExecutor, database: str, manager: SessionManager, tmp_path: Path
) -> None:
    """3 processes append while a 4th resets the key 5 times. Each append is either
    refused as stale (and is nowhere) or is found exactly once: in the live transcript if
    it landed in the current generation, else in the reset archive of its generation."""
    archive_dir = tmp_path / "race-archives"
    first = await manager.create(KEY)
    start_at = start_soon()

    *appenders, reset = await in_processes(
        spawn_pool,
        [
            *((workers.fenced_appender, (database, KEY, n, 40, 0.01, start_at)) for n in range(3)),
            (workers.resetter, (database, KEY, 5, 0.12, start_at, str(archive_dir))),
        ],
    )

    _no_errors([*appenders, reset])
    assert len(reset["generations"]) == 5
    node = await manager.get_session(KEY)
    assert node is not None and node.epoch == 5
    assert node.session_id == reset["generations"][-1]
    retired = [first.session_id, *reset["generations"][:-1]]

    where: Counter[tuple[str, str]] = Counter()  # (session id, message id) -> copies found
    for entry in await manager.get_canonical_transcript(KEY):
        where[node.session_id, entry.message_id] += 1
    documents = archive_documents(archive_dir)
    assert {d["session_id"] for d in documents} <= set(retired)
    for document in documents:
        for entry in document["transcript_entries"]:
            where[document["session_id"], entry["message_id"]] += 1
    contents_found = Counter(
        entry["content"] for d in documents for entry in d["transcript_entries"]
    ) + Counter(e.content for e in await manager.get_canonical_transcript(KEY))

    outcomes = [outcome for result in appenders for outcome in result["outcomes"]]
    assert len(outcomes) == 3 * 40
    landed = [o for o in outcomes if o["status"] == "ok"]
    for outcome in landed:
        assert where[outcome["session_id"], outcome["message_id"]] == 1, outcome
    for outcome in outcomes:
        expected = 1 if outcome["status"] == "ok" else 0
        assert contents_found[outcome["content"]] == expected, outcome
    assert sum(where.values()) == len(landed), "something no writer acknowledged was stored"
    generations = {o["session_id"] for o in landed}
    assert len(generations) >= 2, "no append landed on both sides of a reset"


# -- compaction ----------------------------------------------------------------------------


async def test_appends_racing_compactions_lose_nothing(
    spawn_pool: ProcessPoolExecutor, database: str, manager: SessionManager
) -> None:
    """2 processes append while 2 others compact the same session with a slow summariser.
    The canonical transcript keeps every message once, in each writer's order; exactly the
    compactions that reported a commit left a summary; some were refused as stale."""
    await manager.create(KEY)
    seeded = [f"seed-{n:02d}" for n in range(10)]
    for content in seeded:
        await manager.append_message(KEY, "user", content, token_count=100)
    start_at = start_soon()

    results = await in_processes(
        spawn_pool,
        [
            *((workers.append_writer, (database, KEY, n, 40, start_at, 100)) for n in range(2)),
            *(
                (workers.compactor, (database, KEY, n, 6, 1500, 0.02, 0.05, start_at, 20))
                for n in range(2)
            ),
        ],
    )

    _no_errors(results)
    writers, compactors = results[:2], results[2:]
    canonical = [e.content or "" for e in await manager.get_canonical_transcript(KEY)]
    appended = [content for r in writers for content, _, _ in r["done"]]
    assert len(appended) == 80
    assert Counter(canonical) == Counter(seeded + appended)
    for index in range(2):
        own = [c for c in canonical if c.startswith(f"w{index}-")]
        assert own == [f"w{index}-{n:03d}" for n in range(40)]

    attempts = [item for r in compactors for item in r["results"]]
    committed = {item["compaction_id"] for item in attempts if item["committed"]}
    summaries = await manager.get_summaries(KEY)
    ids = [summary.compaction_id for summary in summaries]
    assert sorted(ids) == sorted(committed)
    assert committed, "no compaction ever committed"
    assert any(item["skip_reason"] == "stale_preimage" for item in attempts), (
        "no compaction was overtaken by a write: the race did not happen"
    )
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == len(committed)
    assert node.total_tokens == 100 * (len(seeded) + len(appended))


async def test_two_compactions_in_two_processes_commit_once(
    spawn_pool: ProcessPoolExecutor, database: str, manager: SessionManager
) -> None:
    """Both read the same transcript and summarise at the same time: one commits, the
    other finds the transcript changed and writes nothing."""
    await manager.create(KEY)
    seeded = [f"seed-{n:02d}" for n in range(12)]
    for content in seeded:
        await manager.append_message(KEY, "user", content, token_count=100)
    start_at = start_soon()

    results = await in_processes(
        spawn_pool,
        [(workers.compactor, (database, KEY, n, 1, 1000, 0.15, 0.0, start_at)) for n in range(2)],
    )

    _no_errors(results)
    attempts = [item for r in results for item in r["results"]]
    assert sorted(str(item["skip_reason"]) for item in attempts) == ["None", "stale_preimage"]
    (winner,) = [item["compaction_id"] for item in attempts if item["committed"]]
    assert [s.compaction_id for s in await manager.get_summaries(KEY)] == [winner]
    assert [e.content for e in await manager.get_canonical_transcript(KEY)] == seeded
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1


# -- retention racing appends and branches -------------------------------------------------


async def test_retention_racing_writers_removes_whole_sessions_only(
    spawn_pool: ProcessPoolExecutor, database: str, storage: SessionStorage, tmp_path: Path
) -> None:
    """3 processes create, append to and fork sessions while a 4th caps and prunes until
    they are done. Afterwards no row belongs to a deleted session, and every surviving
    session holds every row it was acknowledged to have (a fork holds its whole copy)."""
    flags = [str(tmp_path / f"writer-{n}.done") for n in range(3)]
    start_at = start_soon()

    *writers, retention = await in_processes(
        spawn_pool,
        [
            *(
                (
                    workers.churn_writer,
                    (database, "agent:main:churn", n, 8, 6, start_at, flags[n]),
                )
                for n in range(3)
            ),
            (workers.retention_runner, (database, flags, 6, 150, 0.04, start_at)),
        ],
    )

    _no_errors([*writers, retention])
    assert retention["capped"] + retention["pruned"] > 0, "retention never deleted anything"
    first = min(w["first"] for w in writers)
    last = max(w["last"] for w in writers)
    assert any(first <= t <= last for t in retention["deletion_times"]), (
        "no deletion happened while the writers were writing"
    )

    assert await orphan_rows(storage) == {}
    assert await token_mismatches(storage) == []
    manager = SessionManager(storage, inject_time_prefix=False)
    expected: dict[tuple[str, str], list[str]] = {}
    for writer in writers:
        for ack in writer["acked"]:
            expected.setdefault((ack["key"], ack["session_id"]), []).append(ack["content"])
        for fork in writer["forks"]:
            expected[fork["key"], fork["session_id"]] = fork["contents"]
    survivors = 0
    for (key, session_id), contents in expected.items():
        row = await storage.get_session(key)
        if row is None:
            continue  # deleted as a whole: the orphan check above covers its rows
        assert row.session_id == session_id, key
        canonical = [e.content for e in await manager.get_canonical_transcript(key)]
        assert canonical == contents, key
        survivors += 1
    assert survivors > 0, "every session was deleted: nothing left to check for wholeness"


# -- connect and migrate -------------------------------------------------------------------


def _migrators(results: list[dict[str, Any]]) -> list[int]:
    return [r["pid"] for r in results if r["schema_statements"]]


async def _assert_at_head_once(target: str) -> None:
    versions = await raw_rows(target, "SELECT version_num FROM alembic_version")
    assert [v for (v,) in versions] == list(migrate.head_revisions())


async def test_four_processes_connecting_to_an_empty_database_migrate_once(
    spawn_pool: ProcessPoolExecutor, empty_database: str
) -> None:
    start_at = start_soon()

    results = await in_processes(
        spawn_pool, [(workers.connect_worker, (empty_database, start_at)) for _ in range(4)]
    )

    assert [r["error"] for r in results] == [None] * 4
    assert overlapping([(r["began"], r["ended"]) for r in results])
    assert len(_migrators(results)) == 1, [r["schema_statements"][:3] for r in results]
    await _assert_at_head_once(empty_database)
    async with SessionStorage(empty_database) as storage:
        assert await storage.count_sessions() == 4
        assert (await migrate.check(storage.engine)).ok


LEGACY_PG_TABLES = (
    """
    CREATE TABLE sessions (
        session_key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        total_tokens BIGINT NOT NULL DEFAULT 0,
        status TEXT NOT NULL DEFAULT 'running',
        agent_id TEXT NOT NULL DEFAULT 'main',
        epoch BIGINT NOT NULL DEFAULT 0
    )
    """,
    """
    CREATE TABLE transcript_entries (
        id BIGSERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        session_key TEXT NOT NULL,
        message_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT,
        tool_calls JSONB,
        created_at BIGINT NOT NULL,
        token_count BIGINT,
        schema_version INTEGER NOT NULL DEFAULT 1
    )
    """,
    "CREATE TABLE agent_tasks (task_id TEXT PRIMARY KEY, session_key TEXT NOT NULL)",
    *(
        f"INSERT INTO sessions (session_key, session_id, created_at, updated_at, total_tokens)"
        f" VALUES ('agent:main:old-{n}', 'sid-old-{n}', 1750000000000, 1750000000000, 7)"
        for n in range(5)
    ),
    *(
        "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content,"
        f" created_at, token_count) VALUES ('sid-old-{n % 5}', 'agent:main:old-{n % 5}',"
        f" 'm-{n}', 'user', 'legacy line {n}', {1750000000000 + n}, 1)"
        for n in range(20)
    ),
    "INSERT INTO agent_tasks VALUES ('task-1', 'agent:main:old-0')",
)


async def _legacy_database(backend: Any, empty_database: str, tmp_path: Path) -> str:
    if backend.is_postgres:
        import asyncpg

        from .support import asyncpg_dsn

        conn = await asyncpg.connect(asyncpg_dsn(empty_database))
        try:
            async with conn.transaction():
                for statement in LEGACY_PG_TABLES:
                    await conn.execute(statement)
        finally:
            await conn.close()
        return empty_database
    if not LEGACY_FILE.is_file():
        if os.environ.get("CI"):
            raise FileNotFoundError(LEGACY_FILE)
        pytest.skip(f"legacy fixture not present: {LEGACY_FILE}")
    copy = tmp_path / "legacy.sqlite"
    shutil.copyfile(LEGACY_FILE, copy)
    os.chmod(copy, 0o600)
    return str(copy)


async def test_four_processes_connecting_to_a_legacy_database_adopt_it_once(
    spawn_pool: ProcessPoolExecutor, backend: Any, empty_database: str, tmp_path: Path
) -> None:
    """Workers starting at once on a database the older store wrote: one adopts it, the
    others wait and find it at head; no row, trigger or foreign table is lost."""
    target = await _legacy_database(backend, empty_database, tmp_path)
    if backend.is_postgres:
        counts = {"sessions": 5, "transcript_entries": 20, "agent_tasks": 1}
        triggers: list[tuple[Any, ...]] = []
    else:
        counts = _legacy_row_counts()
        triggers = await raw_rows(
            target, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        )
        assert triggers, "the legacy fixture should carry triggers"
    start_at = start_soon()

    results = await in_processes(
        spawn_pool, [(workers.connect_worker, (target, start_at)) for _ in range(4)]
    )

    assert [r["error"] for r in results] == [None] * 4
    assert overlapping([(r["began"], r["ended"]) for r in results])
    assert len(_migrators(results)) == 1
    await _assert_at_head_once(target)
    for table, count in counts.items():
        added = 4 if table in ("sessions", "transcript_entries") else 0
        ((found,),) = await raw_rows(target, f"SELECT COUNT(*) FROM {table}")
        assert found == count + added, table
    if not backend.is_postgres:
        after = await raw_rows(
            target, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        )
        assert after == triggers
        # The older store's full-text index is still fed by its triggers.
        ((indexed,),) = await raw_rows(target, "SELECT COUNT(*) FROM transcript_fts")
        assert indexed == counts["transcript_entries"] + 4
        assert await raw_rows(target, "PRAGMA integrity_check") == [("ok",)]
    async with SessionStorage(target) as storage:
        assert (await migrate.check(storage.engine)).ok


# -- load ----------------------------------------------------------------------------------


async def test_busy_writers_in_four_processes_never_see_a_lock_error(
    spawn_pool: ProcessPoolExecutor, database: str, storage: SessionStorage
) -> None:
    """4 processes x 4 coroutines of short write transactions (appends, updates, states,
    forks, finishes) plus reads: on SQLite every writer waits its turn instead of failing
    with "database is locked"; on both backends nothing errors and nothing is lost."""
    processes, tasks, rounds = 4, 4, 8
    start_at = start_soon()

    results = await in_processes(
        spawn_pool,
        [(workers.mixed_load, (database, n, tasks, rounds, start_at)) for n in range(processes)],
    )

    errors = [error for r in results for error in r["errors"]]
    assert not [e for e in errors if "locked" in e.lower() or "busy" in e.lower()], errors
    assert errors == []
    assert await storage.count_sessions() == processes * tasks * 2
    assert await orphan_rows(storage) == {}
    manager = SessionManager(storage, inject_time_prefix=False)
    for worker in range(processes):
        for index in range(tasks):
            key = f"agent:main:mixed-{worker}-{index}"
            expected = [f"{key}#{n}" for n in range(rounds)]
            assert [e.content for e in await manager.get_transcript(key)] == expected
            assert [e.content for e in await manager.get_transcript(f"{key}:child")] == expected
            node = await manager.get_session(key)
            assert node is not None and node.status == "done" and node.total_tokens == rounds
