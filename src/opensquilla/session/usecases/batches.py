"""Many messages at once and one out (issue 28, docs/messages.md): the batch append
(``append_messages``), the pop of the newest live entry and the delete by row id.

The batch is one fenced write transaction (the generation's key, epoch and session id, as
one append's fence), a bounded number of statements whatever its size
(``db/repos/transcript_batches.py``): all of it or, on any failure or cancellation before
the commit, nothing. Values arrive checked (``models.messages.check_messages``) and keys
canonical.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from ..db.repos import fenced_append, transcript_batches
from ..db.uow import UnitOfWork
from ..errors import InvalidInputError, StaleEpochError
from ..keys import CanonicalKey
from ..models import INT64_MAX, TranscriptEntry
from ..models.messages import CheckedMessage, first_unencodable
from ..support.clock import now_ms
from .appends import raise_stale, until_placed
from .transcript import Transcripts, after_reset

# A pop that lost its row to a concurrent pop tries again (each try: one statement).
POP_TRIES = 1000


async def append_messages(
    uow: UnitOfWork, transcripts: Transcripts, key: CanonicalKey, messages: Sequence[CheckedMessage]
) -> list[TranscriptEntry]:
    """Append checked ``messages`` to the current generation of ``key`` in order, in one
    write transaction (a read of the session row first when the generation is not cached);
    the entries returned with their ids and ``created_at`` as stored. ``[]`` for none,
    without touching the database. As a plain append, a reset that commits between the
    read of the generation and the write makes it read again and retry."""
    if not messages:
        return []
    delta = sum(message.token_delta for message in messages)
    if delta > INT64_MAX:
        raise InvalidInputError(
            f"the batch's token counts add up to {delta}, past {INT64_MAX}, the largest "
            "total_tokens can hold; nothing was written"
        )
    ids = [m.values["message_id"] for m in messages if m.values["message_id"] is not None]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(
            "two messages of the batch carry the same message_id; nothing was written"
        )
    generations = transcripts.generations
    deadline: float | None = None
    while True:
        cached = generations.cached(key)
        if cached is None:
            async with uow.read() as tx:
                node = generations.found(key, await tx.sessions.get(key))
            cached = (node.session_id, node.epoch)
        session_id, epoch = cached
        entries = [transcripts.entry(session_id, key, m.values) for m in messages]
        # One timestamp for the batch (each entry not before the one before it, whatever
        # this process's clock did meanwhile), which the database floors to the
        # generation's newest: two batches never interleave in (created_at, id) order.
        at = max(entry.created_at for entry in entries)
        for entry in entries:
            entry.__dict__["created_at"] = at
        try:
            await _write(uow, entries, ids, expected_epoch=epoch, token_delta=delta)
        except StaleEpochError as exc:
            deadline = await after_reset(generations, key, deadline, exc, "append_messages")
            continue
        break
    await transcripts.notify_memory_sync_size(
        key, sum(len((e.content or "").encode("utf-8")) for e in entries), "append_messages"
    )
    return entries


async def _write(
    uow: UnitOfWork,
    entries: list[TranscriptEntry],
    ids: list[str],
    *,
    expected_epoch: int,
    token_delta: int,
) -> None:
    first = entries[0]
    # PostgreSQL: a batch of one chunk is one statement (the fenced touch feeding the
    # INSERT), atomic on its own: run in autocommit, no BEGIN/COMMIT round trips (a
    # cancellation while it runs cancels it on the server). SQLite's batch of one chunk:
    # one statement in a transaction of one hop. Longer ones, and a batch of message ids
    # (checked free first), in one write transaction.
    one_chunk = len(entries) <= transcript_batches.CHUNK_ROWS
    alone = uow.is_postgres and one_chunk
    # SQLite with the append view: the touch inside the INSERT, one statement per chunk.
    through_view = not uow.is_postgres and await uow.appends_in_one_statement()
    try:
        if alone and not ids:
            # One statement in autocommit (uow.append_batch_in_one_statement), tried again
            # when the session row changed while it waited, as one append.
            attempt = functools.partial(
                uow.append_batch_in_one_statement,
                entries,
                expected_epoch=expected_epoch,
                now=now_ms(),
                token_delta=token_delta,
            )
            placed = await until_placed(uow, attempt, first, expected_epoch)
        elif through_view and one_chunk and not ids:
            # One statement, its BEGIN and COMMIT in one hop (uow.append_view_batch); the
            # error path only: a second unit tells the epoch from the generation.
            found = await uow.append_view_batch(
                entries, expected_epoch=expected_epoch, now=now_ms(), token_delta=token_delta
            )
            if found is None:
                async with uow.read() as tx:
                    await raise_stale(tx, first, expected_epoch)
            placed = found
        else:
            placed = await _write_transaction(
                uow,
                entries,
                ids,
                alone=alone,
                through_view=through_view,
                expected_epoch=expected_epoch,
                token_delta=token_delta,
            )
    except InvalidInputError as exc:
        bad = first_unencodable(entries)
        if bad is None or str(exc).startswith("messages["):
            raise
        raise InvalidInputError(f"messages[{bad}]: {exc}") from exc
    for entry, (row_id, created_at) in zip(entries, placed, strict=True):
        entry.__dict__["id"] = row_id
        entry.__dict__["created_at"] = created_at


async def _write_transaction(
    uow: UnitOfWork,
    entries: list[TranscriptEntry],
    ids: list[str],
    *,
    alone: bool,
    through_view: bool,
    expected_epoch: int,
    token_delta: int,
) -> list[tuple[int, int]]:
    """The batch in one write transaction (PostgreSQL ``alone``: in autocommit, its one
    statement atomic by itself): the message ids checked free first, then the fenced touch
    and the INSERTs (``tx.transcript.append_batch``)."""
    first = entries[0]
    async with uow.one_statement() if alone else uow.write() as tx:
        if ids:
            taken = await tx.transcript.live_message_ids(
                first.session_id, ids, session_key=first.session_key
            )
            if taken:
                index = next(i for i, e in enumerate(entries) if e.message_id in taken)
                raise InvalidInputError(
                    f"messages[{index}]: message_id is already a live entry of "
                    f"{first.session_key} (append_message replaces an entry by id; a batch "
                    "only adds); nothing was written"
                )
        placed = await tx.transcript.append_batch(
            entries,
            expected_epoch=expected_epoch,
            now=now_ms(),
            token_delta=token_delta,
            returning=_returning(uow),
            # The unit of work commits right after it (SQLite: in the same hop).
            ends_transaction=not alone,
            through_view=through_view,
        )
        if placed is None:
            await raise_stale(tx, first, expected_epoch)
    return placed


def _returning(uow: UnitOfWork) -> bool:
    """Whether the database returns rows from INSERT and DELETE (SQLite 3.35+)."""
    return uow.is_postgres or fenced_append.SQLITE_ONE_STATEMENT


async def pop_message(uow: UnitOfWork, key: CanonicalKey) -> TranscriptEntry | None:
    """Remove the newest live entry of ``key``'s current generation and return it (one
    statement, atomic on its own); ``None`` when there is none (or no session). A pop
    that lost its chosen row to a concurrent pop reads again and tries the next one, so
    two pops never return the same entry and never ``None`` while entries remain."""
    if not _returning(uow):
        return await _pop_without_returning(uow, key)
    for _ in range(POP_TRIES):
        popped, live = await uow.pop_newest(key)
        if popped is not None or not live:
            return popped
        await asyncio.sleep(0)  # a concurrent pop took the row: let it finish
    raise StaleEpochError(f"pop_message on {key} lost every race for {POP_TRIES} tries")


async def _pop_without_returning(uow: UnitOfWork, key: CanonicalKey) -> TranscriptEntry | None:
    """SQLite before 3.35: read the newest row and delete it in one write transaction."""
    async with uow.write() as tx:
        entry = await tx.transcript.newest_live_row(key)
        if entry is not None and entry.id is not None:
            await tx.transcript.delete_live_row(key, entry.id)
        return entry


async def delete_entry(uow: UnitOfWork, key: CanonicalKey, entry_id: int) -> bool:
    """Delete the live entry with row id ``entry_id`` if it belongs to ``key``'s current
    generation (one statement); ``True`` iff it did."""
    async with uow.one_statement() as tx:
        return await tx.transcript.delete_live_row(key, entry_id)
