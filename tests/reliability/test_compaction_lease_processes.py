"""Four OS processes compact one session at once: one summariser call between them.

Each worker (``lease_workers.py``) compacts through the LLM summariser pointed at one fake
server (``tests/fake_llm.py``) whose first call is held. The test lets that call answer only
once the other three workers have logged that they wait for its lease (so all four read the
same transcript before anything committed), and appends to the session while it is held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.managers import SyncManager
from typing import Any

from opensquilla.session import SessionManager

from ..fake_llm import FakeLLM
from . import lease_workers
from .support import HANG_GUARD, in_processes

KEY = "agent:main:leased"
WINDOW = 500  # the seeds (1,200 tokens) compact in one chunk: one call per run
SEEDED = [f"seed-{n:02d} " + "words " * 60 for n in range(12)]


async def _until_true(check: Callable[[], bool], what: str, running: asyncio.Future[Any]) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not check():
        assert not running.done(), f"the workers ended before {what}: {running.result()}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.01)


async def test_four_processes_compacting_one_session_make_one_summariser_call(
    spawn_pool: ProcessPoolExecutor,
    sync_manager: SyncManager,
    database: str,
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    for content in SEEDED:
        await manager.append_message(KEY, "user", content, token_count=100)
    waiting = [sync_manager.Event() for _ in range(4)]

    with FakeLLM(script=["hold"], reply="Goal: keep every seed. Summary of the seeds.") as fake:
        workers = asyncio.ensure_future(
            in_processes(
                spawn_pool,
                [
                    (
                        lease_workers.leased_compactor,
                        (database, KEY, WINDOW, fake.base_url, waiting[n]),
                    )
                    for n in range(4)
                ],
            )
        )
        await _until_true(
            lambda: fake.call_count == 1 and sum(event.is_set() for event in waiting) == 3,
            "one summariser call and three workers waiting for its lease",
            workers,
        )
        late = [
            (await manager.append_message(KEY, "user", f"late-{n}", token_count=5)).content
            for n in range(5)
        ]
        fake.gate.set()
        results = await workers

    assert [error for r in results for error in r["errors"]] == []
    assert fake.call_count == 1, "more than one summariser call"
    assert sorted(r["waited"] for r in results) == [False, True, True, True]
    outcomes = [r["result"] for r in results]
    (owner,) = [r["result"] for r in results if not r["waited"]]
    assert owner["removed"] > 0 and owner["skip_reason"] is None
    assert owner["source"] == "llm"
    for outcome in outcomes:  # the waiters received the owner's result
        assert {k: outcome[k] for k in ("removed", "summary", "source", "skip_reason")} == {
            k: owner[k] for k in ("removed", "summary", "source", "skip_reason")
        }
    summaries = await manager.get_summaries(KEY)
    assert [s.summary_text for s in summaries] == [owner["summary"]]
    node = await manager.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    canonical = [e.content for e in await manager.get_canonical_transcript(KEY)]
    assert canonical == SEEDED + late  # every append made during the held call kept
    live = await manager.get_transcript(KEY)
    assert [e.content for e in live][-len(late) :] == late
