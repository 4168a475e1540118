"""Soak test: many worker processes, a mixed workload, then a whole-database audit.

    python bench/soak.py --backend sqlite|postgres --workers K --seconds S [--dsn DSN]
                         [--server URL] [--keys N] [--seed N] [--json]

K worker processes (``multiprocessing``, spawn) share one database: a fresh temporary
SQLite file, a fresh database on the Postgres server ``--server`` (default
``$OPENSQUILLA_TEST_DATABASE_URL``, ``$BENCH_POSTGRES_URL`` or the local server), or the
database ``--dsn`` names (left in place). For S seconds each worker picks operations at
random on a small shared set of session keys: append (most of the time), branch (full fork
or not), compact, reset (``RESET_SAME_KEY``), and cap or prune. Reset archives go to a
temporary ``OPENSQUILLA_SESSION_ARCHIVE_DIR``.

Every worker keeps a ledger: each append it saw commit (with the generation it landed in),
each append refused as stale, each compaction that committed, each reset, and each session
generation its cap/prune calls deleted (recorded by wrapping the store's cascade delete:
test instrumentation, not an API). The audit then checks the whole database:

* every committed append is in the live or compacted transcript of its generation, in the
  reset archive file of its generation, or belongs to a generation cap/prune deleted; an
  append found nowhere is **lost**; one found twice is a duplicate;
* no stale (refused) append is stored anywhere;
* no row belongs to a session that does not exist (orphans);
* ``total_tokens`` of every session equals the token counts of its transcript (live plus
  compacted; forked children start at 0 and are skipped);
* every stored summary comes from a compaction a worker saw commit, once per generation.

It prints operations done, operations per second, errors by type and ``lost=N``; the exit
status is non-zero if anything was lost, an invariant failed or an unexpected error
occurred.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    SessionExistsError,
    SessionNotFoundError,
    StaleEpochError,
)

ARCHIVE_DIR_ENV = "OPENSQUILLA_SESSION_ARCHIVE_DIR"
DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
OPERATIONS = {"append": 64, "branch": 8, "compact": 14, "reset": 3, "retention": 4}
# Refusals a correct store gives this workload when workers race: not failures.
EXPECTED_REFUSALS = (StaleEpochError, SessionNotFoundError, SessionExistsError)


# -- worker process ------------------------------------------------------------------------


def _track_deletions(deleted: list[tuple[str, str]]) -> None:
    """Record every (key, session id) the store's cascade delete removes in this process."""
    from opensquilla.session.db.repos.sessions import SessionRepository
    from opensquilla.session.db.tables import sessions as table

    original = SessionRepository.delete_cascade

    async def tracked(
        repo: SessionRepository, keys: Any, *, updated_before: int | None = None
    ) -> list[str]:
        ids: dict[str, str] = {}
        if keys:
            query = (
                sa.select(table.c.session_key, table.c.session_id)
                .where(table.c.session_key.in_(list(keys)))
                .with_for_update()
            )
            ids = {row.session_key: row.session_id for row in await repo.conn.execute(query)}
        gone = await original(repo, keys, updated_before=updated_before)
        deleted.extend((key, ids[key]) for key in gone)
        return list(gone)

    SessionRepository.delete_cascade = tracked  # type: ignore[method-assign]


def worker_main(
    target: str, worker: int, seconds: float, seed: int, keys: list[str], ledger_path: str
) -> None:
    ledger = asyncio.run(_worker(target, worker, seconds, seed, keys))
    Path(ledger_path).write_text(json.dumps(ledger), encoding="utf-8")


async def _worker(
    target: str, worker: int, seconds: float, seed: int, keys: list[str]
) -> dict[str, Any]:
    rng = random.Random(seed * 1000 + worker)
    deleted: list[tuple[str, str]] = []
    _track_deletions(deleted)
    ledger: dict[str, Any] = {
        "appends": [],
        "stale": [],
        "compactions": [],
        "resets": [],
        "deleted": deleted,
        "ops": Counter(),
        "errors": Counter(),
        "unexpected": [],
    }
    names, weights = list(OPERATIONS), list(OPERATIONS.values())
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        deadline = time.monotonic() + seconds
        sequence = 0
        while time.monotonic() < deadline:
            sequence += 1
            name = rng.choices(names, weights)[0]
            key = rng.choice(keys)
            try:
                await _operation(manager, name, key, worker, sequence, rng, ledger, len(keys))
            except EXPECTED_REFUSALS as exc:
                ledger["errors"][type(exc).__name__] += 1
            except Exception as exc:
                ledger["errors"][type(exc).__name__] += 1
                ledger["unexpected"].append(f"{name} on {key}: {type(exc).__name__}: {exc}"[:300])
            ledger["ops"][name] += 1
    return ledger


