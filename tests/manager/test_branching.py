"""Branching: child lineage, full and prefix forks, the fork budget, and refusals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.rows import values_of
from opensquilla.session.db.tables import session_summaries
from opensquilla.session.errors import (
    InvalidInputError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    TurnOutcomeUnavailableError,
)
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionIntent,
    SessionNode,
    SessionStatus,
    SessionSummary,
)
from opensquilla.session.support.clock import now_ms
from tests.helpers import table_snapshot

PARENT = "agent:main:parent"
CHILD = "agent:main:child"


async def _archive(storage: SessionStorage, node: SessionNode, contents: list[str]) -> None:
    """Compacted-archive rows, older than any live row, as a compaction leaves them."""
    rows = [
        CompactedTranscriptEntry(
            session_id=node.session_id,
            session_key=node.session_key,
            compaction_id="cmp_seeded",
            compaction_index=0,
            original_entry_id=index + 1,
            message_id=f"archived-{index}",
            role="user",
            content=content,
            created_at=1_000 + index,
            token_count=5,
            archived_at=2_000,
        )
        for index, content in enumerate(contents)
    ]
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(rows)


# -- lineage -------------------------------------------------------------------------------


async def test_child_lineage_and_copied_settings(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The child knows its parent, one level deeper, with the parent's routing settings but
    none of its counters or fencing state."""
    await manager.create(
        PARENT,
        agent_id="ops",
        model="m-2",
        model_provider="prov",
        channel="discord",
        chat_type="group",
        label="not inherited",
    )
    await manager.update(PARENT, spawn_depth=2)
    await manager.apply_intent(PARENT, SessionIntent.RESET_SAME_KEY)  # parent at epoch 1
    parent = await storage.get_session(PARENT)
    assert parent is not None and parent.epoch == 1
    parent.total_tokens = 900
    parent.input_tokens = 40
    await storage.upsert_session(parent)

    before = now_ms()
    child = await manager.branch(PARENT, CHILD, status=SessionStatus.DONE)

    assert child.session_key == CHILD
    assert child.session_id != parent.session_id
    assert child.parent_session_key == PARENT
    assert child.spawned_by == PARENT
    assert child.spawn_depth == 3
    assert child.agent_id == "ops"
    assert (child.model, child.model_provider, child.channel, child.chat_type) == (
        "m-2",
        "prov",
        "discord",
        "group",
    )
    assert child.label is None
    assert child.status == "done"
    assert child.epoch == 0
    assert child.total_tokens == 0 and child.input_tokens == 0 and child.compaction_count == 0
    assert child.forked_from_parent is False
    assert child.created_at == child.updated_at == child.started_at >= before
    stored = await storage.get_session(CHILD)
    assert stored is not None and stored.model_dump() == child.model_dump()


async def test_root_parent_gives_depth_one(manager: SessionManager) -> None:
    await manager.create(PARENT)

    child = await manager.branch(PARENT, CHILD)

    assert child.spawn_depth == 1
    assert child.status == SessionStatus.RUNNING


async def test_branch_canonicalises_both_keys(manager: SessionManager) -> None:
    await manager.create(PARENT)

    child = await manager.branch("agent:Main:parent", "agent:MAIN:child")

    assert child.session_key == CHILD
    assert child.parent_session_key == PARENT
    assert await manager.get_session(CHILD) is not None


async def test_branch_without_fork_copies_no_rows(manager: SessionManager) -> None:
    await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "parent only")

    await manager.branch(PARENT, CHILD)

    assert await manager.get_transcript(CHILD) == []
    assert await manager.get_summaries(CHILD) == []


async def test_grandchild_depth(manager: SessionManager) -> None:
    await manager.create(PARENT)
    await manager.branch(PARENT, CHILD)

    grandchild = await manager.branch(CHILD, "agent:main:grandchild")

    assert grandchild.spawn_depth == 2
    assert grandchild.parent_session_key == CHILD


# -- full fork -----------------------------------------------------------------------------


