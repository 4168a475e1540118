"""Canonical transcript pages, completeness and the fork-lineage proof (both backends).

Pages of the canonical transcript by ``(created_at, id)`` cursors, their ``has_more`` and
``canonical_complete``; the whole-transcript iterator; the coverage formula; and what branch
and reset write so that a child's completeness is evidence, not a guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.util import await_

from opensquilla.session import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CanonicalTranscriptCoverage,
    SessionManager,
    SessionStorage,
    TranscriptEntry,
)
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError
from opensquilla.session.models import SessionSummary

KEY = "agent:main:pages"
PARENT = "agent:main:parent"
CHILD = "agent:main:child"

Cursor = tuple[int, int]


# -- helpers -----------------------------------------------------------------------------


def cursor(entry: TranscriptEntry) -> Cursor:
    assert entry.id is not None
    return (entry.created_at, entry.id)


def ids(entries: list[TranscriptEntry]) -> list[int | None]:
    return [entry.id for entry in entries]


async def fill(manager: SessionManager, key: str, count: int, start: int = 0) -> None:
    """``count`` messages, alternating roles, each with a ``turn_context`` of its own."""
    for n in range(start, start + count):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(key, role, f"m{n}", turn_context={"turn": n})


async def compact(manager: SessionManager, key: str, keep: int) -> None:
    """A compaction that archives all live rows but the newest ``keep`` (kept as they are)."""
    live = await manager.get_transcript(key)
    kept = [{"role": e.role, "content": e.content} for e in live[len(live) - keep :]]
    assert await manager.persist_compaction_result(key, f"summary of {key}", kept)


async def walk_before(manager: SessionManager, key: str, size: int) -> list[TranscriptEntry]:
    """Newest page first, then ``before`` pages back to the start: oldest first."""
    pages: list[list[TranscriptEntry]] = []
    position: Cursor | None = None
    while True:
        page = await manager.get_canonical_transcript_page(key, limit=size, before=position)
        assert page.canonical_complete
        assert 0 < len(page.entries) <= size
        pages.insert(0, page.entries)
        if not page.has_more:
            return [entry for entries in pages for entry in entries]
        position = cursor(page.entries[0])


async def walk_after(manager: SessionManager, key: str, size: int) -> list[TranscriptEntry]:
    """From the first canonical row, ``after`` pages to the end."""
    [first] = await manager.get_canonical_transcript(key, limit=1)
    seen = [first]
    while True:
        page = await manager.get_canonical_transcript_page(key, limit=size, after=cursor(seen[-1]))
        assert page.canonical_complete
        seen.extend(page.entries)
        if not page.has_more:
            return seen
        assert len(page.entries) == size


async def set_session_columns(storage: SessionStorage, key: str, **values: Any) -> None:
    """Change session columns by hand (legacy rows the store itself never writes)."""
    async with storage.engine.begin() as conn:
        table = sa.table("sessions", sa.column("session_key"), *map(sa.column, values))
        await conn.execute(sa.update(table).where(table.c.session_key == key).values(**values))


async def delete_archive(storage: SessionStorage, session_id: str) -> None:
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.text("DELETE FROM compacted_transcript_entries WHERE session_id = :sid"),
            {"sid": session_id},
        )


@contextlib.contextmanager
def on_statement(
    storage: SessionStorage, when: str, matches: Callable[[str], bool], action: Any
) -> Iterator[list[str]]:
    """Run the coroutine ``action()`` once, from inside the storage's connection, right
    before or after (``when``) the first statement ``matches`` accepts; the statement's
    results are already fetched by then (both drivers prefetch), so "after" is the instant
    between the statement and the next one."""
    fired: list[str] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired and matches(statement):
            fired.append(statement)
            await_(action())

    event = f"{when}_cursor_execute"
    sa.event.listen(storage.engine.sync_engine, event, hook)
    try:
        yield fired
    finally:
        sa.event.remove(storage.engine.sync_engine, event, hook)


def is_page_statement(statement: str) -> bool:
    return "UNION ALL" in statement and "compacted_transcript_entries" in statement


def is_coverage_statement(statement: str) -> bool:
    return "session_summaries" in statement and "FROM sessions" in statement


@pytest.fixture
async def other(database: str) -> Any:
    """A second manager over its own storage (own engine and connections) on the database."""
    store = SessionStorage(database)
    await store.connect()
    try:
        yield SessionManager(store, inject_time_prefix=False)
    finally:
        await store.close()


# -- pages -------------------------------------------------------------------------------


async def test_pages_cross_two_compaction_boundaries(manager: SessionManager) -> None:
    """10 rows, two compactions (3 + 3 archived, 4 live): ``before`` pages of 3 and
    ``after`` pages of 2 both give all 10 in order, each once, complete on every page."""
    await manager.create(KEY)
    await fill(manager, KEY, 7)
    await compact(manager, KEY, keep=4)
    await fill(manager, KEY, 3, start=7)
    await compact(manager, KEY, keep=4)
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == [f"m{n}" for n in range(10)]
    assert len(await manager.get_transcript(KEY)) == 4
    coverage = await manager.get_canonical_transcript_coverage(KEY)
    assert coverage == CanonicalTranscriptCoverage(True, 2, False)
    backward = await walk_before(manager, KEY, 3)
    forward = await walk_after(manager, KEY, 2)
    assert backward == canonical  # every column, turn_context included
    assert forward == canonical
    assert len(set(ids(backward))) == 10
    assert [e.turn_context for e in backward] == [{"turn": n} for n in range(10)]


async def test_page_modes_and_has_more(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 5)
    rows = await manager.get_canonical_transcript(KEY)
    newest = await manager.get_canonical_transcript_page(KEY, limit=2)
    assert (newest.entries, newest.has_more) == (rows[3:], True)
    older = await manager.get_canonical_transcript_page(KEY, limit=2, before=cursor(rows[3]))
    assert (older.entries, older.has_more) == (rows[1:3], True)
    oldest = await manager.get_canonical_transcript_page(KEY, limit=2, before=cursor(rows[1]))
    assert (oldest.entries, oldest.has_more) == (rows[:1], False)
    newer = await manager.get_canonical_transcript_page(KEY, limit=2, after=cursor(rows[0]))
    assert (newer.entries, newer.has_more) == (rows[1:3], True)
    last = await manager.get_canonical_transcript_page(KEY, limit=2, after=cursor(rows[2]))
    assert (last.entries, last.has_more) == (rows[3:], False)
    whole = await manager.get_canonical_transcript_page(KEY, limit=5)
    assert (whole.entries, whole.has_more) == (rows, False)


async def test_an_empty_generation_has_an_empty_complete_page(manager: SessionManager) -> None:
    await manager.create(KEY)
    page = await manager.get_canonical_transcript_page(KEY, limit=10)
    assert (page.entries, page.has_more, page.canonical_complete) == ([], False, True)
    storage_page = await manager.storage.get_canonical_transcript_page(
        (await manager.get_session(KEY) or pytest.fail()).session_id, limit=3, after=(1, 1)
    )
    assert storage_page == ([], False)


async def test_an_unknown_cursor_counts_as_absent(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A cursor naming no row of this generation (another session's row, a wrong
    ``created_at``, a made-up id) gives the newest page, as no cursor would."""
    await manager.create(KEY)
    await manager.create(PARENT)
    await fill(manager, KEY, 4)
    await fill(manager, PARENT, 2)
    rows = await manager.get_canonical_transcript(KEY)
    foreign = await manager.get_canonical_transcript(PARENT)
    newest = await manager.get_canonical_transcript_page(KEY, limit=2)
    wrong_time = (rows[2].created_at + 1, rows[2].id or 0)
    for unknown in (cursor(foreign[0]), wrong_time, (0, 10**12)):
        for side in ("before", "after"):
            page = await manager.get_canonical_transcript_page(KEY, limit=2, **{side: unknown})
            assert (page.entries, page.has_more) == (newest.entries, True)
    # An unknown ``before`` leaves a known ``after`` in charge.
    page = await manager.get_canonical_transcript_page(
        KEY, limit=2, before=cursor(foreign[0]), after=cursor(rows[0])
    )
    assert page.entries == rows[1:3]