async def _operation(
    manager: SessionManager,
    name: str,
    key: str,
    worker: int,
    sequence: int,
    rng: random.Random,
    ledger: dict[str, Any],
    key_count: int,
) -> None:
    tag = f"w{worker}-{sequence}"
    if name == "append":
        content = f"{tag} " + "lorem ipsum " * rng.randint(0, 12)
        tokens = rng.randint(20, 300)
        role = rng.choice(("user", "assistant"))
        try:
            try:
                entry = await manager.append_message(key, role, content, token_count=tokens)
            except SessionNotFoundError:  # retention deleted it: start it again
                await manager.get_or_create(key)
                ledger["ops"]["create"] += 1
                entry = await manager.append_message(key, role, content, token_count=tokens)
        except StaleEpochError:
            ledger["stale"].append(content)
            raise
        ledger["appends"].append(
            {
                "key": key,
                "session_id": entry.session_id,
                "message_id": entry.message_id,
                "content": content,
            }
        )
    elif name == "branch":
        await manager.branch(key, f"{key}:{tag}", fork_transcript=rng.random() < 0.7)
    elif name == "compact":
        compaction_id = f"cmp-{tag}"
        window = rng.choice((400, 800, 1600))
        result = await manager.compact_with_result(key, window, compaction_id=compaction_id)
        if result.removed_count > 0 and result.skip_reason is None:
            ledger["compactions"].append({"key": key, "compaction_id": compaction_id})
    elif name == "reset":
        report = await manager.reset_with_report(key)
        ledger["resets"].append(
            {
                "key": key,
                "old": report.previous_session_id,
                "new": report.session.session_id,
                "archive": str(report.archive_path) if report.archive_path else None,
            }
        )
    elif name == "retention":
        if rng.random() < 0.5:
            await manager.cap_entries(rng.randint(key_count + 1, 3 * key_count))
        else:
            await manager.prune_stale(rng.choice((300, 1000)))


# -- audit ---------------------------------------------------------------------------------


async def _rows(storage: SessionStorage, query: str) -> list[Any]:
    async with storage.engine.connect() as conn:
        return list(await conn.execute(sa.text(query)))


def _archives(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(directory.glob("*.json"))
        if not path.name.startswith(".")
    ]