async def test_full_fork_copies_the_live_transcript(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Every column of every message is carried over, under new row ids and message ids."""
    usage = {"model": "openai/gpt-test", "input_tokens": 11, "output_tokens": 5}
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    await manager.create(PARENT)
    await manager.append_message(
        PARENT, "user", "question", token_count=5, provenance={"kind": "external_user"}
    )
    await manager.append_message(
        PARENT,
        "assistant",
        "answer",
        reasoning_content="because",
        turn_usage=usage,
        tool_calls=calls,
        token_count=5,
    )
    await manager.append_message(PARENT, "tool", "result", tool_call_id="c1")
    parent_rows = await manager.get_transcript(PARENT)

    child = await manager.branch(PARENT, CHILD, fork_transcript=True)

    assert child.forked_from_parent is True
    child_rows = await manager.get_transcript(CHILD)
    assert len(child_rows) == len(parent_rows) == 3
    payload = (
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "reasoning_content",
        "turn_usage",
        "created_at",
        "token_count",
        "provenance_kind",
    )
    for copy, original in zip(child_rows, parent_rows, strict=True):
        assert {n: getattr(copy, n) for n in payload} == {n: getattr(original, n) for n in payload}
        assert copy.session_id == child.session_id
        assert copy.session_key == CHILD
        assert copy.message_id != original.message_id
    assert child_rows[1].turn_usage == usage
    assert {e.id for e in child_rows}.isdisjoint({e.id for e in parent_rows})
    assert [e.id for e in child_rows] == sorted(e.id for e in child_rows)
    assert len({e.message_id for e in child_rows}) == 3
    assert [e.model_dump() for e in await manager.get_transcript(PARENT)] == [
        e.model_dump() for e in parent_rows
    ]
    stored = await storage.get_session(CHILD)
    assert stored is not None and stored.forked_from_parent is True
    assert stored.total_tokens == 0


async def test_full_fork_copies_summaries_with_their_metadata(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Summaries travel whole; only the owner changes and the index restarts at 0."""
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "tail", token_count=5)
    first = SessionSummary(
        session_id=parent.session_id,
        session_key=PARENT,
        compaction_index=3,
        compaction_id="cmp_one",
        trigger_reason="preflight_compaction",
        summary_text="earlier context",
        summary_payload={"user_goal": "ship it"},
        summary_format="structured_v1",
        summary_source="llm",
        coverage_status="pass",
        missing_obligations=[],
        critical_carry_forward=["path/to/file.py"],
        tokens_before=1000,
        tokens_after=300,
        removed_count=3,
        kept_count=1,
        chunk_count=2,
        flush_receipt_status="safe",
        covered_through_id=123,
        created_at=111,
    )
    second = first.model_copy(
        update={
            "compaction_index": 7,
            "compaction_id": "cmp_two",
            "summary_text": "later context",
            "missing_obligations": ["todo"],
            "created_at": 222,
        }
    )
    # Direct inserts keep the non-zero indices, so re-indexing is observable.
    async with storage.uow.write() as tx:
        for summary in (first, second):
            await tx.sessions.conn.execute(
                session_summaries.insert().values(values_of(summary, session_summaries))
            )

    child = await manager.branch(PARENT, CHILD, fork_transcript=True)

    copies = await manager.get_summaries(CHILD)
    assert [s.compaction_index for s in copies] == [0, 1]
    assert [s.summary_text for s in copies] == ["earlier context", "later context"]
    kept = set(SessionSummary.model_fields) - {
        "id",
        "session_id",
        "session_key",
        "compaction_index",
    }
    for copy, original in zip(copies, (first, second), strict=True):
        assert {n: getattr(copy, n) for n in kept} == {n: getattr(original, n) for n in kept}
        assert copy.session_id == child.session_id
        assert copy.session_key == CHILD
    parent_after = await manager.get_summaries(PARENT)
    assert [s.compaction_index for s in parent_after] == [3, 7]


