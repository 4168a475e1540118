"""``SessionManager.get_transcript_lines``: the lean read of the live transcript (six
columns of each row as a ``TranscriptLine``, and the latest summary from the same
snapshot). Each line holds exactly the values of its row's ``TranscriptEntry``; the limit
is ``get_recent_transcript``'s. Both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionManager, TranscriptLine, TranscriptLines
from opensquilla.session.db.repos.summaries import SummaryRepository
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError
from opensquilla.session.models.messages import MessageInput

KEY = "agent:main:lines"
# Key order that is not sorted, nesting, unicode, NUL and the escape marker inside strings.
METADATA: dict[str, Any] = {
    "zeta": 1,
    "alpha": {"nested": [1, 2.5, None, True, {"y": "x"}], "empty": {}},
    "ünïcode ✓": "naïve — 日本語",
    "nul": "before\x00after",
    "marker": "\ufdd0 and a backslash \\0",
    "float": 1e16,
}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _messages() -> list[MessageInput]:
    return [
        {"role": "user", "content": "hello\x00there", "metadata": METADATA},
        {"role": "assistant", "content": None, "tool_calls": [CALL], "token_count": 3},
        {"role": "tool", "content": "\ufdd0 out", "tool_call_id": "c1", "metadata": {}},
        {"role": "assistant", "content": "done", "reasoning_content": "thought"},
        {"role": "user", "content": "", "metadata": {"b": 2, "a": 1}},
    ]


def _line_of(entry: Any) -> TranscriptLine:
    return TranscriptLine(
        entry.id, entry.role, entry.content, entry.tool_calls, entry.tool_call_id, entry.metadata
    )


def _dump(lines: list[TranscriptLine]) -> str:
    """The lines as text: equal texts are equal values, key order and types included."""
    return json.dumps([tuple(line) for line in lines], ensure_ascii=False)


@pytest.fixture
async def written(manager: SessionManager) -> list[TranscriptLine]:
    await manager.create(KEY)
    await manager.append_messages(KEY, _messages())
    return [_line_of(entry) for entry in await manager.get_transcript(KEY)]


async def test_each_line_holds_its_entrys_values(
    manager: SessionManager, written: list[TranscriptLine]
) -> None:
    read = await manager.get_transcript_lines(KEY)
    assert isinstance(read, TranscriptLines) and read.summary is None
    assert read.lines == written and _dump(read.lines) == _dump(written)
    assert all(isinstance(line, TranscriptLine) for line in read.lines)
    assert read.lines[0].metadata == METADATA
    assert list(read.lines[0].metadata or {}) == list(METADATA)  # key order kept
    assert read.lines[1].tool_calls == [CALL]


async def test_a_limit_is_the_newest_rows_oldest_first(
    manager: SessionManager, written: list[TranscriptLine]
) -> None:
    for limit in (1, 2, 4, 5, 6, 1000):
        read = await manager.get_transcript_lines(KEY, limit)
        assert _dump(read.lines) == _dump(written[-limit:])
        recent = await manager.get_recent_transcript(KEY, limit)
        assert read.lines == [_line_of(entry) for entry in recent]
    assert (await manager.get_transcript_lines(KEY, 0)).lines == []


async def test_metadata_only_reads_the_id_and_the_metadata(
    manager: SessionManager, written: list[TranscriptLine]
) -> None:
    for limit in (None, 2):
        read = await manager.get_transcript_lines(KEY, limit, metadata_only=True)
        want = [TranscriptLine(line.id, None, None, None, None, line.metadata) for line in written]
        assert _dump(read.lines) == _dump(want if limit is None else want[-limit:])


async def test_bad_arguments_and_a_missing_key_are_refused(
    manager: SessionManager, written: list[TranscriptLine]
) -> None:
    for limit in (-1, 1.0, "3", True):
        with pytest.raises(InvalidInputError, match="limit"):
            await manager.get_transcript_lines(KEY, limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="summary"):
        await manager.get_transcript_lines(KEY, summary=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="metadata_only"):
        await manager.get_transcript_lines(KEY, metadata_only="yes")  # type: ignore[arg-type]
    for limit in (None, 0):
        with pytest.raises(SessionNotFoundError):
            await manager.get_transcript_lines("agent:main:absent", limit, summary=True)


async def test_the_summary_is_the_latest_one_beside_the_rows_it_left(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    await manager.append_messages(KEY, [{"role": "user", "content": f"m{n}"} for n in range(6)])
    assert (await manager.get_transcript_lines(KEY, summary=True)).summary is None
    for text in ("first summary", "second summary"):
        await manager.append_messages(KEY, [{"role": "user", "content": "m5"}])
        kept = [{"role": "user", "content": "m5"}]
        assert await manager.persist_compaction_result(KEY, text, kept)
    read = await manager.get_transcript_lines(KEY, summary=True)
    latest = await manager.get_latest_summary(KEY)
    assert read.summary == latest and latest is not None
    assert latest.summary_text == "second summary"
    assert [line.content for line in read.lines] == ["m5"]
    assert [line.id for line in read.lines] == [
        entry.id for entry in await manager.get_transcript(KEY)
    ]
    assert (await manager.get_transcript_lines(KEY)).summary is None
    assert (await manager.get_transcript_lines(KEY, 0, summary=True)).summary == latest


async def test_only_the_lines_columns_are_read_in_one_statement(
    manager: SessionManager, written: list[TranscriptLine]
) -> None:
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    engine = manager.storage.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        await manager.get_transcript_lines(KEY, 3, summary=True)
        await manager.get_transcript_lines(KEY, metadata_only=True)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    # One statement a read (the generation and its latest summary's id in it too).
    full, lean = seen
    for unread in ("message_id", "turn_usage", "turn_context", "reasoning_content", "provenance"):
        assert unread not in full
    for unread in ("role", "content", "tool_calls", "tool_call_id"):
        assert f"transcript_entries.{unread}" not in lean


async def _compacted(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_messages(KEY, [{"role": "user", "content": f"m{n}"} for n in range(4)])
    assert await manager.persist_compaction_result(KEY, "the summary", [{"content": "m3"}])


async def test_a_summary_deleted_between_the_statements_is_read_again_in_a_snapshot(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows name a summary that is deleted before it is read: the read is made again
    from one snapshot, which sees the deletion (the rows, no summary)."""
    await _compacted(manager)
    node = await manager.get_session(KEY)
    by_id = SummaryRepository.of_key

    async def deleted_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        await manager.storage.delete_summaries(node.session_id)
        return await by_id(self, *args, **kwargs)

    monkeypatch.setattr(SummaryRepository, "of_key", deleted_first)
    read = await manager.get_transcript_lines(KEY, summary=True)
    assert [line.content for line in read.lines] == ["m3"] and read.summary is None


async def test_rows_appended_between_the_statements_are_read_again_in_a_snapshot(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No rows, then rows before the key's session is read: the snapshot read shows them."""
    await manager.create(KEY)
    lines_of = TranscriptRepository.current_lines

    async def empty_then_append(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = await lines_of(self, *args, **kwargs)
        await manager.append_messages(KEY, [{"role": "user", "content": "late"}])
        return found

    monkeypatch.setattr(TranscriptRepository, "current_lines", empty_then_append)
    read = await manager.get_transcript_lines(KEY, summary=True)
    assert [line.content for line in read.lines] == ["late"] and read.summary is None


async def test_an_empty_generation_gives_its_summary(manager: SessionManager) -> None:
    await _compacted(manager)
    await manager.truncate(KEY, 0)
    read = await manager.get_transcript_lines(KEY, summary=True)
    assert read.lines == [] and read.summary == await manager.get_latest_summary(KEY)
    assert read.summary is not None