async def test_before_wins_when_both_cursors_name_rows(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 6)
    rows = await manager.get_canonical_transcript(KEY)
    page = await manager.get_canonical_transcript_page(
        KEY, limit=2, before=cursor(rows[4]), after=cursor(rows[0])
    )
    assert (page.entries, page.has_more) == (rows[2:4], True)


async def test_an_archived_row_is_a_cursor_by_its_original_id(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 6)
    rows = await manager.get_canonical_transcript(KEY)
    await compact(manager, KEY, keep=2)
    assert await manager.get_canonical_transcript(KEY) == rows
    page = await manager.get_canonical_transcript_page(KEY, limit=3, after=cursor(rows[1]))
    assert (page.entries, page.has_more) == (rows[2:5], True)  # archive and live rows
    page = await manager.get_canonical_transcript_page(KEY, limit=3, before=cursor(rows[3]))
    assert (page.entries, page.has_more) == (rows[0:3], False)


async def test_a_missing_session_is_refused(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError, match="Session not found: agent:main:nope"):
        await manager.get_canonical_transcript_page("agent:main:nope", limit=5)
    with pytest.raises(SessionNotFoundError):
        await manager.get_canonical_transcript_coverage("agent:main:nope")
    with pytest.raises(SessionNotFoundError):
        await manager.is_canonical_transcript_complete("agent:main:nope")
    walk = manager.iter_canonical_transcript("agent:main:nope")
    with pytest.raises(SessionNotFoundError):
        await anext(walk)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"limit": "5"}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2.0}, "limit"),
        ({"limit": None}, "limit"),
        ({"limit": 2**64}, "limit"),
        ({"limit": 3, "before": [1, 2]}, "before"),
        ({"limit": 3, "before": (1,)}, "before"),
        ({"limit": 3, "after": (1, 2, 3)}, "after"),
        ({"limit": 3, "after": (1, "2")}, r"after\[1\]"),
        ({"limit": 3, "before": (True, 2)}, r"before\[0\]"),
        ({"limit": 3, "after": (2**63, 1)}, r"after\[0\]"),
    ],
)
async def test_bad_arguments_are_refused_naming_them(
    manager: SessionManager, arguments: dict[str, Any], named: str
) -> None:
    await manager.create(KEY)
    node = await manager.get_session(KEY)
    assert node is not None
    with pytest.raises(InvalidInputError, match=named):
        await manager.get_canonical_transcript_page(KEY, **arguments)
    with pytest.raises(InvalidInputError, match=named):
        await manager.storage.get_canonical_transcript_page(node.session_id, **arguments)