async def test_full_fork_copies_valid_context_states_only(manager: SessionManager) -> None:
    parent = await manager.create(PARENT)
    await manager.save_context_state(
        SessionContextState(
            session_id=parent.session_id,
            session_key=PARENT,
            provider="portable",
            model="m-9",
            state_kind="structured_summary_v1",
            payload={"goal": "carry me"},
            covered_through_id=42,
            created_at=5_000,
            expires_at=9_999_999_999_999,
            portable=True,
            cacheable=True,
        )
    )
    await manager.save_context_state(
        SessionContextState(
            session_id=parent.session_id,
            session_key=PARENT,
            provider="anthropic",
            state_kind="native_block",
            payload={"goal": "leave me"},
        )
    )
    await manager.invalidate_context_states(PARENT, provider="anthropic", reason="switched")

    child = await manager.branch(PARENT, CHILD, fork_transcript=True)

    states = await manager.get_context_states(CHILD, valid_only=False)
    assert len(states) == 1
    (state,) = states
    assert state.session_id == child.session_id
    assert state.session_key == CHILD
    assert (state.provider, state.model, state.state_kind) == (
        "portable",
        "m-9",
        "structured_summary_v1",
    )
    assert state.payload == {"goal": "carry me"}
    assert (state.covered_through_id, state.created_at, state.expires_at) == (
        42,
        5_000,
        9_999_999_999_999,
    )
    assert state.portable is True and state.cacheable is True and state.valid is True
    assert len(await manager.get_context_states(PARENT, valid_only=False)) == 2


async def test_full_fork_copies_the_compacted_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The child's history reads the same as the parent's: archive as archive, live as live."""
    parent = await manager.create(PARENT)
    await _archive(storage, parent, ["old one", "old two"])
    await manager.append_message(PARENT, "assistant", "latest reply")
    parent_canonical = [e.content for e in await manager.get_canonical_transcript(PARENT)]
    assert parent_canonical == ["old one", "old two", "latest reply"]

    child = await manager.branch(PARENT, CHILD, fork_transcript=True)

    assert [e.content for e in await manager.get_transcript(CHILD)] == ["latest reply"]
    assert [e.content for e in await manager.get_canonical_transcript(CHILD)] == parent_canonical
    archived = await storage.get_compacted_transcript_entries(child.session_id)
    assert [
        (a.compaction_id, a.original_entry_id, a.message_id, a.archived_at) for a in archived
    ] == [
        ("cmp_seeded", 1, "archived-0", 2_000),
        ("cmp_seeded", 2, "archived-1", 2_000),
    ]
    assert all(a.session_key == CHILD for a in archived)
    assert len(await storage.get_compacted_transcript_entries(parent.session_id)) == 2


# -- prefix fork ---------------------------------------------------------------------------


async def test_prefix_fork_copies_only_what_came_before(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Editing a message forks the conversation just before it; the parent is untouched
    and nothing but transcript rows is copied."""
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "first ask", token_count=5)
    await manager.append_message(PARENT, "assistant", "first reply", token_count=5)
    edited = await manager.append_message(PARENT, "user", "second ask", token_count=5)
    await manager.append_message(PARENT, "assistant", "second reply", token_count=5)
    await manager.append_message(PARENT, "user", "third ask, never copied", token_count=5)
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="sum")
    )
    await manager.save_context_state(
        SessionContextState(session_id=parent.session_id, session_key=PARENT, state_kind="s")
    )
    parent_before = [e.model_dump() for e in await manager.get_transcript(PARENT)]

    child = await manager.branch(
        PARENT, CHILD, fork_transcript=True, fork_before_message_id=edited.message_id
    )

    assert child.forked_from_parent is True
    assert [e.content for e in await manager.get_transcript(CHILD)] == [
        "first ask",
        "first reply",
    ]
    assert await manager.get_summaries(CHILD) == []
    assert await manager.get_context_states(CHILD, valid_only=False) == []
    assert [e.model_dump() for e in await manager.get_transcript(PARENT)] == parent_before
    assert len(await manager.get_summaries(PARENT)) == 1
    assert len(await manager.get_context_states(PARENT)) == 1


async def test_prefix_fork_before_the_first_message_copies_nothing(
    manager: SessionManager,
) -> None:
    await manager.create(PARENT)
    first = await manager.append_message(PARENT, "user", "opening")

    child = await manager.branch(
        PARENT, CHILD, fork_transcript=True, fork_before_message_id=first.message_id
    )

    assert await manager.get_transcript(CHILD) == []
    assert child.forked_from_parent is True


