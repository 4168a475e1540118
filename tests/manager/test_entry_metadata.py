"""Per-entry ``metadata`` (issue 28, item 4) carried everywhere an entry goes, exactly (key
order, nesting, unicode, NUL inside strings): the compacted archive, a fork, export and
import, a copy between stores, the reset archive (file and database), the transcript page
and the other reads; and never read by compaction (its input, its plan, the context view).

Entries with metadata are written through the storage's own insert
(``SessionStorage.append_transcript_entry``), so these tests stand without the manager's
``append_message(..., metadata=...)``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.db.tables import compacted_transcript_entries, transcript_entries
from opensquilla.session.models import TranscriptEntry
from opensquilla.session.transfer import copy_sessions, export_to_file, import_sessions
from tests.conftest import Backend

KEY = "agent:main:meta"
# Key order that is not sorted, nesting, unicode, NUL and the escape marker inside strings,
# numbers whose spelling a jsonb column would fold.
METADATA: dict[str, Any] = {
    "zeta": 1,
    "alpha": {"nested": [1, 2.5, None, True, {"y": "x", "b": [{}]}], "empty": {}},
    "ünïcode ✓": "naïve — 日本語",
    "nul": "before\x00after",
    "marker": "\ufdd0 and a backslash \\0",
    "big": 2**62,
    "float": 1e16,
    "negative zero": -0.0,
}
WINDOW = 1000


def _metadata(index: int) -> dict[str, Any]:
    return {"index": index, **METADATA, "last": f"entry {index}"}


def _same(got: Any, want: Any) -> None:
    """Equal, key order included, at every level (``==`` on dicts ignores the order)."""
    assert json.dumps(got, ensure_ascii=False) == json.dumps(want, ensure_ascii=False)


async def _seed(
    manager: SessionManager,
    key: str = KEY,
    count: int = 6,
    metadata: Sequence[Mapping[str, Any] | None] | None = None,
) -> list[TranscriptEntry]:
    """``count`` user entries of 200 reported tokens each (a ``WINDOW`` compacts), entry
    ``i`` carrying ``metadata[i]`` (by default :func:`_metadata`)."""
    node, _ = await manager.get_or_create(key)
    written = []
    for index in range(count):
        meta = _metadata(index) if metadata is None else metadata[index]
        entry = TranscriptEntry(
            session_id=node.session_id,
            session_key=key,
            role="user" if index % 2 == 0 else "assistant",
            content=f"message {index} " + "x" * 500,
            token_count=200,
            created_at=1_000 + index,
            metadata=dict(meta) if meta is not None else None,
        )
        written.append(await manager.storage.append_transcript_entry(entry))
    return written


async def _stored_text(storage: SessionStorage, table: sa.Table) -> list[str | None]:
    """The ``metadata`` column as the database holds it (text, not a decoded value)."""
    async with storage.engine.connect() as conn:
        query = sa.select(sa.type_coerce(table.c.metadata, sa.Text)).order_by(table.c.id)
        return list((await conn.execute(query)).scalars())


@pytest.fixture
async def other_database(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    target, cleanup = await backend.fresh_migrated(tmp_path)
    try:
        yield target
    finally:
        await cleanup()


# -- the round trip and the reads ----------------------------------------------------------


async def test_metadata_round_trips_exactly_through_every_read(manager: SessionManager) -> None:
    written = await _seed(manager, count=3, metadata=[_metadata(0), None, {}])
    assert [entry.metadata for entry in written] == [_metadata(0), None, {}]
    wanted = [_metadata(0), None, {}]
    for read in (
        await manager.get_transcript(KEY),
        await manager.get_canonical_transcript(KEY),
        await manager.get_recent_transcript(KEY, 3),
        (await manager.get_canonical_transcript_page(KEY, limit=10)).entries,
    ):
        for entry, want in zip(read, wanted, strict=True):
            _same(entry.metadata, want)
    found = await manager.get_canonical_transcript_entry(KEY, written[0].message_id)
    assert found is not None
    _same(found.metadata, _metadata(0))
    dumped = await manager.read_transcript(KEY)
    _same(dumped[0]["metadata"], _metadata(0))
    # Stored as JSON text in the order given (not jsonb), on both backends.
    stored = await _stored_text(manager.storage, transcript_entries)
    assert stored[0] is not None and stored[0].startswith('{"index":0,"zeta":1,"alpha":')
    assert stored[1:] == [None, "{}"]


# -- compaction carries it and never reads it -------------------------------------------------


async def test_the_compacted_archive_keeps_each_entry_s_metadata(manager: SessionManager) -> None:
    written = await _seed(manager)
    live_before = await manager.get_transcript(KEY)
    result = await manager.compact_with_result(KEY, WINDOW)
    assert result.removed_count > 0, result.skip_reason
    node = await manager.get_session(KEY)
    assert node is not None
    archived = await manager.storage.get_compacted_transcript_entries(node.session_id)
    assert len(archived) == result.removed_count
    by_id = {entry.id: entry for entry in live_before}
    for row in archived:
        _same(row.metadata, by_id[row.original_entry_id].metadata)
    # The kept rows keep theirs, and the canonical transcript is whole, metadata and all.
    for entry, want in zip(await manager.get_canonical_transcript(KEY), written, strict=True):
        _same(entry.metadata, want.metadata)
    live_text = await _stored_text(manager.storage, transcript_entries)
    archive_text = await _stored_text(manager.storage, compacted_transcript_entries)
    assert archive_text + live_text == [
        json.dumps(e.metadata, ensure_ascii=False, separators=(",", ":")) for e in written
    ]


def _anonymous(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries without the row's identity (which differs between two sessions); every
    other key kept, so a ``metadata`` key would show."""
    return [{k: v for k, v in e.items() if k not in ("id", "message_id")} for e in entries]


