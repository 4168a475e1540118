"""Issue 27, the transcript domain: every public manager and storage call of the transcript,
single-message operations, reads, pages, search, context states and the context view opens
exactly one unit of work once warmed (the generation cache holding the key), or the number
its docstring states (a walk of pages: one per page; a call that reads nothing: none).

Each case is a setup-free call on a session prepared by :func:`_prepared`; the call runs
once to warm (the generation cache, SQLite's look-up of the append view) and is counted
the second time.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from opensquilla.session import MessageInput, SessionManager, SessionStorage
from opensquilla.session.manager.batches import BatchCalls
from opensquilla.session.manager.context_states import ContextStateCalls
from opensquilla.session.manager.prepared import PreparedCalls
from opensquilla.session.manager.search import SearchCalls
from opensquilla.session.manager.transcript import TranscriptCalls
from opensquilla.session.models import SessionContextState, TranscriptEntry
from opensquilla.session.storage.history import HistoryRowOperations
from opensquilla.session.storage.search import SearchOperations

from .conftest import CheckoutCounter

KEY = "agent:main:one-unit"
CHILD = "agent:main:one-unit-child"
EMPTY = "agent:main:one-unit-empty"
_serial = itertools.count()


@dataclass
class World:
    manager: SessionManager
    storage: SessionStorage
    session_id: str
    epoch: int
    entries: list[TranscriptEntry]


Call = Callable[[World], Awaitable[Any]]


def _state(w: World) -> SessionContextState:
    return SessionContextState(session_id=w.session_id, session_key=KEY, state_kind="k")


def _entry(w: World) -> TranscriptEntry:
    return TranscriptEntry(session_id=w.session_id, session_key=KEY, role="user", content="x")


def _batch(count: int) -> list[MessageInput]:
    return [{"role": "user", "content": f"batch {n}", "token_count": 1} for n in range(count)]


def _cursor(w: World) -> tuple[int, int]:
    return (w.entries[1].created_at, w.entries[1].id or 0)


async def _walk(w: World) -> list[TranscriptEntry]:
    return [entry async for entry in w.manager.iter_canonical_transcript(KEY, page_size=2)]


def _fresh_child(w: World) -> Awaitable[Any]:
    return w.manager.prepare_prefix_branch(
        KEY, f"{CHILD}-{next(_serial)}", fork_before_message_id=w.entries[1].message_id
    )


# name -> (call, units of work)
MANAGER: dict[str, tuple[Call, int]] = {
    "append_message": (lambda w: w.manager.append_message(KEY, "user", "hi", token_count=3), 1),
    "append_message[message_id]": (
        lambda w: w.manager.append_message(KEY, "assistant", "draft", message_id="reply-1"),
        1,
    ),
    "remove_message": (lambda w: w.manager.remove_message(KEY, "absent"), 1),
    # Issue 28: one write transaction for the batch (warmed), one statement for a pop or a
    # delete; an empty batch touches nothing.
    "append_messages": (lambda w: w.manager.append_messages(KEY, _batch(10)), 1),
    "append_messages[empty]": (lambda w: w.manager.append_messages(KEY, []), 0),
    "pop_message": (lambda w: w.manager.pop_message(KEY), 1),
    "pop_message[empty]": (lambda w: w.manager.pop_message(EMPTY), 1),
    "delete_entry": (lambda w: w.manager.delete_entry(KEY, w.entries[0].id or 0), 1),
    "inject_message": (lambda w: w.manager.inject_message(KEY, "from afar"), 1),
    "update_message_turn_context": (
        lambda w: w.manager.update_message_turn_context(KEY, w.entries[0].message_id, {"t": 1}),
        1,
    ),
    "prepare_message": (lambda w: w.manager.prepare_message(KEY, "user", "later"), 1),
    "notify_message_appended": (lambda w: w.manager.notify_message_appended(w.entries[0]), 0),
    "get_transcript": (lambda w: w.manager.get_transcript(KEY), 1),
    "get_canonical_transcript": (lambda w: w.manager.get_canonical_transcript(KEY), 1),
    "get_canonical_transcript_page": (
        lambda w: w.manager.get_canonical_transcript_page(KEY, limit=2),
        1,
    ),
    "get_canonical_transcript_page[cursor]": (
        lambda w: w.manager.get_canonical_transcript_page(KEY, limit=2, before=_cursor(w)),
        1,
    ),
    "get_canonical_transcript_coverage": (
        lambda w: w.manager.get_canonical_transcript_coverage(KEY),
        1,
    ),
    "is_canonical_transcript_complete": (
        lambda w: w.manager.is_canonical_transcript_complete(KEY),
        1,
    ),
    # Three rows, two a page: a full page, then a short one that ends the walk.
    "iter_canonical_transcript": (_walk, 2),
    "count_transcript_entries": (lambda w: w.manager.count_transcript_entries(KEY), 1),
    "get_recent_transcript": (lambda w: w.manager.get_recent_transcript(KEY, 2), 1),
    "get_transcript_lines": (lambda w: w.manager.get_transcript_lines(KEY), 1),
    "get_transcript_lines[summary]": (
        lambda w: w.manager.get_transcript_lines(KEY, 2, summary=True),
        1,
    ),
    "get_transcript_lines[metadata_only]": (
        lambda w: w.manager.get_transcript_lines(KEY, metadata_only=True, summary=True),
        1,
    ),
    "get_canonical_transcript_entry": (
        lambda w: w.manager.get_canonical_transcript_entry(KEY, w.entries[0].message_id),
        1,
    ),
    "read_transcript": (lambda w: w.manager.read_transcript(KEY), 1),
    "count_transcript_entries_batch": (
        lambda w: w.manager.count_transcript_entries_batch([KEY, "agent:main:absent"]),
        1,
    ),
    "list_user_transcript_content_batch": (
        lambda w: w.manager.list_user_transcript_content_batch([KEY]),
        1,
    ),
    "truncate": (lambda w: w.manager.truncate(KEY, 100), 1),
    "preview_truncate": (lambda w: w.manager.preview_truncate(KEY, 1), 1),
    "search": (lambda w: w.manager.search("hello"), 1),
    "search[session_key]": (lambda w: w.manager.search("hello", session_key=KEY), 1),
    "search_transcript": (lambda w: w.manager.search_transcript("hello", session_key=KEY), 1),
    "search_transcript_like": (
        lambda w: w.manager.search_transcript_like("hel", session_key=KEY, include_archived=True),
        1,
    ),
    "search_sessions_by_title": (lambda w: w.manager.search_sessions_by_title("one"), 1),
    "get_compaction_context_records": (
        lambda w: w.manager.get_compaction_context_records(KEY),
        1,
    ),
    "save_context_state": (lambda w: w.manager.save_context_state(_state(w)), 1),
    "get_context_states": (lambda w: w.manager.get_context_states(KEY, provider="portable"), 1),
    "get_latest_context_state": (lambda w: w.manager.get_latest_context_state(KEY), 1),
    "invalidate_context_states": (lambda w: w.manager.invalidate_context_states(KEY), 1),
    "get_context_view": (lambda w: w.manager.get_context_view(KEY, max_tokens=1000), 1),
    "prepare_intent": (lambda w: w.manager.prepare_intent(KEY, "continue"), 1),
    "prepare_prefix_branch": (_fresh_child, 1),
}

STORAGE: dict[str, tuple[Call, int]] = {
    "append_transcript_entry": (lambda w: w.storage.append_transcript_entry(_entry(w)), 1),
    "append_transcript_entry[expected_epoch]": (
        lambda w: w.storage.append_transcript_entry(_entry(w), expected_epoch=w.epoch),
        1,
    ),
    "append_message_entry": (
        lambda w: w.storage.append_message_entry(_entry(w), expected_epoch=w.epoch, now=1),
        1,
    ),
    "upsert_transcript_entry_and_touch": (
        lambda w: w.storage.upsert_transcript_entry_and_touch(
            _entry(w), expected_epoch=w.epoch, updated_at=1
        ),
        1,
    ),
    "delete_transcript_entry": (
        lambda w: w.storage.delete_transcript_entry(w.session_id, "absent"),
        1,
    ),
    "update_transcript_turn_context": (
        lambda w: w.storage.update_transcript_turn_context(KEY, "absent", None),
        1,
    ),
    "get_transcript": (lambda w: w.storage.get_transcript(w.session_id), 1),
    "get_canonical_transcript": (lambda w: w.storage.get_canonical_transcript(w.session_id), 1),
    "get_canonical_transcript_page": (
        lambda w: w.storage.get_canonical_transcript_page(w.session_id, limit=2),
        1,
    ),
    "get_canonical_transcript_page[cursor]": (
        lambda w: w.storage.get_canonical_transcript_page(w.session_id, limit=2, after=_cursor(w)),
        1,
    ),
    "get_canonical_transcript_coverage": (
        lambda w: w.storage.get_canonical_transcript_coverage(w.session_id),
        1,
    ),
    "is_canonical_transcript_complete": (
        lambda w: w.storage.is_canonical_transcript_complete(w.session_id),
        1,
    ),
    "count_transcript_entries": (lambda w: w.storage.count_transcript_entries(w.session_id), 1),
    "get_recent_transcript": (lambda w: w.storage.get_recent_transcript(w.session_id, 2), 1),
    "get_canonical_transcript_entry": (
        lambda w: w.storage.get_canonical_transcript_entry(w.session_id, "absent"),
        1,
    ),
    "count_transcript_entries_batch": (
        lambda w: w.storage.count_transcript_entries_batch([w.session_id]),
        1,
    ),
    "list_user_transcript_content_batch": (
        lambda w: w.storage.list_user_transcript_content_batch([w.session_id]),
        1,
    ),
    "delete_transcript": (lambda w: w.storage.delete_transcript("no-such-generation"), 1),
    "save_context_state": (lambda w: w.storage.save_context_state(_state(w)), 1),
    "get_context_states": (lambda w: w.storage.get_context_states(KEY, valid_only=False), 1),
    "invalidate_context_states": (
        lambda w: w.storage.invalidate_context_states(KEY, provider="portable"),
        1,
    ),
    "search_words": (lambda w: w.storage.search_words("hello", include_archived=True), 1),
    "search_substrings": (lambda w: w.storage.search_substrings("hel", w.session_id), 1),
    "search_transcript": (lambda w: w.storage.search_transcript("hello"), 1),
    "search_transcript_like": (lambda w: w.storage.search_transcript_like("hel"), 1),
    "search_sessions_by_title": (lambda w: w.storage.search_sessions_by_title("one"), 1),
}

# The domain's public methods that are no I/O at all (static) or another helper's.
MANAGER_ELSEWHERE = {"branch", "reserve_assistant_message"}
STORAGE_ELSEWHERE = {  # summaries and the compacted archive: compaction's domain
    "get_compacted_transcript_entries",
    "save_summary",
    "get_all_summaries",
    "get_latest_summary",
    "delete_summaries",
    "list_degraded_summaries",
    "update_summary_flush_receipt_status",
    "update_summary_flush_receipt_status_by_compaction",
    "get_summary",
    "sanitize_fts_query",
}
MANAGER_IN_INIT = {
    "get_context_view",
    "preview_truncate",
}


def _public(*kinds: type) -> set[str]:
    return {name for kind in kinds for name in vars(kind) if not name.startswith("_")}


def _base(name: str) -> str:
    return name.split("[")[0]


def test_every_public_call_of_the_domain_has_a_case() -> None:
    manager = _public(TranscriptCalls, BatchCalls, SearchCalls, ContextStateCalls, PreparedCalls)
    assert manager - MANAGER_ELSEWHERE | MANAGER_IN_INIT == {_base(name) for name in MANAGER}
    storage = _public(HistoryRowOperations, SearchOperations) - STORAGE_ELSEWHERE
    assert storage == {_base(name) for name in STORAGE}


async def _prepared(manager: SessionManager, storage: SessionStorage) -> World:
    node = await manager.create(KEY, display_name="one unit")
    await manager.create(EMPTY)
    entries = [
        await manager.append_message(KEY, role, f"hello {n}", token_count=1)
        for n, role in enumerate(("user", "assistant", "user"))
    ]
    return World(manager, storage, node.session_id, node.epoch, entries)


async def _counted(call: Call, world: World, checkouts: CheckoutCounter) -> int:
    await call(world)  # warm: the generation cache, SQLite's append-view look-up
    with checkouts.counting():
        await call(world)
    return checkouts.count


CASES = {f"manager.{name}": case for name, case in MANAGER.items()} | {
    f"storage.{name}": case for name, case in STORAGE.items()
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_public_call_opens_its_units_of_work(
    name: str, manager: SessionManager, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    call, units = CASES[name]
    world = await _prepared(manager, storage)
    assert await _counted(call, world, checkouts) == units


async def test_a_cold_append_reads_the_row_in_a_unit_of_its_own(
    manager: SessionManager, storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    """Not warmed (another manager created the session): the append reads the session
    row first, then writes; the next append is the one statement alone."""
    await SessionManager(storage).create(KEY)
    await storage.uow.appends_in_one_statement()  # SQLite's one look-up of the view
    with checkouts.counting():
        await manager.append_message(KEY, "user", "cold")
    assert checkouts.count == 2
    with checkouts.counting():
        await manager.append_message(KEY, "user", "warm")
    assert checkouts.count == 1
