"""Reading a session's canonical transcript a page at a time (docs/semantics.md#pages).

The canonical transcript (compacted archive plus live rows, ``(created_at, id)`` order) can
be too long to read at once. Pages address it by keyset cursors, ``(created_at, id)`` of a
row, so a page costs the same wherever it lies; every page is one statement over both
tables, so a compaction committing meanwhile neither duplicates nor drops rows in it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..errors import SessionNotFoundError
from ..keys import canonicalize_session_key
from ..models import (
    CanonicalTranscriptCoverage,
    CanonicalTranscriptPage,
    Cursor,
    TranscriptEntry,
)
from ..models.pages import check_cursor, check_page_size
from ..storage import SessionStorage
from .generations import GenerationCache


async def canonical_page(
    storage: SessionStorage,
    generations: GenerationCache,
    session_key: str,
    *,
    limit: int,
    before: Cursor | None,
    after: Cursor | None,
) -> CanonicalTranscriptPage:
    """One page of the current generation's canonical transcript, then its completeness.

    The arguments are checked before anything is read. The page is read for the session id
    the key has now; completeness is read afterwards, separately, so it describes the
    generation at least as late as the page (a compaction committed in between is counted,
    its rows being in the archive by then)."""
    check_page_size("limit", limit)
    check_cursor("before", before)
    check_cursor("after", after)
    node = await generations.require(session_key)
    entries, has_more = await storage.get_canonical_transcript_page(
        node.session_id, limit=limit, before=before, after=after
    )
    complete = await storage.is_canonical_transcript_complete(node.session_id)
    return CanonicalTranscriptPage(entries, has_more, complete)


async def coverage(
    storage: SessionStorage, generations: GenerationCache, session_key: str
) -> CanonicalTranscriptCoverage:
    """The current generation's coverage (``SessionNotFoundError`` for a missing key)."""
    node = await generations.require(session_key)
    return await storage.get_canonical_transcript_coverage(node.session_id)


def iter_canonical_transcript(
    storage: SessionStorage, session_key: str, *, page_size: int = 500
) -> AsyncIterator[TranscriptEntry]:
    """Every row of the key's canonical transcript, oldest first, read ``page_size`` rows at
    a time (at most that many held at once); the arguments are checked at the call.

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
    size = check_page_size("page_size", page_size)
    key = canonicalize_session_key(session_key)
    return _walk(storage, key, size)


async def _walk(storage: SessionStorage, key: str, size: int) -> AsyncIterator[TranscriptEntry]:
    node = await storage.get_session(key)
    if node is None:
        raise SessionNotFoundError(f"Session not found: {key}")
    position: Cursor | None = None
    while True:
        async with storage.uow.read() as tx:
            rows = await tx.transcript.canonical_window(
                node.session_id, limit=size, position=position, forward=True
            )
        for entry in rows:
            yield entry
        if len(rows) < size:
            return
        last = rows[-1]
        position = (last.created_at, last.id or 0)