async def audit(
    target: str, archive_dir: Path, ledgers: list[dict[str, Any]]
) -> tuple[int, dict[str, Any]]:
    """``(lost, report)`` for the database against the workers' ledgers."""
    async with SessionStorage(target) as storage:
        sessions = await _rows(
            storage,
            "SELECT session_key, session_id, total_tokens, forked_from_parent FROM sessions",
        )
        live = await _rows(
            storage, "SELECT session_id, message_id, content, token_count FROM transcript_entries"
        )
        compacted = await _rows(
            storage,
            "SELECT session_id, message_id, content, token_count FROM compacted_transcript_entries",
        )
        summaries = await _rows(storage, "SELECT session_id, compaction_id FROM session_summaries")
        orphan_queries = {
            "transcript_entries": "SELECT COUNT(*) FROM transcript_entries WHERE session_id "
            "NOT IN (SELECT session_id FROM sessions)",
            "compacted_transcript_entries": "SELECT COUNT(*) FROM compacted_transcript_entries "
            "WHERE session_id NOT IN (SELECT session_id FROM sessions)",
            "session_summaries": "SELECT COUNT(*) FROM session_summaries WHERE session_id "
            "NOT IN (SELECT session_id FROM sessions)",
            "session_context_states": "SELECT COUNT(*) FROM session_context_states WHERE "
            "session_key NOT IN (SELECT session_key FROM sessions)",
        }
        orphans = {
            table: (await _rows(storage, query))[0][0] for table, query in orphan_queries.items()
        }

    current = {row.session_id for row in sessions}
    stored: Counter[tuple[str, str]] = Counter()
    tokens: Counter[str] = Counter()
    contents: set[str] = set()
    for row in [*live, *compacted]:
        stored[row.session_id, row.message_id] += 1
        tokens[row.session_id] += row.token_count or 0
        contents.add(row.content or "")
    archived: Counter[tuple[str, str]] = Counter()
    archived_summaries: set[str] = set()
    for document in _archives(archive_dir):
        for entry in document["transcript_entries"]:
            archived[document["session_id"], entry["message_id"]] += 1
            contents.add(entry.get("content") or "")
        archived_summaries.update(s.get("compaction_id") or "" for s in document["summaries"])

    reset_generations = {r["old"] for ledger in ledgers for r in ledger["resets"]}
    deleted_generations = {sid for ledger in ledgers for _, sid in ledger["deleted"]}
    places: Counter[str] = Counter()
    lost_examples: list[dict[str, Any]] = []
    duplicates = 0
    for ledger in ledgers:
        for append in ledger["appends"]:
            where = (append["session_id"], append["message_id"])
            copies = stored[where] + archived[where]
            if copies > 1:
                duplicates += 1
            if stored[where] and append["session_id"] in current:
                places["live_or_compacted"] += 1
            elif archived[where]:
                places["reset_archive"] += 1
            elif append["session_id"] in deleted_generations and not stored[where]:
                places["deleted_session"] += 1
            else:
                places["lost"] += 1
                if len(lost_examples) < 5:
                    lost_examples.append(
                        {
                            **append,
                            "generation_reset": append["session_id"] in reset_generations,
                            "generation_current": append["session_id"] in current,
                        }
                    )
    stale_present = sum(1 for ledger in ledgers for c in ledger["stale"] if c in contents)
    token_mismatches = [
        row.session_key
        for row in sessions
        if not row.forked_from_parent and row.total_tokens != tokens[row.session_id]
    ]
    committed = {c["compaction_id"] for ledger in ledgers for c in ledger["compactions"]}
    stored_ids = Counter(row.compaction_id for row in summaries)
    phantom_summaries = sorted(cid for cid in stored_ids if cid not in committed)
    # A full fork copies its parent's summaries, so an id may repeat across sessions; within
    # one generation it may not.
    per_generation = Counter((row.session_id, row.compaction_id) for row in summaries)
    duplicate_summaries = sorted(cid for (_, cid), n in per_generation.items() if n > 1)
    deleted_keys = {key for ledger in ledgers for key, _ in ledger["deleted"]}
    unaccounted_compactions = sorted(
        c["compaction_id"]
        for ledger in ledgers
        for c in ledger["compactions"]
        if c["compaction_id"] not in stored_ids
        and c["compaction_id"] not in archived_summaries
        and c["key"] not in deleted_keys
    )
    report = {
        "appends_committed": sum(len(ledger["appends"]) for ledger in ledgers),
        "appends_stale": sum(len(ledger["stale"]) for ledger in ledgers),
        "accounted": dict(places),
        "lost_examples": lost_examples,
        "duplicates": duplicates,
        "stale_present": stale_present,
        "orphans": {table: n for table, n in orphans.items() if n},
        "token_mismatches": token_mismatches[:10],
        "phantom_summaries": phantom_summaries[:10],
        "duplicate_summaries": duplicate_summaries[:10],
        "unaccounted_compactions": unaccounted_compactions[:10],
        "sessions_now": len(sessions),
        "resets": len(reset_generations),
        "generations_deleted": len(deleted_generations),
        "compactions_committed": len(committed),
    }
    return places["lost"], report


def invariant_failures(report: dict[str, Any]) -> list[str]:
    checks = {
        "duplicates": report["duplicates"],
        "stale_present": report["stale_present"],
        "orphans": report["orphans"],
        "token_mismatches": report["token_mismatches"],
        "phantom_summaries": report["phantom_summaries"],
        "duplicate_summaries": report["duplicate_summaries"],
        "unaccounted_compactions": report["unaccounted_compactions"],
    }
    return [f"{name}={value}" for name, value in checks.items() if value]


# -- driver --------------------------------------------------------------------------------


async def _create_pg_database(server: str) -> tuple[str, str]:
    import asyncpg

    admin = sa.engine.make_url(server).set(drivername="postgresql")
    name = "osq_soak_" + uuid.uuid4().hex[:12]
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    target = admin.set(drivername="postgresql+asyncpg", database=name)
    return target.render_as_string(hide_password=False), name


async def _drop_pg_database(server: str, name: str) -> None:
    import asyncpg

    admin = sa.engine.make_url(server).set(drivername="postgresql")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _shown(target: str) -> str:
    if "://" not in target:
        return target
    return sa.engine.make_url(target).render_as_string(hide_password=True)