async def test_a_limit_below_one_counts_as_one(manager: SessionManager) -> None:
    """Upstream's ``max(1, int(limit))``, kept for compatibility (ints only)."""
    await manager.create(KEY)
    await fill(manager, KEY, 3)
    rows = await manager.get_canonical_transcript(KEY)
    for limit in (0, -7):
        page = await manager.get_canonical_transcript_page(KEY, limit=limit)
        assert (page.entries, page.has_more) == (rows[2:], True)


# -- one snapshot per page; completeness after it ------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_compaction_at_the_page_statement_neither_duplicates_nor_drops(
    manager: SessionManager, other: SessionManager, when: str
) -> None:
    """Another connection commits a compaction (live rows moving to the archive) right
    before or right after the page statement runs: the page is exactly the transcript,
    and the completeness, read after the page, counts that compaction."""
    await manager.create(KEY)
    await fill(manager, KEY, 4)
    rows = await manager.get_canonical_transcript(KEY)
    with on_statement(
        manager.storage, when, is_page_statement, lambda: compact(other, KEY, keep=1)
    ) as fired:
        page = await manager.get_canonical_transcript_page(KEY, limit=10)
    assert fired
    assert (page.entries, page.has_more, page.canonical_complete) == (rows, False, True)
    assert len(await manager.get_transcript(KEY)) == 1
    coverage = await manager.get_canonical_transcript_coverage(KEY)
    assert coverage == CanonicalTranscriptCoverage(True, 1, False)


async def test_completeness_is_read_after_the_page(
    manager: SessionManager, other: SessionManager, storage: SessionStorage
) -> None:
    """An incomplete generation whose archive is completed between the page and the
    coverage read: the page says complete, because coverage is read after it."""
    await manager.create(KEY)
    await fill(manager, KEY, 4)
    node = await manager.get_session(KEY)
    assert node is not None
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="legacy")
    )
    assert not await manager.is_canonical_transcript_complete(KEY)

    async def remove_summary() -> None:
        async with other.storage.engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "DELETE FROM session_summaries WHERE session_key = :k AND session_id = :sid"
                ),
                {"k": KEY, "sid": node.session_id},
            )

    with on_statement(storage, "after", is_page_statement, remove_summary) as fired:
        page = await manager.get_canonical_transcript_page(KEY, limit=10)
    assert fired
    assert len(page.entries) == 4
    assert page.canonical_complete