async def test_prefix_fork_turns_archived_rows_into_live_rows(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The prefix is read from the canonical transcript; the child gets it all live."""
    parent = await manager.create(PARENT)
    await _archive(storage, parent, ["old one", "old two"])
    await manager.append_message(PARENT, "user", "live one")
    cut = await manager.append_message(PARENT, "user", "live two")

    child = await manager.branch(
        PARENT, CHILD, fork_transcript=True, fork_before_message_id=cut.message_id
    )

    assert [e.content for e in await manager.get_transcript(CHILD)] == [
        "old one",
        "old two",
        "live one",
    ]
    assert await storage.get_compacted_transcript_entries(child.session_id) == []


async def test_prefix_fork_may_cut_inside_the_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    parent = await manager.create(PARENT)
    await _archive(storage, parent, ["old one", "old two"])
    await manager.append_message(PARENT, "user", "live one")

    await manager.branch(PARENT, CHILD, fork_transcript=True, fork_before_message_id="archived-1")

    assert [e.content for e in await manager.get_transcript(CHILD)] == ["old one"]


async def test_prefix_fork_with_an_unknown_message_creates_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "only message")
    before = await table_snapshot(storage)

    with pytest.raises(KeyError, match="Transcript message not found") as caught:
        await manager.branch(
            PARENT, CHILD, fork_transcript=True, fork_before_message_id="no-such-message"
        )

    assert isinstance(caught.value, MessageNotFoundError)
    assert await manager.get_session(CHILD) is None
    assert await table_snapshot(storage) == before


async def test_message_of_another_session_is_not_found(manager: SessionManager) -> None:
    """The cut point must belong to the parent."""
    await manager.create(PARENT)
    await manager.create("agent:main:stranger")
    await manager.append_message(PARENT, "user", "parent text")
    foreign = await manager.append_message("agent:main:stranger", "user", "stranger text")

    with pytest.raises(KeyError, match="Transcript message not found"):
        await manager.branch(
            PARENT, CHILD, fork_transcript=True, fork_before_message_id=foreign.message_id
        )

    assert await manager.get_session(CHILD) is None


# -- budget --------------------------------------------------------------------------------


async def test_fork_over_budget_copies_nothing(manager: SessionManager) -> None:
    await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "big", token_count=1000)

    child = await manager.branch(PARENT, CHILD, fork_transcript=True, max_fork_tokens=10)

    assert child.forked_from_parent is False
    assert await manager.get_transcript(CHILD) == []
    stored = await manager.get_session(CHILD)
    assert stored is not None and stored.forked_from_parent is False


@pytest.mark.parametrize(("budget", "copied"), [(10, True), (9, False), (None, True)])
async def test_fork_budget_is_inclusive_and_counts_summaries(
    manager: SessionManager, storage: SessionStorage, budget: int | None, copied: bool
) -> None:
    """6 reported tokens plus a 16-character summary (16 // 4 = 4) is exactly 10."""
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "a", token_count=2)
    await manager.append_message(PARENT, "user", "b", token_count=4)
    await manager.append_message(PARENT, "user", "c")  # no reported count: 0
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="s" * 16)
    )

    child = await manager.branch(PARENT, CHILD, fork_transcript=True, max_fork_tokens=budget)

    assert child.forked_from_parent is copied
    assert len(await manager.get_transcript(CHILD)) == (3 if copied else 0)
    assert len(await manager.get_summaries(CHILD)) == (1 if copied else 0)


async def test_every_summary_counts_against_the_budget(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Two 20-character summaries cost 5 each: 10 fits a budget of 10, not of 9."""
    parent = await manager.create(PARENT)
    for text in ("x" * 20, "y" * 20):
        await storage.save_summary(
            SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text=text)
        )

    squeezed = await manager.branch(PARENT, CHILD, fork_transcript=True, max_fork_tokens=9)
    fitting = await manager.branch(
        PARENT, "agent:main:child2", fork_transcript=True, max_fork_tokens=10
    )

    assert squeezed.forked_from_parent is False
    assert await manager.get_summaries(CHILD) == []
    assert fitting.forked_from_parent is True
    assert len(await manager.get_summaries("agent:main:child2")) == 2


async def test_large_summary_alone_blocks_the_fork(
    manager: SessionManager, storage: SessionStorage
) -> None:
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "small", token_count=1)
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="z" * 400)
    )

    child = await manager.branch(PARENT, CHILD, fork_transcript=True, max_fork_tokens=10)

    assert child.forked_from_parent is False
    assert await manager.get_transcript(CHILD) == []
    assert await manager.get_summaries(CHILD) == []


async def test_prefix_fork_budget_counts_only_the_prefix(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Rows after the cut and summaries (not copied by a prefix fork) do not count."""
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "one", token_count=5)
    await manager.append_message(PARENT, "user", "two", token_count=5)
    cut = await manager.append_message(PARENT, "user", "three", token_count=500)
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="q" * 400)
    )

    fits = await manager.branch(
        PARENT,
        CHILD,
        fork_transcript=True,
        max_fork_tokens=10,
        fork_before_message_id=cut.message_id,
    )
    too_big = await manager.branch(
        PARENT,
        "agent:main:child2",
        fork_transcript=True,
        max_fork_tokens=9,
        fork_before_message_id=cut.message_id,
    )

    assert fits.forked_from_parent is True
    assert [e.content for e in await manager.get_transcript(CHILD)] == ["one", "two"]
    assert too_big.forked_from_parent is False
    assert await manager.get_transcript("agent:main:child2") == []


