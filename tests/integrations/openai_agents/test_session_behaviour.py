"""``OpenSquillaSession``, method by method, on both backends (a given store and a DSN):
the SDK's documented session behaviour (ordering, limits, ``session_settings.limit``, pop
on empty, clear, several sessions side by side) and what the store adds (the item mapping
search and the context view see, the compaction summary item, clear as a reset)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from agents.memory import SessionSettings

from opensquilla.session import InvalidInputError, SessionManager, SessionStorage
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.integrations.openai_agents import ITEM_KEY, OpenSquillaSession

from .items_catalog import ITEMS
from .scripted import PADDING, RememberingSummarizer


def _turn(i: int) -> list[Any]:
    return [
        {"role": "user", "content": f"question {i}"},
        {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"result {i}"},
        {"role": "assistant", "content": f"answer {i}"},
    ]


@pytest.fixture
async def session(storage: SessionStorage) -> OpenSquillaSession:
    return OpenSquillaSession("s-1", storage)


async def test_items_come_back_in_order_and_equal(session: OpenSquillaSession) -> None:
    await session.add_items(_turn(0))
    await session.add_items(_turn(1))
    assert await session.get_items() == _turn(0) + _turn(1)


async def test_every_item_kind_round_trips_exactly(session: OpenSquillaSession) -> None:
    await session.add_items(ITEMS)
    got = await session.get_items()
    assert got == ITEMS
    # key order and the float's sign too (== would not see them)
    assert [list(item) for item in got] == [list(item) for item in ITEMS]
    assert math.copysign(1, got[-1]["extra"]["a"][1]) == -1
    assert [await session.pop_item() for _ in ITEMS] == ITEMS[::-1]
    assert await session.pop_item() is None


async def test_limits(session: OpenSquillaSession) -> None:
    items = _turn(0) + _turn(1)
    await session.add_items(items)
    assert await session.get_items(limit=3) == items[-3:]
    assert await session.get_items(limit=100) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items  # as SQLiteSession (SQLite's LIMIT -1)
    session.session_settings = SessionSettings(limit=2)
    assert await session.get_items() == items[-2:]
    assert await session.get_items(limit=5) == items[-5:]  # the argument wins


async def test_session_settings_given_as_a_dict(storage: SessionStorage) -> None:
    session = OpenSquillaSession("s-2", storage, session_settings={"limit": 1})
    assert session.session_settings == SessionSettings(limit=1)
    await session.add_items(_turn(0))
    assert await session.get_items() == _turn(0)[-1:]


async def test_an_unknown_session_is_empty_and_never_created(
    session: OpenSquillaSession, manager: SessionManager
) -> None:
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.clear_session()
    await session.add_items([])
    assert await manager.get_session(session.session_key) is None


async def test_pop_takes_the_newest_and_empty_gives_none(session: OpenSquillaSession) -> None:
    await session.add_items(_turn(0))
    assert await session.pop_item() == _turn(0)[3]
    assert await session.pop_item() == _turn(0)[2]
    assert await session.get_items() == _turn(0)[:2]
    await session.pop_item()
    await session.pop_item()
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_clear_deletes_by_default(
    session: OpenSquillaSession, manager: SessionManager
) -> None:
    await session.add_items(_turn(0))
    await session.clear_session()
    assert await session.get_items() == []
    assert await manager.get_session(session.session_key) is None
    await session.add_items(_turn(1))  # usable again: created anew
    assert await session.get_items() == _turn(1)


async def test_clear_as_a_reset_archives_and_fences(
    storage: SessionStorage, manager: SessionManager
) -> None:
    session = OpenSquillaSession("s-3", storage, clear="reset")
    await session.add_items(_turn(0))
    old = await manager.get_session(session.session_key)
    assert old is not None
    await session.clear_session()
    assert await session.get_items() == []
    new = await manager.get_session(session.session_key)
    assert new is not None and new.epoch > old.epoch and new.session_id != old.session_id
    assert await storage.get_transcript(old.session_id) == []  # moved to the reset archive
    await session.add_items(_turn(1))
    assert await session.get_items() == _turn(1)


async def test_sessions_side_by_side_never_mix(storage: SessionStorage, database: str) -> None:
    one = OpenSquillaSession("same", storage)
    other_agent = OpenSquillaSession("same", storage, agent_id="Planner")
    other_id = OpenSquillaSession("same ", storage)
    by_dsn = OpenSquillaSession("same", database)  # the same key through a DSN: the same data
    try:
        await one.add_items(_turn(0))
        await other_agent.add_items(_turn(1))
        await other_id.add_items(_turn(2))
        assert await one.get_items() == _turn(0)
        assert await other_agent.get_items() == _turn(1)
        assert await other_id.get_items() == _turn(2)
        assert await by_dsn.get_items() == _turn(0)
        assert other_agent.session_key == "agent:planner:openai-agents:same"
        await one.clear_session()
        assert await other_agent.get_items() == _turn(1)
    finally:
        await by_dsn.close()


async def test_a_bad_batch_writes_nothing(session: OpenSquillaSession) -> None:
    await session.add_items(_turn(0))
    with pytest.raises(TypeError, match="mapping"):
        await session.add_items([{"role": "user", "content": "ok"}, "not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError):
        await session.add_items(
            [{"role": "user", "content": "ok"}, {"role": "user", "x": math.nan}]
        )
    assert await session.get_items() == _turn(0)


async def test_the_entry_fields_describe_the_items(
    session: OpenSquillaSession, manager: SessionManager
) -> None:
    await session.add_items(_turn(7))
    entries = await manager.get_transcript(session.session_key)
    assert [e.role for e in entries] == ["user", "assistant", "tool", "assistant"]
    assert entries[1].tool_calls == [
        {"id": "c7", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert (entries[2].tool_call_id, entries[2].content) == ("c7", "result 7")
    assert all(e.metadata is not None and ITEM_KEY in e.metadata for e in entries)
    view = await manager.get_context_view(session.session_key, max_tokens=10_000)
    chat = view.as_chat_messages()
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "assistant"]
    assert chat[2]["tool_call_id"] == "c7"
    hits = await manager.search_transcript("result", session_key=session.session_key)
    assert [h.id for h in hits] == [entries[2].id]


async def test_rows_written_by_other_code_read_as_messages(
    session: OpenSquillaSession, manager: SessionManager
) -> None:
    await session.add_items(_turn(0)[:1])
    await manager.append_message(session.session_key, "user", "injected by the gateway")
    await manager.append_message(session.session_key, "tool", "out", tool_call_id="c9")
    items = await session.get_items()
    assert items[1:] == [
        {"role": "user", "content": "injected by the gateway"},
        {"type": "function_call_output", "call_id": "c9", "output": "out"},
    ]


async def test_rows_of_other_code_with_metadata_or_tool_calls_read_by_their_fields(
    session: OpenSquillaSession, manager: SessionManager
) -> None:
    """A row whose metadata holds no item (its writer's own) reads as a message of its
    fields, an assistant tool call of other code is left out, and the limit counts rows."""
    await session.add_items(_turn(0))
    call = {"id": "c8", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    await manager.append_messages(
        session.session_key,
        [
            {"role": "assistant", "content": "note", "metadata": {"writer": "gateway"}},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ],
    )
    await session.add_items(_turn(1)[:1])
    note = {"role": "assistant", "content": "note"}
    assert await session.get_items() == [*_turn(0), note, _turn(1)[0]]
    assert await session.get_items(limit=3) == [note, _turn(1)[0]]
    assert await session.get_items(limit=1) == [_turn(1)[0]]


async def test_after_a_compaction_the_summary_leads(storage: SessionStorage) -> None:
    session = OpenSquillaSession("s-4", storage, summarizer=RememberingSummarizer())
    turns = [
        [
            {"role": "user", "content": f"remember w{i}{PADDING}"},
            {"role": "assistant", "content": "ok"},
        ]
        for i in range(10)
    ]
    for turn in turns:
        await session.add_items(turn)
    assert (await session.needs_compaction(300)).should_compact
    result = await session.compact(300)
    assert result.removed_count > 0
    live = [item for turn in turns for item in turn][result.removed_count :]
    items = await session.get_items()
    assert items[0]["role"] == "system" and "remember w0" in items[0]["content"]
    assert items[1:] == live
    # the summary counts as the oldest item: a limit that reaches past the live items
    assert await session.get_items(limit=len(live) + 1) == items
    assert await session.get_items(limit=len(live)) == live
    assert await session.get_items(limit=2) == live[-2:]
    # pops never return it; the folded items are kept in the compacted archive
    manager = await session.manager()
    canonical = await manager.get_canonical_transcript(session.session_key)
    assert len(canonical) == len(live) + result.removed_count
    for role in ("developer", None):
        other = OpenSquillaSession("s-4", storage, summary_role=role)  # type: ignore[arg-type]
        got = await other.get_items()
        assert got == ([{**items[0], "role": "developer"}] if role else []) + live


async def test_a_closed_session_refuses_and_the_callers_store_stays_open(
    storage: SessionStorage,
) -> None:
    async with OpenSquillaSession("s-5", storage) as session:
        await session.add_items(_turn(0))
    for call in (session.get_items(), session.add_items(_turn(1)), session.pop_item()):
        with pytest.raises(RuntimeError, match="closed"):
            await call
    with pytest.raises(RuntimeError, match="closed"):
        await session.add_items([])
    await session.close()  # idempotent
    assert storage.is_connected
    assert await OpenSquillaSession("s-5", storage).get_items() == _turn(0)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="clear"):
        OpenSquillaSession("x", ":memory:", clear="wipe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="summary_role"):
        OpenSquillaSession("x", ":memory:", summary_role="tool")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="storage"):
        OpenSquillaSession("x", 42)  # type: ignore[arg-type]


async def test_a_compaction_between_the_two_reads_is_seen_whole(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_items`` reads the rows and the summary as of one moment: a compaction that
    commits just after the rows were read is not seen at all (every item, no summary), and
    the next read sees it whole (the summary and the items it left)."""
    session = OpenSquillaSession("s-6", storage, summarizer=RememberingSummarizer())
    items_in = [{"role": "user", "content": f"remember w{i}{PADDING}"} for i in range(10)]
    for item in items_in:
        await session.add_items([item])
    read_lines = TranscriptRepository.current_lines
    results = []

    async def compaction_after_the_rows(self: Any, *args: Any, **kwargs: Any) -> Any:
        lines = await read_lines(self, *args, **kwargs)
        if not results:
            results.append(await session.compact(300))
        return lines

    monkeypatch.setattr(TranscriptRepository, "current_lines", compaction_after_the_rows)
    assert await session.get_items() == items_in
    assert results[0].removed_count > 0
    items = await session.get_items()
    assert len(items) == 1 + 10 - results[0].removed_count
    assert items[0]["role"] == "system"
    assert items[1:] == items_in[results[0].removed_count :]
