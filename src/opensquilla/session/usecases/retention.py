"""Retention: pruning stale sessions and capping their number (docs/semantics.md#retention).

Deleting a session removes every row stored under its key, from every generation. Both
run in bounded batches, each batch one write transaction that re-checks what it deletes,
so a session touched meanwhile is kept and a deleted session leaves nothing behind; a
large store is never locked for the whole run.
"""

from __future__ import annotations

from ..models import check_integer, check_millis
from ..models.reports import DeletionPreview
from ..storage import SessionStorage
from ..support.clock import now_ms

RETENTION_BATCH = 500


async def prune_stale(
    storage: SessionStorage, updated_before: int, *, batch_size: int = RETENTION_BATCH
) -> int:
    """Delete every session with ``updated_at < updated_before``; how many went."""
    check_millis("updated_before", updated_before)
    check_integer("batch_size", batch_size, minimum=1)  # 0 would never finish
    deleted = 0
    while True:
        async with storage.uow.write() as tx:
            keys = await tx.sessions.oldest_keys(batch_size, updated_before=updated_before)
            gone = await tx.sessions.delete_cascade(keys, updated_before=updated_before)
        deleted += len(gone)
        if len(keys) < batch_size:
            return deleted


async def cap_sessions(
    storage: SessionStorage, max_entries: int, *, batch_size: int = RETENTION_BATCH
) -> int:
    """Delete the least recently updated sessions beyond ``max_entries`` (order:
    ``updated_at``, ``created_at``, key); how many went."""
    check_integer("max_entries", max_entries)
    check_integer("batch_size", batch_size, minimum=1)  # 0 would never finish
    deleted = 0
    while True:
        async with storage.uow.write() as tx:
            excess = await tx.sessions.count() - max_entries
            if excess <= 0:
                return deleted
            keys = await tx.sessions.oldest_keys(min(excess, batch_size))
            deleted += len(await tx.sessions.delete_cascade(keys))


def cutoff(max_age_ms: int) -> int:
    """The ``updated_before`` bound of sessions older than ``max_age_ms``."""
    check_integer("max_age_ms", max_age_ms)
    return now_ms() - max_age_ms


async def preview_prune(storage: SessionStorage, updated_before: int) -> DeletionPreview:
    """What :func:`prune_stale` would delete now; nothing is changed."""
    check_millis("updated_before", updated_before)
    async with storage.uow.snapshot() as tx:
        return await tx.overview.preview_prune(updated_before)


async def preview_cap(storage: SessionStorage, max_entries: int) -> DeletionPreview:
    """What :func:`cap_sessions` would delete now; nothing is changed."""
    check_integer("max_entries", max_entries)
    async with storage.uow.snapshot() as tx:
        return await tx.overview.preview_cap(max_entries)
