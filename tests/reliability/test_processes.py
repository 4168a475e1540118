"""Several OS processes on one database (one Postgres database, or one SQLite file).

Each worker process (``workers.py``, started with ``spawn``) has its own storage, engine
and pool, and reports what it believes it did; the test then checks the database against
those reports. The overlap each race claims is forced, never hoped for: workers meet at
barriers and wait for events (``sync_manager``) or for the other side's progress to show
in the database, and every test still checks that the race really happened, so a passing
run is not a serial run in disguise, however busy the machine is.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate

from . import workers
from .support import (
    archive_documents,
    in_processes,
    orphan_rows,
    overlapping,
    raw_rows,
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
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    manager: SessionManager,
) -> None:
    """4 processes x 50 appends to one session: every message once, each writer's order
    kept, the token total exact (no lost increment), and the writers interleaved.

    The writers meet at a barrier before every tenth append: each of the 5 rounds starts
    with all 4 appending at once, and none starts before all have committed the last one,
    so every round's 40 rows hold all 4 writers (at least 3 switches per round)."""
    writers, per_writer, every = 4, 50, 10
    rounds = per_writer // every
    await manager.create(KEY)
    round_start = sync_manager.Barrier(writers)
    gates = {n: [round_start] for n in range(0, per_writer, every)}

    results = await in_processes(
        spawn_pool,
        [
            (workers.append_writer, (database, KEY, index, per_writer, gates))
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
    assert switches >= (writers - 1) * rounds, (
        f"only {switches} switches between writers: the rounds did not interleave"
    )
    node = await manager.get_session(KEY)
    assert node is not None
    assert node.total_tokens == per_writer * sum(range(1, writers + 1))


async def test_get_or_create_from_four_processes_has_one_creator_per_key(
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    storage: SessionStorage,
) -> None:
    """4 processes call ``get_or_create`` on the same key at the same moment (a barrier per
    key), for 20 keys: one row per key, exactly one ``created=True`` for each, every caller
    gets that row, nobody errors. For every other key the processes also meet just before
    their insert, having all read "no such row": all 4 inserts race, and 3 must lose."""
    callers = 4
    keys = [f"agent:main:goc-{n:02d}" for n in range(20)]
    colliding = keys[::2]
    start, collide = sync_manager.Barrier(callers), sync_manager.Barrier(callers)

    results = await in_processes(
        spawn_pool,
        [
            (workers.get_or_create_caller, (database, keys, start, collide, colliding))
            for _ in range(callers)
        ],
    )

    _no_errors(results)
    assert await storage.count_sessions() == len(keys)
    for key in keys:
        assert sum(result["created"][key] for result in results) == 1, key
        row = await storage.get_session(key)
        assert row is not None
        assert {result["session_ids"][key] for result in results} == {row.session_id}
    for key in colliding:
        attempts = sum(result["attempts"].get(key, 0) for result in results)
        assert attempts == callers, f"{key}: {attempts} inserts raced, not {callers}"


# -- appends racing resets -----------------------------------------------------------------


async def test_appends_racing_resets_land_in_their_generation_or_are_refused(
    spawn_pool: ProcessPoolExecutor, database: str, manager: SessionManager, tmp_path: Path
) -> None:
    """3 processes append while a 4th resets the key 5 times. Each append is either
    refused as stale (and is nowhere) or is found exactly once: in the live transcript if
    it landed in the current generation, else in the reset archive of its generation.

    Each reset waits until every appender has landed 2 messages in the current generation
    (seen in the database), while they go on appending; append ``n`` waits for reset
    ``n // 8``, so the appends cannot be over before the resets are, and every generation
    a reset retires has appends from every appender."""
    archive_dir = tmp_path / "race-archives"
    first = await manager.create(KEY)

    *appenders, reset = await in_processes(
        spawn_pool,
        [
            *((workers.fenced_appender, (database, KEY, n, 40, 8)) for n in range(3)),
            (workers.resetter, (database, KEY, 5, 3, 2, str(archive_dir))),
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
    assert set(retired) <= generations, "a generation got no appends: the race did not happen"


# -- compaction ----------------------------------------------------------------------------


async def test_appends_racing_compactions_lose_nothing(
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    manager: SessionManager,
) -> None:
    """2 processes append while 2 others keep compacting the same session. The canonical
    transcript keeps every message once, in each writer's order; exactly the compactions
    that reported a commit left a summary, and the session's counters agree.

    Each compactor's first summary is held until an append lands after its read (an
    appended suffix, which the commit keeps live: a held compaction commits unless another
    one removed rows it planned on first, and is then refused as stale), and the writers
    wait for both holds before their second half; the compactors go on until the writers
    are done, then compact once more, so some compaction commits."""
    await manager.create(KEY)
    seeded = [f"seed-{n:02d}" for n in range(10)]
    for content in seeded:
        await manager.append_message(KEY, "user", content, token_count=100)
    summarising = [sync_manager.Event() for _ in range(2)]
    finished = [sync_manager.Event() for _ in range(2)]
    gates = {20: summarising}

    results = await in_processes(
        spawn_pool,
        [
            *(
                (workers.append_writer, (database, KEY, n, 40, gates, 100, finished[n]))
                for n in range(2)
            ),
            *(
                (workers.racing_compactor, (database, KEY, n, 1500, summarising, finished, 0.01))
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
    held = [item for item in attempts if item["held"]]
    assert len(held) == 2, "a compactor was never held mid-summary: the race did not happen"
    # Both held compactions were overtaken by appends, which they keep live and commit
    # past: a held one commits unless another compaction removed rows it planned on first
    # (which one gets there first is up to the scheduler), and nothing else refuses it.
    assert {str(item["skip_reason"]) for item in held} <= {"None", "stale_preimage"}, held
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == len(committed)
    assert node.total_tokens == 100 * (len(seeded) + len(appended))


async def test_two_compactions_in_two_processes_commit_once(
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    manager: SessionManager,
) -> None:
    """Both read the same transcript and summarise at the same time (they meet at a barrier
    inside the summariser): one commits, the other finds the transcript changed and
    writes nothing."""
    await manager.create(KEY)
    seeded = [f"seed-{n:02d}" for n in range(12)]
    for content in seeded:
        await manager.append_message(KEY, "user", content, token_count=100)
    both_summarising = sync_manager.Barrier(2)

    results = await in_processes(
        spawn_pool,
        [
            (workers.rendezvous_compactor, (database, KEY, n, 1000, both_summarising))
            for n in range(2)
        ],
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
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    storage: SessionStorage,
) -> None:
    """3 processes create, append to and fork sessions while a 4th prunes and caps until
    they are done. Afterwards no row belongs to a deleted session, and every surviving
    session holds every row it was acknowledged to have (a fork holds its whole copy).

    Retention starts once the database shows that every writer has forked 2 sessions;
    the writers go on until both pruning and capping have deleted something and each has
    then written one more session: every deletion race happens while all of them write."""
    writers_count, prefix = 3, "agent:main:churn"
    deleted = sync_manager.Event()
    finished = [sync_manager.Event() for _ in range(writers_count)]

    *writers, retention = await in_processes(
        spawn_pool,
        [
            *(
                (workers.churn_writer, (database, prefix, n, 8, 6, deleted, finished[n]))
                for n in range(writers_count)
            ),
            (
                workers.retention_runner,
                (database, prefix, writers_count, 2, 6, deleted, finished, 0.01),
            ),
        ],
    )

    _no_errors([*writers, retention])
    assert retention["pruned"] > 0, "pruning never deleted anything"
    assert retention["capped"] > 0, "capping never deleted anything"
    first_deletion = min(retention["deletion_times"])
    for writer in writers:
        assert writer["first"] < first_deletion < writer["last"], (
            "a deletion did not happen while every writer was writing"
        )
        assert writer["written_after_deletion"] >= 1

    assert await orphan_rows(storage) == {}
    assert await token_mismatches(storage) == []
    manager = SessionManager(storage, inject_time_prefix=False)
    expected: dict[tuple[str, str], list[str]] = {}
    for writer in writers:
        for ack in writer["acked"]:
            expected.setdefault((ack["key"], ack["session_id"]), []).append(ack["content"])
        for fork in writer["forks"]:
            expected[fork["key"], fork["session_id"]] = fork["contents"]
    # The newest session at least survives: capping keeps it, and it was touched after the
    # prune cut-off (each writer's last session started after the first deletion).
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
    versions = await raw_rows(target, "SELECT version_num FROM opensquilla_session_version")
    assert [v for (v,) in versions] == list(migrate.head_revisions())


def _connecting(target: str, sync_manager: SyncManager, processes: int = 4) -> list[Any]:
    """``connect_worker`` calls that start together and that all find the schema behind
    before any of them migrates (they meet just before taking the migration lock)."""
    start, contend = sync_manager.Barrier(processes), sync_manager.Barrier(processes)
    return [(workers.connect_worker, (target, start, contend)) for _ in range(processes)]


async def test_four_processes_connecting_to_an_empty_database_migrate_once(
    spawn_pool: ProcessPoolExecutor, sync_manager: SyncManager, empty_database: str
) -> None:
    """All four find the database empty and go for the migration lock together: one
    migrates, the others wait for it and find the schema at head."""
    results = await in_processes(spawn_pool, _connecting(empty_database, sync_manager))

    assert [r["error"] for r in results] == [None] * 4
    assert [r["upgrades"] for r in results] == [1] * 4
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
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    backend: Any,
    empty_database: str,
    tmp_path: Path,
) -> None:
    """Workers starting at once on a database the older store wrote, all going for the
    migration lock together: one adopts it, the others wait and find it at head; no row,
    trigger or foreign table is lost."""
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

    results = await in_processes(spawn_pool, _connecting(target, sync_manager))

    assert [r["error"] for r in results] == [None] * 4
    assert [r["upgrades"] for r in results] == [1] * 4
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
        # Every trigger is kept as it was; revision 0003 adds the archive's FTS triggers,
        # 0007 those keeping its counts, 0008 the append view's.
        assert set(triggers) <= set(after)
        assert {name for name, _ in set(after) - set(triggers)} == {
            "compacted_transcript_fts_ai",
            "compacted_transcript_fts_ad",
            "compacted_transcript_fts_au",
            "canonical_archive_counts_ai",
            "canonical_archive_counts_ad",
            "canonical_archive_counts_au",
            "transcript_appends_insert",
        }
        # The older store's full-text index is still fed by its triggers.
        ((indexed,),) = await raw_rows(target, "SELECT COUNT(*) FROM transcript_fts")
        assert indexed == counts["transcript_entries"] + 4
        assert await raw_rows(target, "PRAGMA integrity_check") == [("ok",)]
    async with SessionStorage(target) as storage:
        assert (await migrate.check(storage.engine)).ok


# -- load ----------------------------------------------------------------------------------


async def test_busy_writers_in_four_processes_never_see_a_lock_error(
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    storage: SessionStorage,
) -> None:
    """4 processes x 4 coroutines of short write transactions (appends, updates, states,
    forks, finishes) plus reads: on SQLite every writer waits its turn instead of failing
    with "database is locked"; on both backends nothing errors and nothing is lost. The
    processes start together and all 16 coroutines meet halfway, so all are busy at once."""
    processes, tasks, rounds = 4, 4, 8
    start, middle = sync_manager.Barrier(processes), sync_manager.Barrier(processes * tasks)

    results = await in_processes(
        spawn_pool,
        [
            (workers.mixed_load, (database, n, tasks, rounds, start, middle))
            for n in range(processes)
        ],
    )

    errors = [error for r in results for error in r["errors"]]
    assert not [e for e in errors if "locked" in e.lower() or "busy" in e.lower()], errors
    assert errors == []
    assert overlapping([(r["first"], r["last"]) for r in results])
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
