"""Transcript reads: by session key (the manager's: the newest messages, one message by id,
the transcript as JSON, batch reads over many keys; docs/semantics.md#other-reads) and by
session id (the storage's rows).

A read by key resolves the key to its current generation inside its one unit of work; a
missing key is ``SessionNotFoundError`` (a ``KeyError``), except in the batch reads, where
it has no rows. Values arrive checked and keys canonical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..db.uow import Transaction, UnitOfWork
from ..keys import CanonicalKey
from ..models import TranscriptEntry, TranscriptLine, TranscriptLines
from .generations import GenerationCache

# -- by session key (the manager's) ---------------------------------------------------


async def recent_transcript(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey, n: int
) -> list[TranscriptEntry]:
    """The newest ``n`` live rows of the current generation, oldest first."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        if not n:
            return []
        return await tx.transcript.live_tail(node.session_id, n, session_key=node.session_key)


async def transcript_lines(
    uow: UnitOfWork,
    generations: GenerationCache,
    key: CanonicalKey,
    limit: int | None,
    summary: bool,
    metadata_only: bool,
) -> TranscriptLines:
    """The live rows of the current generation as lines (the newest ``limit`` when given;
    ``metadata_only``: their ``id`` and ``metadata`` alone), oldest first, and with
    ``summary`` its latest summary, all of one moment.

    One statement reads the rows with the generation and its latest summary's id; a
    second, the summary by that id (only when there is one and it is wanted), or, when
    there are no rows, whether the key has a session (``SessionNotFoundError``) and its
    latest summary's id. A write that commits between two of them (rows appear, the summary
    is deleted) is seen: the read is then made again in one snapshot, a second unit of
    work."""
    async with uow.read() as tx:
        found = await _of_one_moment(tx, key, limit, summary, metadata_only)
        if found is None:
            generations.found(key, None)  # raises SessionNotFoundError
    if isinstance(found, TranscriptLines):
        return found
    async with uow.snapshot() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        lines = []
        if limit != 0:
            lines = await tx.transcript.live_lines(
                node.session_id,
                session_key=node.session_key,
                limit=limit,
                metadata_only=metadata_only,
            )
        latest = None
        if summary:
            latest = await tx.summaries.latest(node.session_id, session_key=node.session_key)
    return TranscriptLines(lines, latest)


async def _of_one_moment(
    tx: Transaction, key: CanonicalKey, limit: int | None, summary: bool, metadata_only: bool
) -> TranscriptLines | bool | None:
    """:func:`transcript_lines` without a snapshot: the lines and summary, ``None`` when
    the key has no session, ``False`` when a write raced the statements."""
    lines: list[TranscriptLine] = []
    summary_id: int | None = None
    if limit != 0:
        lines, summary_id = await tx.transcript.current_lines(
            key, limit=limit, metadata_only=metadata_only
        )
    if not lines:
        anchor = await tx.transcript.current_anchor(key)
        if anchor is None:
            return None
        has_rows, summary_id = anchor
        if has_rows and limit != 0:
            return False  # rows appended since the first statement
    if not summary or summary_id is None:
        return TranscriptLines(lines)
    latest = await tx.summaries.of_key(summary_id, session_key=key)
    return False if latest is None else TranscriptLines(lines, latest)


