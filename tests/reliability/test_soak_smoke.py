"""The soak script (``bench/soak.py``) runs briefly in every test run: two worker processes
for eight seconds of mixed work, then its whole-database audit must report nothing lost.
A second test proves the audit can fail: it must notice a committed append that is gone.

How much work eight seconds hold depends on how busy the machine is, so the workload is
checked, not assumed: while the rounds so far have not together got to every operation
and every outcome the audit accounts for, another round runs, twice as long as the last,
on a fresh database and with another seed, up to ``ROUNDS``; every round's audit must be
clean. On an idle machine the first round does some thousands of operations, far beyond
what the coverage needs; on a starved one (a load of 25 to 30 on two cores left fewer than
100 appends in eight seconds, on either backend) the later rounds make up for it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage

# A whole-process scenario: run once, on SQLite (PostgreSQL's writers in several processes
# are test_processes.py and the process benchmark's).
pytestmark = pytest.mark.once(backend="sqlite")

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "bench" / "soak.py"
ROUNDS = 4  # 8, 16, 32 and 64 seconds of work
FIRST_ROUND_SECONDS = 8
SOAK_TIMEOUT = 300.0  # a hang guard for one round, beyond its seconds of work


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opensquilla_bench_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _soak_round(backend: Any, target: str, seed: int, seconds: int) -> dict[str, Any]:
    """One run of the script on ``target``; its summary, after checking it lost nothing."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SOAK),
        "--backend",
        "postgres" if backend.is_postgres else "sqlite",
        "--workers",
        "2",
        "--seconds",
        str(seconds),
        "--seed",
        str(seed),
        "--dsn",
        target,
        "--json",
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), seconds + SOAK_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert out, err.decode()[-3000:]
    summary: dict[str, Any] = json.loads(out)

    assert process.returncode == 0, (summary["failures"], summary["unexpected_examples"])
    assert summary["lost"] == 0
    assert summary["failures"] == []
    return summary


OPERATIONS = ("append", "branch", "compact", "reset", "retention")


def _workload(summary: dict[str, Any]) -> Counter[str]:
    """What a round's workload got to: operations, and outcomes the audit has to account
    for (commits, resets, deletions, appends found only in a reset archive)."""
    return Counter(
        {
            **{operation: summary["by_operation"].get(operation, 0) for operation in OPERATIONS},
            "appends_committed": summary["appends_committed"],
            "compactions_committed": summary["compactions_committed"],
            "resets": summary["resets"],
            "generations_deleted": summary["generations_deleted"],
            "reset_archive": summary["accounted"].get("reset_archive", 0),
        }
    )


# The least of each that the rounds must get to for their audits to mean something.
NEEDED = {
    **dict.fromkeys(OPERATIONS, 1),
    "appends_committed": 101,
    "compactions_committed": 1,
    "resets": 1,
    "generations_deleted": 1,
    "reset_archive": 1,
}


def _uncovered(done: Counter[str]) -> list[str]:
    return [name for name, least in NEEDED.items() if done[name] < least]


async def test_a_short_soak_loses_nothing(backend: Any, database: str, tmp_path: Path) -> None:
    done: Counter[str] = Counter()
    rounds: list[tuple[int, int]] = []  # (seconds, operations)
    for seed in range(1, ROUNDS + 1):
        seconds = FIRST_ROUND_SECONDS * 2 ** (seed - 1)
        if seed == 1:
            summary = await _soak_round(backend, database, seed, seconds)
        else:
            target, cleanup = await backend.fresh_migrated(tmp_path)
            try:
                summary = await _soak_round(backend, target, seed, seconds)
            finally:
                await cleanup()
        done += _workload(summary)
        rounds.append((seconds, summary["operations"]))
        if not _uncovered(done):
            break
    assert not _uncovered(done), (
        f"the soak never got to {_uncovered(done)} (rounds of (seconds, operations): {rounds})"
    )


async def test_the_soak_audit_notices_a_lost_append(database: str, tmp_path: Path) -> None:
    soak = _soak_module()
    key = "agent:main:audited"
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(key)
        kept = await manager.append_message(key, "user", "kept", token_count=3)
        gone = await manager.append_message(key, "user", "gone", token_count=4)
        async with storage.engine.begin() as conn:
            await conn.execute(
                sa.text("DELETE FROM transcript_entries WHERE id = :id"), {"id": gone.id}
            )
    ledger = {
        "appends": [
            {"key": key, "session_id": e.session_id, "message_id": e.message_id, "content": c}
            for e, c in ((kept, "kept"), (gone, "gone"))
        ],
        "stale": ["kept"],
        "compactions": [],
        "resets": [],
        "deleted": [],
    }

    lost, report = await soak.audit(database, tmp_path / "no-archives", [ledger])

    assert lost == 1
    assert report["lost_examples"][0]["message_id"] == gone.message_id
    assert report["stale_present"] == 1
    assert report["token_mismatches"] == [key]
    assert soak.invariant_failures(report)