async def test_a_deleted_archive_reads_incomplete(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Archive rows deleted by hand (a legacy store did): only the live row, incomplete."""
    await manager.create(KEY)
    await fill(manager, KEY, 4)
    await compact(manager, KEY, keep=1)
    node = await manager.get_session(KEY)
    assert node is not None
    await delete_archive(storage, node.session_id)
    page = await manager.get_canonical_transcript_page(KEY, limit=10)
    assert [e.content for e in page.entries] == ["m3"]
    assert (page.has_more, page.canonical_complete) == (False, False)
    assert await manager.get_canonical_transcript_coverage(KEY) == CanonicalTranscriptCoverage(
        False, 1, False
    )


# -- coverage formula ------------------------------------------------------------------------


async def test_coverage_formula(manager: SessionManager, storage: SessionStorage) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 3)
    assert await manager.is_canonical_transcript_complete(KEY)  # never compacted
    node = await manager.get_session(KEY)
    assert node is not None
    assert await storage.get_canonical_transcript_coverage(
        node.session_id
    ) == CanonicalTranscriptCoverage(True, 0, False)
    # A summary without archive rows (a legacy text summary): S != C, M = 1.
    summary = await storage.save_summary(
        SessionSummary(
            session_id=node.session_id,
            session_key=KEY,
            summary_text="s",
            compaction_id="c1",
            removed_count=0,
            covered_through_id=2,
        )
    )
    assert not await storage.is_canonical_transcript_complete(node.session_id)
    await set_session_columns(storage, KEY, compaction_count=1)
    # C matches now, but a checkpoint-only summary (removed 0, covered > 0) is mismatched.
    assert not await storage.is_canonical_transcript_complete(node.session_id)
    assert summary.id is not None
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE session_summaries SET covered_through_id = 0 WHERE id = :id"),
            {"id": summary.id},
        )
    assert await storage.is_canonical_transcript_complete(node.session_id)
    await set_session_columns(storage, KEY, compaction_count=-4)  # counted as 0: S != C
    assert await storage.get_canonical_transcript_coverage(
        node.session_id
    ) == CanonicalTranscriptCoverage(False, 0, False)


async def test_coverage_of_an_unknown_or_replaced_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    unknown = CanonicalTranscriptCoverage(False, 0, False)
    assert await storage.get_canonical_transcript_coverage("no-such-id") == unknown
    await manager.create(KEY)
    old = await manager.get_session(KEY)
    assert old is not None
    await manager.reset(KEY)
    assert await storage.get_canonical_transcript_coverage(old.session_id) == unknown
    assert await storage.is_canonical_transcript_complete(old.session_id) is False
    assert await manager.is_canonical_transcript_complete(KEY)


# -- the iterator ---------------------------------------------------------------------------


async def test_iterator_yields_the_canonical_transcript(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 7)
    await compact(manager, KEY, keep=3)
    rows = await manager.get_canonical_transcript(KEY)
    for size in (1, 2, 3, 7, 8, 500):
        assert [e async for e in manager.iter_canonical_transcript(KEY, page_size=size)] == rows


async def test_iterator_across_a_compaction_and_appends_between_pages(
    manager: SessionManager, other: SessionManager
) -> None:
    """A compaction committed between two pages moves rows the walk has and has not
    reached; an append lands after the walk's position: each row once, in order."""
    await manager.create(KEY)
    await fill(manager, KEY, 9)
    before = await manager.get_canonical_transcript(KEY)
    walk = manager.iter_canonical_transcript(KEY, page_size=3)
    seen = [await anext(walk) for _ in range(4)]  # page 1 and the first row of page 2
    await compact(other, KEY, keep=2)  # rows 0..6 archived: read, in the held page, unread
    await fill(other, KEY, 1, start=9)
    seen.extend([entry async for entry in walk])
    after = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in after] == [f"m{n}" for n in range(10)]
    assert seen == after
    assert seen[:9] == before


async def test_iterator_checks_its_page_size_at_the_call(manager: SessionManager) -> None:
    for bad in ("2", 1.0, None, True):
        with pytest.raises(InvalidInputError, match="page_size"):
            manager.iter_canonical_transcript(KEY, page_size=bad)  # type: ignore[arg-type]


