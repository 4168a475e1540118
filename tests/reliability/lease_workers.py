"""Worker processes for the cross-process compaction lease (test_compaction_lease_processes.py).

Each one compacts one session through the LLM summariser pointed at the test's fake server,
and sets its ``waiting`` event when it logs that it waits for another worker's lease, so the
test knows every worker has read the transcript and is queued before it lets the one
summariser call answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.usecases.compaction.lease import WAIT_MESSAGE

from .workers import _describe

COMPACTOR_LOG = "opensquilla.session.compactor"


class _SetWhenWaiting(logging.Handler):
    """Sets ``event`` on the compactor's "waits for the worker holding its lease" record."""

    def __init__(self, event: Any) -> None:
        super().__init__(logging.INFO)
        self.event = event
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == WAIT_MESSAGE:
            self.seen = True
            self.event.set()


def lease_config(base_url: str) -> CompactionConfig:
    """The LLM summariser at ``base_url``, in one chunk (so one call per compaction)."""
    return CompactionConfig(
        model="fake-model",
        api_key="sk-test",
        base_url=base_url,
        base_chunk_ratio=1.0,
        default_parts=1,
    )


def leased_compactor(
    target: str, key: str, window: int, base_url: str, waiting: Any
) -> dict[str, Any]:
    return asyncio.run(_leased_compactor(target, key, window, base_url, waiting))


async def _leased_compactor(
    target: str, key: str, window: int, base_url: str, waiting: Any
) -> dict[str, Any]:
    handler = _SetWhenWaiting(waiting)
    logger = logging.getLogger(COMPACTOR_LOG)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    errors: list[str] = []
    outcome: dict[str, Any] = {}
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            result = await manager.compact_with_result(key, window, lease_config(base_url))
            outcome = {
                "removed": result.removed_count,
                "summary": result.summary,
                "source": result.summary_source,
                "skip_reason": result.skip_reason,
                "kept": len(result.kept_entries),
            }
    except Exception as exc:
        errors.append(_describe(exc))
    finally:
        logger.removeHandler(handler)
    return {"pid": os.getpid(), "result": outcome, "waited": handler.seen, "errors": errors}
