"""The multi-process writer benchmark (``bench/processes.py``) runs briefly in every test
run: ours only, one and two worker processes, both shapes (a session per writer, one hot
session), a fraction of a second each. Its timing is not checked (performance is measured
by the benchmark, not by tests); its accounting is: every append a writer saw succeed is
in the database, nothing more, each session's ``total_tokens`` agrees with its rows, and
each row says how many appends it timed and with how much CPU."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

# A whole-process scenario: run once, on PostgreSQL (the shared-server deployment it models).
pytestmark = pytest.mark.once(backend="postgresql")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "processes.py"
TIMEOUT = 600.0  # a hang guard: spawning and importing takes seconds per process


async def test_the_process_benchmark_runs_and_loses_nothing(backend: Any) -> None:
    env = dict(os.environ)
    if backend.is_postgres:
        env["BENCH_POSTGRES_URL"] = backend.admin_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "--backend",
        "postgres" if backend.is_postgres else "sqlite",
        "--processes",
        "1,2",
        "--writers",
        "2",
        "--seconds",
        "0.3",
        "--stores",
        "ours",
        "--json",
        cwd=str(ROOT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()[-3000:]
    rows = json.loads(out)

    assert [(r["shape"], r["processes"]) for r in rows] == [
        ("own", 1),
        ("own", 2),
        ("hot", 1),
        ("hot", 2),
    ]
    for row in rows:
        assert "failure" not in row, row["failure"]
        assert row["store"] == "ours"
        assert row["writers"] == 2 * row["processes"]
        assert row["appends"] > 0
        assert (row["errors"], row["lost"], row["extra"]) == (0, 0, 0), row
        assert row["token_mismatches"] == []
        assert row["client_cpu_s"] > 0
        assert row["appends_per_cpu_s"] > 0
        assert row["vs_1"] > 0
