"""The soak script (``bench/soak.py``) runs briefly in every test run: two worker processes
for eight seconds of mixed work, then its whole-database audit must report nothing lost.
A second test proves the audit can fail: it must notice a committed append that is gone."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "bench" / "soak.py"


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opensquilla_bench_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_a_short_soak_loses_nothing(backend: Any, database: str, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SOAK),
        "--backend",
        "postgres" if backend.is_postgres else "sqlite",
        "--workers",
        "2",
        "--seconds",
        "8",
        "--dsn",
        database,
        "--json",
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 150)
    assert out, err.decode()[-3000:]
    summary = json.loads(out)

    assert process.returncode == 0, (summary["failures"], summary["unexpected_examples"])
    assert summary["lost"] == 0
    assert summary["failures"] == []
    for operation in ("append", "branch", "compact", "reset", "retention"):
        assert summary["by_operation"].get(operation, 0) > 0, operation
    assert summary["appends_committed"] > 100
    assert summary["compactions_committed"] > 0
    assert summary["resets"] > 0
    assert summary["generations_deleted"] > 0
    assert summary["accounted"].get("reset_archive", 0) > 0


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
