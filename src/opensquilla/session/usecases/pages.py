"""Reading a session's canonical transcript a page at a time (docs/semantics.md#pages).

The canonical transcript (compacted archive plus live rows, ``(created_at, id)`` order) can
be too long to read at once. Pages address it by keyset cursors, ``(created_at, id)`` of a
row, so a page costs the same wherever it lies; every page is one statement over both
tables, so a compaction committing meanwhile neither duplicates nor drops rows in it.
Values arrive checked (a page size >= 1, cursors as tuples) and keys canonical.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from ..db.uow import Transaction, UnitOfWork
from ..errors import SessionNotFoundError
from ..keys import CanonicalKey
from ..models import (
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    Cursor,
    TranscriptEntry,
)
from .generations import GenerationCache
from .reads import owner_key


def _unit(
    uow: UnitOfWork, before: Cursor | None, after: Cursor | None
) -> Callable[[], AbstractAsyncContextManager[Transaction]]:
    """A cursor needs a lookup that must agree with the page: both in one snapshot."""
    return uow.snapshot if before is not None or after is not None else uow.read


async def _window(
    tx: Transaction,
    session_key: str,
    session_id: str,
    size: int,
    before: Cursor | None,
    after: Cursor | None,
) -> tuple[list[TranscriptEntry], bool]:
    """One page on ``tx`` and whether more rows lie beyond it in the direction of travel:
    from a cursor that names a row of the generation (``before`` first), else backward
    from the newest row."""
    cursors = [cursor for cursor in (before, after) if cursor is not None]
    found = await tx.transcript.named_positions(session_id, cursors, session_key=session_key)
    named = dict(zip(cursors, found, strict=True))
    position: Cursor | None = None
    forward = False
    if before is not None and named[before]:
        position = before
    elif after is not None and named[after]:
        position, forward = after, True
    rows = await tx.transcript.canonical_window(
        session_id, session_key=session_key, limit=size + 1, position=position, forward=forward
    )
    page = rows[:size]
    return (page if forward else page[::-1]), len(rows) > size


async def canonical_page(
    uow: UnitOfWork,
    generations: GenerationCache,
    key: CanonicalKey,
    size: int,
    before: Cursor | None,
    after: Cursor | None,
) -> CanonicalTranscriptPage:
    """One page of the current generation's canonical transcript, then its completeness,
    in one unit of work (a snapshot with a cursor). Completeness is read after the page,
    so it describes the generation at least as late as the page (a compaction committed
    in between is counted, its rows being in the archive by then)."""
    async with _unit(uow, before, after)() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        entries, has_more = await _window(
            tx, node.session_key, node.session_id, size, before, after
        )
        coverage = await tx.transcript.coverage(node.session_id, session_key=node.session_key)
    return CanonicalTranscriptPage(entries, has_more, coverage.canonical_complete)


async def page_of(
    uow: UnitOfWork, session_id: str, size: int, before: Cursor | None, after: Cursor | None
) -> tuple[list[TranscriptEntry], bool]:
    """One page of generation ``session_id`` and ``has_more`` (the storage's rows)."""
    async with _unit(uow, before, after)() as tx:
        key = await owner_key(tx, session_id)
        if key is None:
            return [], False
        return await _window(tx, key, session_id, size, before, after)


async def coverage(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey
) -> CanonicalTranscriptCoverage:
    """The current generation's coverage (``SessionNotFoundError`` for a missing key)."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await tx.transcript.coverage(node.session_id, session_key=node.session_key)


async def coverage_of(uow: UnitOfWork, session_id: str) -> CanonicalTranscriptCoverage:
    """Generation ``session_id``'s coverage; ``(False, 0, False)`` for no such id."""
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        if key is None:
            return CanonicalTranscriptCoverage(False, 0, False)
        return await tx.transcript.coverage(session_id, session_key=key)


async def iter_canonical_transcript(
    uow: UnitOfWork, key: CanonicalKey, size: int
) -> AsyncIterator[TranscriptEntry]:
    """Every row of the key's canonical transcript, oldest first, read ``size`` rows at a
    time (at most that many held at once), one unit of work per page; the first looks the
    generation up too.

    The walk reads the generation current when it starts (``SessionNotFoundError`` on the
    first step if the key is missing). Each page is one statement, consistent in itself,
    and starts strictly after the last row yielded, whether or not that row still exists.
    Between pages:

    * a row appended meanwhile is yielded if it lies after the position reached (appends
      do, unless the clock went back); the walk ends at the first page shorter than
      ``page_size``, so rows appended after that are not yielded;
    * a compaction moves rows from the live table to the archive with their
      ``(created_at, id)``, so the walk neither repeats nor skips them;
    * rows deleted meanwhile (truncate, a persisted compaction's replaced tail, a reset or
      a delete of the session) are not yielded unless already reached; a reset ends the
      walk, the old generation's rows being gone.
    """
    session_id: str | None = None
    position: Cursor | None = None
    while True:
        async with uow.read() as tx:
            if session_id is None:
                node = await tx.sessions.get(key)
                if node is None:
                    raise SessionNotFoundError(f"Session not found: {key}")
                session_id = node.session_id
            rows = await tx.transcript.canonical_window(
                session_id, session_key=key, limit=size, position=position, forward=True
            )
        for entry in rows:
            yield entry
        if len(rows) < size:
            return
        last = rows[-1]
        position = (last.created_at, last.id or 0)