async def test_iterator_ends_when_the_generation_is_reset(manager: SessionManager) -> None:
    await manager.create(KEY)
    await fill(manager, KEY, 4)
    walk = manager.iter_canonical_transcript(KEY, page_size=2)
    first = [await anext(walk), await anext(walk)]
    await manager.reset(KEY)
    assert [e.content for e in first] == ["m0", "m1"]
    assert [entry async for entry in walk] == []


# -- fork-lineage proof ------------------------------------------------------------------------


async def _compacted_parent(manager: SessionManager, compactions: int = 2) -> None:
    await manager.create(PARENT)
    for n in range(compactions):
        await fill(manager, PARENT, 3, start=3 * n)
        await compact(manager, PARENT, keep=1)


async def _node(manager: SessionManager, key: str) -> Any:
    node = await manager.get_session(key)
    assert node is not None
    return node


async def test_full_fork_of_a_complete_parent_is_complete(manager: SessionManager) -> None:
    await _compacted_parent(manager)
    parent_rows = await manager.get_canonical_transcript(PARENT)
    child = await manager.branch(PARENT, CHILD, fork_transcript=True)
    assert child.forked_from_parent
    assert child.schema_version >= CANONICAL_FORK_PROOF_SCHEMA_VERSION
    assert (await _node(manager, CHILD)).compaction_count == 2
    coverage = await manager.get_canonical_transcript_coverage(CHILD)
    assert coverage == CanonicalTranscriptCoverage(True, 2, True)
    child_rows = await walk_before(manager, CHILD, 2)
    assert [e.content for e in child_rows] == [e.content for e in parent_rows]
    assert [e.turn_context for e in child_rows] == [e.turn_context for e in parent_rows]