async def canonical_entry(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey, message_id: str
) -> TranscriptEntry | None:
    """The newest canonical row (archive or live) of the current generation carrying
    ``message_id``, or ``None``."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        return await tx.transcript.find_canonical_entry(
            node.session_id, message_id, session_key=node.session_key
        )


async def read_transcript(
    uow: UnitOfWork, generations: GenerationCache, key: CanonicalKey, limit: int | None
) -> list[dict[str, Any]]:
    """The live transcript of the current generation as JSON-ready dicts
    (``model_dump(mode="json")`` of each entry), the first ``limit`` rows when given."""
    async with uow.read() as tx:
        node = generations.found(key, await tx.sessions.get(key))
        entries = await tx.transcript.list_live(
            node.session_id, session_key=node.session_key, limit=limit
        )
    return [entry.model_dump(mode="json") for entry in entries]


async def count_by_key(
    uow: UnitOfWork, keys: Sequence[str], canonical: Sequence[CanonicalKey]
) -> dict[str, int]:
    """Live rows of each key's current generation, keyed by the keys as given (``keys``,
    ``canonical`` their canonical forms; 0 for a missing key), from one snapshot."""
    async with uow.snapshot() as tx:
        session_ids = await _current(tx, keys, canonical)
        counts = await tx.transcript.count_live_batch(sorted(set(session_ids.values())))
    return {key: counts[session_ids[key]] if key in session_ids else 0 for key in keys}


async def user_content_by_key(
    uow: UnitOfWork, keys: Sequence[str], canonical: Sequence[CanonicalKey], per_session: int
) -> dict[str, list[str]]:
    """The first ``per_session`` non-empty live ``user`` contents of each key's current
    generation, keyed by the keys as given (``[]`` for a missing key), from one snapshot."""
    async with uow.snapshot() as tx:
        session_ids = await _current(tx, keys, canonical)
        contents = await tx.transcript.first_user_contents(
            sorted(set(session_ids.values())), per_session
        )
    return {key: list(contents[session_ids[key]]) if key in session_ids else [] for key in keys}


async def _current(
    tx: Any, keys: Sequence[str], canonical: Sequence[CanonicalKey]
) -> dict[str, str]:
    """``{given key: current session id}`` of the keys that exist (any spelling of a key
    reaches its session)."""
    found = await tx.sessions.current_session_ids(sorted(set(canonical)))
    return {key: found[form] for key, form in zip(keys, canonical, strict=True) if form in found}


# -- by session id (the storage's rows) -------------------------------------------------


async def owner_key(tx: Transaction, session_id: str) -> str | None:
    """The key a by-id read carries (docs/scaling.md#keys-and-statements): the session's
    whose generation ``session_id`` is, else (orphan rows, their session row gone) the
    rows' own; ``None`` when nothing carries the id. One lookup by id, which fans out to
    every shard under distribution; the by-key reads need none."""
    key = await tx.sessions.key_of(session_id)
    return key if key is not None else await tx.transcript.owner_key(session_id)


async def rows(
    uow: UnitOfWork, session_id: str, limit: int | None, offset: int, *, canonical: bool
) -> list[TranscriptEntry]:
    """Live rows of one generation (``canonical``: compacted archive plus live rows), in
    transcript order (``created_at``, then ``id``), paginated."""
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        if key is None:
            return []
        listing = tx.transcript.list_canonical if canonical else tx.transcript.list_live
        return await listing(session_id, session_key=key, limit=limit, offset=offset)


async def live_count(uow: UnitOfWork, session_id: str) -> int:
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        return 0 if key is None else await tx.transcript.count_live(session_id, session_key=key)


async def recent_rows(uow: UnitOfWork, session_id: str, n: int) -> list[TranscriptEntry]:
    """The newest ``n`` live rows of one generation, oldest first (``[]`` for 0, unread)."""
    if n == 0:
        return []
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        return [] if key is None else await tx.transcript.live_tail(session_id, n, session_key=key)


async def canonical_row(
    uow: UnitOfWork, session_id: str, message_id: str
) -> TranscriptEntry | None:
    async with uow.read() as tx:
        key = await owner_key(tx, session_id)
        if key is None:
            return None
        return await tx.transcript.find_canonical_entry(session_id, message_id, session_key=key)


async def live_counts(uow: UnitOfWork, session_ids: list[str]) -> dict[str, int]:
    """Live rows per session id (0 for none); ``{}`` for no ids, unread."""
    if not session_ids:
        return {}
    async with uow.snapshot() as tx:
        return await tx.transcript.count_live_batch(session_ids)


async def user_contents(
    uow: UnitOfWork, session_ids: list[str], per_session: int
) -> dict[str, list[str]]:
    """The first ``per_session`` non-empty live user contents per id; ``{}`` for no ids."""
    if not session_ids:
        return {}
    async with uow.snapshot() as tx:
        return await tx.transcript.first_user_contents(session_ids, per_session)


async def delete_transcript(uow: UnitOfWork, session_id: str) -> None:
    """Delete the live rows and the compacted archive of one generation (under the key that
    carries it; nothing when none does)."""
    async with uow.write() as tx:
        key = await owner_key(tx, session_id)
        if key is not None:
            await tx.transcript.delete_all(session_id, session_key=key)
