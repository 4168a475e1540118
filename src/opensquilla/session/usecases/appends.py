"""Writing one transcript row: the fenced append (the hot path), the append by message id,
and the plain insert of a caller's own entry (docs/semantics.md#fencing).

Each is one unit of work; the values arrive checked (an entry built or checked at the front
door, its key canonical). A refused fence is told apart (epoch or generation) by a read of
the session row: in the same unit where there is one, after the one-statement append in a
second, on that error path only.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from ..db.uow import Transaction, UnitOfWork
from ..errors import StaleEpochError
from ..models import SessionNode, TranscriptEntry

T = TypeVar("T")


async def append_entry(
    uow: UnitOfWork, entry: TranscriptEntry, *, expected_epoch: int, now: int, token_delta: int
) -> TranscriptEntry:
    """The fence (key, epoch, session id), the insert and the session touch (``updated_at``,
    ``total_tokens + delta``) commit together or not at all: one statement in autocommit
    where the database takes it (``uow.appends_in_one_statement``), else three in one write
    transaction. ``entry.id`` and ``entry.created_at`` (as stored: a defaulted one raised to
    the generation's newest live one, docs/semantics.md#order) are set;
    ``StaleEpochError`` when the fence refused."""
    if await uow.appends_in_one_statement():
        attempt = functools.partial(
            uow.append_in_one_statement,
            entry,
            expected_epoch=expected_epoch,
            now=now,
            token_delta=token_delta,
        )
        placed = await until_placed(uow, attempt, entry, expected_epoch)
    else:
        async with uow.write() as tx:
            found = await tx.transcript.append_and_touch(
                entry, expected_epoch=expected_epoch, now=now, token_delta=token_delta
            )
            if found is None:
                await raise_stale(tx, entry, expected_epoch)
            placed = found
    # As stored: a defaulted created_at may have been raised to the order floor. Both
    # are the database's integers, and ``id`` is in the entry's fields set already
    # (``trusted_entry``; an entry the caller built gets it added): no validation.
    entry.__dict__["id"], entry.__dict__["created_at"] = placed
    entry.__pydantic_fields_set__.add("id")
    return entry


# How often a one-statement append runs again when the session row changed while it waited.
CONTENDED_TRIES = 1000


async def until_placed(
    uow: UnitOfWork,
    attempt: Callable[[], Awaitable[T | None]],
    entry: TranscriptEntry,
    expected_epoch: int,
) -> T:
    """Run the one-statement append ``attempt`` (``None`` when its fence refused) until it
    places its rows. The error path only: a second unit tells the epoch from the
    generation (``StaleEpochError``), and both from a session row that changed while the
    statement waited for it (PostgreSQL: its order floor was read before; run it again)."""
    for _ in range(CONTENDED_TRIES):
        placed = await attempt()
        if placed is not None:
            return placed
        async with uow.read() as tx:
            node = await tx.sessions.get(entry.session_key)
            if not same_generation(node, entry, expected_epoch):
                await raise_stale(tx, entry, expected_epoch)
    raise StaleEpochError(
        f"append to {entry.session_key} found its session row changed by another "
        f"writer on each of {CONTENDED_TRIES} tries; nothing was written"
    )


def same_generation(node: SessionNode | None, entry: TranscriptEntry, expected_epoch: int) -> bool:
    """Whether ``node`` is still the generation ``entry`` was fenced to."""
    return node is not None and node.epoch == expected_epoch and node.session_id == entry.session_id


async def upsert_entry(
    uow: UnitOfWork, entry: TranscriptEntry, *, expected_epoch: int, now: int, token_delta: int
) -> bool:
    """The append by message id, one write transaction (``tx.transcript.upsert_and_touch``):
    the live row with ``entry.message_id`` replaced in place or ``entry`` inserted;
    ``entry`` gets the row's ``id`` and ``created_at``; ``True`` iff it was inserted."""
    async with uow.write() as tx:
        placed = await tx.transcript.upsert_and_touch(
            entry, expected_epoch=expected_epoch, now=now, token_delta=token_delta
        )
        if placed is None:
            await raise_stale(tx, entry, expected_epoch)
    entry.id, entry.created_at, inserted = placed
    return inserted


async def insert_entry(
    uow: UnitOfWork, entry: TranscriptEntry, expected_epoch: int | None
) -> TranscriptEntry:
    """Insert a caller's ``entry`` (its ``id`` set), one write transaction: with
    ``expected_epoch`` only while the session is still the entry's generation at exactly
    that epoch (else ``StaleEpochError``); without, while the entry's session id is the
    key's row or no row's."""
    async with uow.write() as tx:
        if expected_epoch is None:
            await tx.sessions.check_row_generation(entry.session_id, entry.session_key)
            entry.id = await tx.transcript.insert_floored(entry)
            return entry
        new_id = await tx.transcript.insert_fenced(entry, expected_epoch)
        if new_id is None:
            await raise_stale(tx, entry, expected_epoch)
        entry.id = new_id
    return entry


async def raise_stale(tx: Transaction, entry: TranscriptEntry, expected: int) -> NoReturn:
    """The fence refused ``entry``: say whether the epoch or the generation moved on."""
    key = entry.session_key
    node = await tx.sessions.get(key)
    if node is None or node.epoch != expected:
        actual = node.epoch if node is not None else None
        raise StaleEpochError(f"Epoch mismatch for {key}: expected {expected}, got {actual}")
    raise StaleEpochError(
        f"Generation mismatch for {key}: expected {entry.session_id}, got {node.session_id}"
    )