def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="osq-soak-"))
    archive_dir = workdir / "archives"
    os.environ[ARCHIVE_DIR_ENV] = str(archive_dir)  # inherited by the spawned workers
    created_pg: str | None = None
    server = args.server or (
        os.environ.get("OPENSQUILLA_TEST_DATABASE_URL")
        or os.environ.get("BENCH_POSTGRES_URL")
        or DEFAULT_SERVER
    )
    if args.dsn:
        target = args.dsn
    elif args.backend == "sqlite":
        target = str(workdir / "soak.db")
    else:
        target, created_pg = asyncio.run(_create_pg_database(server))
    try:
        return _soak(args, target, workdir, archive_dir)
    finally:
        if created_pg is not None:
            asyncio.run(_drop_pg_database(server, created_pg))
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _soak(args: argparse.Namespace, target: str, workdir: Path, archive_dir: Path) -> int:
    async def migrate() -> None:
        async with SessionStorage(target):
            pass

    asyncio.run(migrate())
    keys = [f"agent:main:soak-{n:02d}" for n in range(args.keys)]
    context = multiprocessing.get_context("spawn")
    ledger_paths = [workdir / f"ledger-{n}.json" for n in range(args.workers)]
    processes = [
        context.Process(
            target=worker_main,
            args=(target, n, args.seconds, args.seed, keys, str(ledger_paths[n])),
            name=f"soak-worker-{n}",
        )
        for n in range(args.workers)
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    crashed = []
    for process in processes:
        process.join(timeout=args.seconds + 180)
        if process.is_alive():
            process.kill()
            process.join()
        if process.exitcode != 0:
            crashed.append(f"{process.name} exited with {process.exitcode}")
    elapsed = time.monotonic() - started
    ledgers = [json.loads(p.read_text(encoding="utf-8")) for p in ledger_paths if p.exists()]
    lost, report = asyncio.run(audit(target, archive_dir, ledgers))

    ops: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    unexpected: list[str] = []
    for ledger in ledgers:
        ops.update(ledger["ops"])
        errors.update(ledger["errors"])
        unexpected.extend(ledger["unexpected"])
    total = sum(n for name, n in ops.items() if name != "create")
    failures = invariant_failures(report) + crashed
    if unexpected:
        failures.append(f"unexpected_errors={len(unexpected)}")
    summary = {
        "backend": args.backend,
        "target": _shown(target),
        "workers": args.workers,
        "seconds": args.seconds,
        "elapsed_s": round(elapsed, 2),
        "operations": total,
        "ops_per_s": round(total / args.seconds, 1),
        "by_operation": dict(sorted(ops.items())),
        "errors": dict(sorted(errors.items())),
        "unexpected_examples": unexpected[:5],
        **report,
        "failures": failures,
        "lost": lost,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary)
    return 1 if lost or failures else 0


def _print(summary: dict[str, Any]) -> None:
    print(
        f"soak: backend={summary['backend']} target={summary['target']} "
        f"workers={summary['workers']} seconds={summary['seconds']}"
    )
    print(f"operations={summary['operations']} ops/s={summary['ops_per_s']}")
    print("  by operation: " + " ".join(f"{k}={v}" for k, v in summary["by_operation"].items()))
    errors = summary["errors"]
    print("errors: " + (" ".join(f"{k}={v}" for k, v in errors.items()) or "none"))
    for example in summary["unexpected_examples"]:
        print(f"  unexpected: {example}")
    print(
        f"appends: committed={summary['appends_committed']} stale={summary['appends_stale']} "
        + " ".join(f"{k}={v}" for k, v in sorted(summary["accounted"].items()))
    )
    print(
        f"resets={summary['resets']} compactions={summary['compactions_committed']} "
        f"generations_deleted={summary['generations_deleted']} "
        f"sessions_now={summary['sessions_now']}"
    )
    for example in summary["lost_examples"]:
        print(f"  lost: {example}")
    print("invariants: " + (", ".join(summary["failures"]) or "ok"))
    print(f"lost={summary['lost']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--dsn", help="an existing database to use (left in place)")
    parser.add_argument("--server", help="Postgres server for a fresh database")
    parser.add_argument("--keys", type=int, default=8, help="session keys the workers share")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.seconds <= 0:
        parser.error("--workers must be >= 1 and --seconds > 0")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
