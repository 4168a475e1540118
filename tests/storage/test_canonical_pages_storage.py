"""Canonical pages at the storage layer: paging is a pure function of the transcript.

A random transcript (rows with tied ``created_at``, ids not in time order, a random part of
it moved to the compacted archive as a compaction would) is walked with ``before`` pages
and with ``after`` pages of random sizes; both walks give exactly the rows of
``get_canonical_transcript``, in its order. Both backends.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionStorage, TranscriptEntry
from opensquilla.session.models import CompactedTranscriptEntry, SessionNode

from . import new_session

_keys = itertools.count()

ROWS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=6), st.booleans()), min_size=0, max_size=25
)
SIZES = st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=5)


async def _transcript(storage: SessionStorage, rows: list[tuple[int, bool]]) -> SessionNode:
    """Rows appended in the given order (``created_at`` as given: ties, and ids out of time
    order), then the ``archived`` ones moved to the archive keeping ``(created_at, id)``."""
    node = await new_session(storage, f"agent:prop:pages{next(_keys)}")
    moved: list[TranscriptEntry] = []
    for n, (created_at, archived) in enumerate(rows):
        entry = await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id,
                session_key=node.session_key,
                role="user",
                content=f"r{n}",
                created_at=1_000 + created_at,
                turn_context={"n": n},
            )
        )
        if archived:
            moved.append(entry)
    archive = [
        CompactedTranscriptEntry(
            **{k: v for k, v in entry.__dict__.items() if k != "id"},
            original_entry_id=entry.id,
            compaction_id="cmp",
            compaction_index=0,
            archived_at=5_000,
        )
        for entry in moved
    ]
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(archive)
        await tx.compaction.delete_ids(
            node.session_id, [entry.id or 0 for entry in moved], session_key=node.session_key
        )
    return node


def _position(entry: TranscriptEntry) -> tuple[int, int]:
    return (entry.created_at, entry.id or 0)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ROWS, before_sizes=SIZES, after_sizes=SIZES)
async def test_before_and_after_walks_give_the_canonical_transcript(
    storage: SessionStorage,
    rows: list[tuple[int, bool]],
    before_sizes: list[int],
    after_sizes: list[int],
) -> None:
    node = await _transcript(storage, rows)
    sid = node.session_id
    canonical = await storage.get_canonical_transcript(sid)
    assert len(canonical) == len(rows)

    backward: list[TranscriptEntry] = []
    position: tuple[int, int] | None = None
    for size in itertools.cycle(before_sizes):
        page, more = await storage.get_canonical_transcript_page(sid, limit=size, before=position)
        assert len(page) == min(size, len(canonical) - len(backward))
        backward[:0] = page
        if not more:
            break
        position = _position(page[0])
    assert backward == canonical

    if not canonical:
        return
    forward = canonical[:1]
    for size in itertools.cycle(after_sizes):
        page, more = await storage.get_canonical_transcript_page(
            sid, limit=size, after=_position(forward[-1])
        )
        forward.extend(page)
        if not more:
            break
    assert forward == canonical