class _Recording:
    """A summariser that records what it is given and always answers the same."""

    source = "llm"

    def __init__(self) -> None:
        self.chunks: list[list[dict[str, Any]]] = []

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.chunks.append(_anonymous(chunk))
        return "the summary"


async def test_compaction_never_reads_metadata(manager: SessionManager) -> None:
    """Two transcripts differing only in metadata: the same summariser input, the same
    plan (removed, kept, token figures), the same context view."""
    plain, rich = "agent:main:plain", "agent:main:rich"
    await _seed(manager, plain, metadata=[None] * 6)
    await _seed(
        manager,
        rich,
        metadata=[{"content": "not the content", "role": "system", "token_count": 10**9}]
        + [_metadata(i) for i in range(1, 6)],
    )
    views = [await manager.get_context_view(key, max_tokens=500) for key in (plain, rich)]
    shapes = [
        (
            [(e.role, e.content, e.token_count) for e in view.messages],
            view.max_tokens,
            view.summary_tokens,
            view.budget_tokens,
            view.message_tokens,
            view.truncated,
        )
        for view in views
    ]
    assert shapes[0] == shapes[1] and shapes[0][0]

    outcomes = []
    for key in (plain, rich):
        summarizer = _Recording()
        result = await manager.compact_with_result(key, WINDOW, summarizer=summarizer)
        assert result.removed_count > 0, result.skip_reason
        for chunk in summarizer.chunks:
            for entry in chunk:
                assert "metadata" not in entry
        outcomes.append(
            (
                summarizer.chunks,
                result.summary,
                result.removed_count,
                _anonymous(result.kept_entries),
                result.tokens_before,
                result.tokens_after,
            )
        )
    assert outcomes[0] == outcomes[1]


async def test_search_never_sees_metadata(manager: SessionManager) -> None:
    await _seed(manager, count=2, metadata=[{"needle": "zebraword"}, {"zebraword": 1}])
    for query in ("zebraword", "ebrawor"):
        found = await manager.search(query, session_key=KEY)
        assert found.messages == [], query
    assert (await manager.search("message", session_key=KEY)).messages


# -- fork, reset archive ----------------------------------------------------------------------


async def test_a_fork_copies_metadata_live_and_archived(manager: SessionManager) -> None:
    written = await _seed(manager)
    result = await manager.compact_with_result(KEY, WINDOW)
    assert result.removed_count > 0
    child = await manager.branch(KEY, "agent:main:child", fork_transcript=True)
    copied = await manager.get_canonical_transcript("agent:main:child")
    assert len(copied) == len(written)
    for entry, want in zip(copied, written, strict=True):
        _same(entry.metadata, want.metadata)
    archived = await manager.storage.get_compacted_transcript_entries(child.session_id)
    assert archived and all(row.metadata is not None for row in archived)

    # A prefix fork: the rows before the message, each with its metadata.
    prefix = await manager.branch(
        KEY,
        "agent:main:prefix",
        fork_transcript=True,
        fork_before_message_id=written[4].message_id,
    )
    assert prefix.session_key == "agent:main:prefix"
    got = await manager.get_transcript("agent:main:prefix")
    assert len(got) == 4
    for entry, want in zip(got, written[:4], strict=True):
        _same(entry.metadata, want.metadata)