async def test_negative_budget_is_refused(manager: SessionManager) -> None:
    await manager.create(PARENT)

    with pytest.raises(ValueError):
        await manager.branch(PARENT, CHILD, fork_transcript=True, max_fork_tokens=-1)

    assert await manager.get_session(CHILD) is None


# -- refusals ------------------------------------------------------------------------------


async def test_missing_parent_is_a_key_error(manager: SessionManager) -> None:
    with pytest.raises(KeyError, match="Parent session not found"):
        await manager.branch("agent:main:nobody", CHILD)

    assert await manager.get_session(CHILD) is None


async def test_existing_child_key_is_refused_and_nothing_changes(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Branching onto a live key must not overwrite it or orphan its rows."""
    parent = await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "parent history", token_count=3)
    await storage.save_summary(
        SessionSummary(session_id=parent.session_id, session_key=PARENT, summary_text="p")
    )
    await manager.create(CHILD)
    await manager.append_message(CHILD, "user", "child's own history")
    before = await table_snapshot(storage)

    with pytest.raises(ValueError) as caught:
        await manager.branch(PARENT, CHILD, fork_transcript=True)

    assert isinstance(caught.value, SessionExistsError)
    assert await table_snapshot(storage) == before


async def test_branch_onto_itself_is_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "mine")
    before = await table_snapshot(storage)

    with pytest.raises(ValueError):
        await manager.branch(PARENT, "agent:Main:parent", fork_transcript=True)

    assert await table_snapshot(storage) == before


# -- display name, mutation_context, fork_through_turn_id (HEAD-FEATURES §1.4, §7) ---------


async def test_branch_names_the_child(manager: SessionManager) -> None:
    await manager.create(PARENT, display_name="parent name")
    named = await manager.branch(PARENT, CHILD, display_name="Forked chat")
    unnamed = await manager.branch(PARENT, "agent:main:unnamed")
    assert named.display_name == "Forked chat"
    assert (await manager.get_session(CHILD)) == named
    assert unnamed.display_name is None  # branch names a child only when asked (HEAD)


async def test_mutation_context_is_held_for_the_whole_copy(manager: SessionManager) -> None:
    """Entered before the parent is read, left after the child and its rows are
    committed: what a lock shared with compaction needs."""
    await manager.create(PARENT)
    for index in range(3):
        await manager.append_message(PARENT, "user", f"row {index}")
    seen: list[tuple[str, int | None]] = []

    @contextlib.asynccontextmanager
    async def recording() -> AsyncIterator[None]:
        seen.append(("enter", await _child_rows(manager)))
        yield
        seen.append(("exit", await _child_rows(manager)))

    await manager.branch(PARENT, CHILD, fork_transcript=True, mutation_context=recording)

    assert seen == [("enter", None), ("exit", 3)]


async def _child_rows(manager: SessionManager) -> int | None:
    if await manager.get_session(CHILD) is None:
        return None
    return len(await manager.get_transcript(CHILD))


async def test_a_compaction_sharing_the_lock_waits_for_the_fork(manager: SessionManager) -> None:
    """Upstream's test: with the parent's lock as ``mutation_context`` a compaction that
    takes the same lock waits until the fork has copied the parent's rows, so the child
    holds all of them, raw."""
    await manager.create(PARENT)
    for index in range(4):
        await manager.append_message(PARENT, "user", f"row {index} " + "w" * 800, token_count=200)
    lock = asyncio.Lock()
    order: list[str] = []
    branch_holds_lock = asyncio.Event()
    release_branch = asyncio.Event()

    @contextlib.asynccontextmanager
    async def branch_lock() -> AsyncIterator[None]:
        async with lock:
            order.append("branch")
            branch_holds_lock.set()
            await release_branch.wait()
            yield

    @contextlib.asynccontextmanager
    async def compaction_lock() -> AsyncIterator[None]:
        async with lock:
            order.append("compaction")
            yield

    fork = asyncio.create_task(
        manager.branch(PARENT, CHILD, fork_transcript=True, mutation_context=branch_lock)
    )
    await asyncio.wait_for(branch_holds_lock.wait(), 10)
    compaction = asyncio.create_task(
        manager.compact_with_result(PARENT, 600, mutation_context=compaction_lock)
    )
    release_branch.set()
    child = await asyncio.wait_for(fork, 10)
    result = await asyncio.wait_for(compaction, 10)

    assert order[0] == "branch" and set(order[1:]) == {"compaction"}  # read, then commit
    assert result.removed_count > 0  # the parent was compacted, after the copy
    assert [e.content[:5] for e in await manager.get_transcript(CHILD)] == [
        "row 0",
        "row 1",
        "row 2",
        "row 3",
    ]
    assert child.forked_from_parent is True
    assert await manager.is_canonical_transcript_complete(CHILD)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fork_through_turn_id": ""}, "fork_through_turn_id must not be empty"),
        ({"fork_through_turn_id": "   "}, "fork_through_turn_id must not be empty"),
        (
            {"fork_through_turn_id": "t1", "fork_before_message_id": "m1"},
            "fork_before_message_id and fork_through_turn_id are mutually exclusive",
        ),
        (
            {"fork_through_turn_id": "t1", "fork_transcript": False},
            r"fork_through_turn_id requires fork_transcript=True",
        ),
        ({"fork_through_turn_id": 7}, "fork_through_turn_id must be a string"),
    ],
)
async def test_fork_through_turn_arguments_are_checked_before_the_parent(
    manager: SessionManager, storage: SessionStorage, kwargs: dict[str, Any], message: str
) -> None:
    """Upstream HEAD's checks, before the parent is read: a missing parent still gets the
    argument error; nothing is written."""
    arguments: dict[str, Any] = {"fork_transcript": True, **kwargs}
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match=message):
        await manager.branch("agent:main:missing", CHILD, **arguments)
    assert await table_snapshot(storage) == before


async def _parent_with_turns(manager: SessionManager) -> None:
    await manager.create(PARENT)
    await manager.append_message(PARENT, "user", "ask", turn_context={"turn_id": "turn-1"})
    await manager.append_message(PARENT, "assistant", "answer", turn_context={"turn_id": "turn-1"})


async def test_fork_through_a_turn_is_refused_for_want_of_turn_outcomes(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The checks the five tables allow run, then the fork is refused clearly (turn
    outcomes live with agent tasks, outside this store); nothing is written."""
    await _parent_with_turns(manager)
    before = await table_snapshot(storage)

    with pytest.raises(TurnOutcomeUnavailableError, match="Completion state not found") as info:
        await manager.branch(PARENT, CHILD, fork_transcript=True, fork_through_turn_id=" turn-1 ")
    assert isinstance(info.value, KeyError)
    with pytest.raises(MessageNotFoundError, match="Transcript turn not found in"):
        await manager.branch(PARENT, CHILD, fork_transcript=True, fork_through_turn_id="turn-9")
    with pytest.raises(SessionNotFoundError, match="Parent session not found"):
        await manager.branch(
            "agent:main:nope", CHILD, fork_transcript=True, fork_through_turn_id="t"
        )

    assert await table_snapshot(storage) == before


async def test_fork_through_a_turn_of_an_incomplete_parent_is_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await _parent_with_turns(manager)
    parent = await manager.get_session(PARENT)
    assert parent is not None
    parent.compaction_count = 1  # a compaction without its summary: incomplete
    await storage.upsert_session(parent)
    with pytest.raises(InvalidInputError, match="canonical transcript history is incomplete"):
        await manager.branch(PARENT, CHILD, fork_transcript=True, fork_through_turn_id="turn-1")
    assert await manager.get_session(CHILD) is None