async def test_full_and_prefix_forks_of_an_incomplete_parent_stay_incomplete(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _compacted_parent(manager)
    await delete_archive(storage, (await _node(manager, PARENT)).session_id)
    assert not await manager.is_canonical_transcript_complete(PARENT)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    # One more than the two summaries the full fork copies (upstream: max(1, C) = 2).
    assert await manager.get_canonical_transcript_coverage(CHILD) == CanonicalTranscriptCoverage(
        False, 3, True
    )
    [live] = await manager.get_transcript(PARENT)
    prefix = await manager.branch(
        PARENT, "agent:main:prefix", fork_transcript=True, fork_before_message_id=live.message_id
    )
    assert prefix.forked_from_parent and prefix.schema_version >= 2
    assert await manager.get_canonical_transcript_coverage(
        "agent:main:prefix"
    ) == CanonicalTranscriptCoverage(False, 2, True)


async def test_fork_uses_the_parents_coverage_at_branch_time(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Complete, then made incomplete (a legacy summary), then branched: the child sees
    the parent as it is now."""
    await manager.create(PARENT)
    await fill(manager, PARENT, 3)
    first = await manager.branch(PARENT, "agent:main:early", fork_transcript=True)
    assert first.compaction_count == 0
    assert await manager.is_canonical_transcript_complete("agent:main:early")
    parent = await _node(manager, PARENT)
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="x")
    )
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    # One more than the copied summary, which has no compaction id either: incomplete.
    assert (await _node(manager, CHILD)).compaction_count == 2
    assert not await manager.is_canonical_transcript_complete(CHILD)


async def test_prefix_fork_of_a_complete_parent_is_complete(manager: SessionManager) -> None:
    await _compacted_parent(manager)
    await fill(manager, PARENT, 2, start=6)
    rows = await manager.get_canonical_transcript(PARENT)
    await manager.branch(
        PARENT, CHILD, fork_transcript=True, fork_before_message_id=rows[4].message_id
    )
    child = await _node(manager, CHILD)
    assert (child.compaction_count, child.schema_version) == (0, 2)
    assert [e.content for e in await manager.get_transcript(CHILD)] == [e.content for e in rows[:4]]
    assert await manager.get_canonical_transcript_coverage(CHILD) == CanonicalTranscriptCoverage(
        True, 0, True
    )


@pytest.mark.parametrize("copy", ["plain", "over_budget"])
async def test_a_branch_without_copies_carries_no_lineage(
    manager: SessionManager, copy: str
) -> None:
    await _compacted_parent(manager)
    options: dict[str, Any] = {"fork_transcript": False}
    if copy == "over_budget":
        options = {"fork_transcript": True, "max_fork_tokens": 0}
        await manager.append_message(PARENT, "user", "big", token_count=50)
    child = await manager.branch(PARENT, CHILD, **options)
    stored = await _node(manager, CHILD)
    assert (child.forked_from_parent, stored.schema_version, stored.compaction_count) == (
        False,
        1,
        0,
    )
    assert await manager.is_canonical_transcript_complete(CHILD)


@pytest.mark.parametrize("parent_state", ["complete", "incomplete", "missing"])
async def test_a_legacy_zero_evidence_fork_fails_closed(
    manager: SessionManager, storage: SessionStorage, parent_state: str
) -> None:
    """A fork written before the proof (``schema_version`` 1) is never complete, whatever
    its parent is, and its own compactions cannot make it so."""
    await manager.create(PARENT)
    await fill(manager, PARENT, 3)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    await set_session_columns(storage, CHILD, forked_from_parent=True, schema_version=1)
    if parent_state == "incomplete":
        parent = await _node(manager, PARENT)
        await storage.save_summary(
            SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="x")
        )
    elif parent_state == "missing":
        await manager.delete(PARENT)
    assert not await manager.is_canonical_transcript_complete(CHILD)
    await compact(manager, CHILD, keep=1)
    assert await manager.get_canonical_transcript_coverage(CHILD) == CanonicalTranscriptCoverage(
        False, 1, True
    )


@pytest.mark.parametrize("replacement", ["reset", "recreate"])
async def test_a_replaced_parent_cannot_certify_a_legacy_fork(
    manager: SessionManager, storage: SessionStorage, replacement: str
) -> None:
    await manager.create(PARENT)
    await fill(manager, PARENT, 2)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    await set_session_columns(storage, CHILD, schema_version=1)
    if replacement == "reset":
        await manager.reset(PARENT)
    else:
        await manager.delete(PARENT)
        await manager.create(PARENT)
    assert await manager.is_canonical_transcript_complete(PARENT)
    assert not await manager.is_canonical_transcript_complete(CHILD)


async def test_a_new_full_fork_of_a_legacy_zero_count_fork_stays_incomplete(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(PARENT)
    await fill(manager, PARENT, 2)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    await set_session_columns(storage, CHILD, schema_version=1)
    await manager.branch(CHILD, "agent:main:grandchild", fork_transcript=True)
    grandchild = await _node(manager, "agent:main:grandchild")
    assert (grandchild.compaction_count, grandchild.schema_version) == (1, 2)
    assert not await manager.is_canonical_transcript_complete("agent:main:grandchild")


async def test_a_full_fork_of_a_compacted_legacy_fork_stays_incomplete(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The parent is incomplete only for its lineage: its own compaction matches. The
    child copies that summary, so upstream's count ``max(1, C)`` = 1 would be matched
    (S >= C) and certify it; one more than the copied summaries keeps it incomplete."""
    await manager.create(PARENT)
    await fill(manager, PARENT, 2)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    await set_session_columns(storage, CHILD, schema_version=1)
    await fill(manager, CHILD, 4, start=2)
    await compact(manager, CHILD, keep=1)
    assert await manager.get_canonical_transcript_coverage(CHILD) == CanonicalTranscriptCoverage(
        False, 1, True
    )
    await manager.branch(CHILD, "agent:main:grandchild", fork_transcript=True)
    grandchild = await _node(manager, "agent:main:grandchild")
    assert (grandchild.compaction_count, grandchild.schema_version) == (2, 2)
    assert len(await manager.get_summaries("agent:main:grandchild")) == 1
    assert not await manager.is_canonical_transcript_complete("agent:main:grandchild")


async def test_reset_of_a_legacy_fork_starts_a_proven_empty_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _compacted_parent(manager, compactions=1)
    await manager.branch(PARENT, CHILD, fork_transcript=True)
    await set_session_columns(storage, CHILD, schema_version=1)
    assert not await manager.is_canonical_transcript_complete(CHILD)
    renewed = await manager.reset(CHILD)
    assert renewed.forked_from_parent
    assert (renewed.schema_version, renewed.compaction_count) == (2, 0)
    page = await manager.get_canonical_transcript_page(CHILD, limit=5)
    assert (page.entries, page.has_more, page.canonical_complete) == ([], False, True)
    # A row that was never forked keeps its schema version through a reset.
    assert (await manager.reset(PARENT)).schema_version == 1