async def test_a_reset_archive_file_carries_metadata(manager: SessionManager) -> None:
    written = await _seed(manager, count=2)
    report = await manager.reset_with_report(KEY)
    assert report.archive_path is not None
    document = json.loads(report.archive_path.read_text(encoding="utf-8"))
    for row, want in zip(document["transcript_entries"], written, strict=True):
        _same(row["metadata"], want.metadata)


async def test_a_reset_archive_row_carries_metadata(database: str) -> None:
    async with SessionStorage(database, archive_store="database") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        written = await _seed(manager, count=2)
        await manager.reset(KEY)
        [stored] = await manager.list_session_archives(KEY)
        document = await manager.read_session_archive(stored.id)
    assert document is not None
    for row, want in zip(document["transcript_entries"], written, strict=True):
        _same(row["metadata"], want.metadata)


# -- export, import, copy -------------------------------------------------------------------


async def test_export_and_import_carry_metadata(
    manager: SessionManager, other_database: str, tmp_path: Path
) -> None:
    written = await _seed(manager)
    await manager.compact_with_result(KEY, WINDOW)
    path = tmp_path / "export.jsonl"
    await export_to_file(manager.storage, path)
    header = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert ["metadata", "json"] in header["tables"]["transcript_entries"]
    assert ["metadata", "json"] in header["tables"]["compacted_transcript_entries"]
    async with SessionStorage(other_database) as target:
        summary = await import_sessions(target, path)
        assert summary.imported == [KEY]
        imported = SessionManager(target, inject_time_prefix=False)
        for entry, want in zip(await imported.get_canonical_transcript(KEY), written, strict=True):
            _same(entry.metadata, want.metadata)
        # Importing again: the same contents, recognised as such.
        again = await import_sessions(target, path)
        assert again.unchanged == [KEY]
        assert await _stored_text(target, transcript_entries) == await _stored_text(
            manager.storage, transcript_entries
        )
    # Key order is part of the value: a file whose metadata differs only in order is
    # other contents (jsonb columns compare without it; metadata is text).
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        if line["kind"] == "row" and line["row"].get("metadata"):
            line["row"]["metadata"] = dict(reversed(list(line["row"]["metadata"].items())))
        if line["kind"] == "end":
            line.pop("sha256")
    path.write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    async with SessionStorage(other_database) as target:
        reordered = await import_sessions(target, path, if_exists="skip")
    assert (reordered.unchanged, reordered.skipped) == ([], [KEY])


async def test_an_export_written_before_the_field_imports_with_metadata_none(
    manager: SessionManager, other_database: str, tmp_path: Path
) -> None:
    await _seed(manager, count=2)
    path = tmp_path / "export.jsonl"
    await export_to_file(manager.storage, path)
    # The file as a release without the column wrote it: no ``metadata`` in the header's
    # columns or in any row, and the blocks' digests recomputed by dropping them.
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    old = []
    for line in lines:
        if line["kind"] == "header":
            for table in ("transcript_entries", "compacted_transcript_entries"):
                line["tables"][table] = [c for c in line["tables"][table] if c[0] != "metadata"]
        if line["kind"] == "row":
            line["row"].pop("metadata", None)
        if line["kind"] == "end":
            line.pop("sha256")
        old.append(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
    path.write_text("\n".join(old) + "\n", encoding="utf-8")
    async with SessionStorage(other_database) as target:
        summary = await import_sessions(target, path)
        assert summary.imported == [KEY]
        entries = await SessionManager(target).get_transcript(KEY)
    assert [entry.metadata for entry in entries] == [None, None]


async def test_copy_between_stores_carries_metadata_exactly(
    manager: SessionManager, other_database: str
) -> None:
    written = await _seed(manager)
    await manager.compact_with_result(KEY, WINDOW)
    async with SessionStorage(other_database) as target:
        report = await copy_sessions(manager.storage, target)
        assert report.copied == 1 if hasattr(report, "copied") else True
        assert all(check.ok for check in report.checks)
        copied = await SessionManager(target).get_canonical_transcript(KEY)
        for entry, want in zip(copied, written, strict=True):
            _same(entry.metadata, want.metadata)
        for table in (transcript_entries, compacted_transcript_entries):
            assert await _stored_text(target, table) == await _stored_text(manager.storage, table)
