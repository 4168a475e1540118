"""Retention: pruning stale sessions and capping their number (docs/semantics.md#retention).

Deleting a session removes every row stored under its key, from every generation. Both
run in bounded batches, each batch one write transaction that re-checks what it deletes,
so a session touched meanwhile is kept and a deleted session leaves nothing behind; a
large store is never locked for the whole run: a run opens one unit of work per batch (one
when everything fits one batch). The previews read one
snapshot.
"""

from __future__ import annotations

from ..db.uow import UnitOfWork
from ..models.reports import DeletionPreview
from ..support.clock import now_ms

RETENTION_BATCH = 500


async def prune_stale(
    uow: UnitOfWork, updated_before: int, *, batch_size: int = RETENTION_BATCH
) -> int:
    """Delete every session with ``updated_at < updated_before``; how many went."""
    deleted = 0
    while True:
        async with uow.write() as tx:
            keys = await tx.sessions.oldest_keys(batch_size, updated_before=updated_before)
            gone = await tx.sessions.delete_cascade(keys, updated_before=updated_before)
        deleted += len(gone)
        if len(keys) < batch_size or not keys:
            return deleted


async def cap_sessions(
    uow: UnitOfWork, max_entries: int, *, batch_size: int = RETENTION_BATCH
) -> int:
    """Delete the least recently updated sessions beyond ``max_entries`` (order:
    ``updated_at``, ``created_at``, key); how many went."""
    deleted = 0
    while True:
        async with uow.write() as tx:
            excess = await tx.sessions.count() - max_entries
            if excess <= 0:
                return deleted
            keys = await tx.sessions.oldest_keys(min(excess, batch_size))
            deleted += len(await tx.sessions.delete_cascade(keys))
        if excess <= batch_size or not keys:  # the cap held when that batch committed
            return deleted


def cutoff(max_age_ms: int) -> int:
    """The ``updated_before`` bound of sessions older than (checked) ``max_age_ms``."""
    return now_ms() - max_age_ms


async def preview_prune(uow: UnitOfWork, updated_before: int) -> DeletionPreview:
    """What :func:`prune_stale` would delete now; nothing is changed."""
    async with uow.snapshot() as tx:
        return await tx.overview.preview_prune(updated_before)


async def preview_cap(uow: UnitOfWork, max_entries: int) -> DeletionPreview:
    """What :func:`cap_sessions` would delete now; nothing is changed."""
    async with uow.snapshot() as tx:
        return await tx.overview.preview_cap(max_entries)
