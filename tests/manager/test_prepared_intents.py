"""Prepared intents (HEAD-FEATURES §1.4, §6.1; docs/semantics.md#prepared-intents):
``prepare_intent`` and ``prepare_prefix_branch`` decide what ``apply_intent`` or a prefix
fork would write and return it as a ``PreparedSessionIntent``, writing nothing. Both
backends."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    MessageNotFoundError,
    ProtectedFieldError,
    SessionExistsError,
    SessionKeyConflictError,
    SessionNotFoundError,
)
from opensquilla.session.models import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CompactedTranscriptEntry,
    PreparedSessionIntent,
    SessionIntent,
    SessionNode,
    SessionStatus,
)
from tests.helpers import table_snapshot

KEY = "agent:main:chat"
PARENT = "agent:main:prepared-parent"
CHILD = "agent:main:prepared-child"

# What a reset renews; everything else of the row is kept.
RENEWED = {"session_id", "epoch", "updated_at"}


# -- prepare_intent ------------------------------------------------------------------------


async def test_missing_key_prepares_a_create_and_writes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    before = await table_snapshot(storage)

    plan = await manager.prepare_intent("agent:Main:fresh", "new_chat", agent_id="Ops", model="m")

    assert isinstance(plan, PreparedSessionIntent)
    assert plan.action == "create"
    assert plan.expected_epoch == 0 and plan.node.epoch == 0
    assert (plan.node.session_key, plan.node.agent_id, plan.node.model) == (
        "agent:main:fresh",
        "ops",
        "m",
    )
    assert plan.node.status == SessionStatus.RUNNING
    assert plan.previous_session_id is None and plan.previous_node is None
    assert plan.initial_transcript_entries == ()
    assert await table_snapshot(storage) == before
    # The plan is the row apply_intent would create.
    await storage.upsert_session(plan.node)
    assert await manager.get_session("agent:main:fresh") == plan.node


async def test_continue_prepares_the_stored_row(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    before = await table_snapshot(storage)

    plan = await manager.prepare_intent(KEY, SessionIntent.CONTINUE)

    assert plan.action == "continue"
    assert plan.node == node and plan.expected_epoch == node.epoch
    assert await table_snapshot(storage) == before


async def test_new_chat_on_a_taken_key_conflicts(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    before = await table_snapshot(storage)
    with pytest.raises(SessionKeyConflictError, match="session_key conflict"):
        await manager.prepare_intent(KEY, SessionIntent.NEW_CHAT)
    assert await table_snapshot(storage) == before


async def test_reset_prepares_the_next_generation_apply_intent_writes(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY, label="kept")
    await manager.append_message(KEY, "user", "hello", token_count=5)
    await manager.update(KEY, collaboration_mode="plan", context_tokens=900)
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.total_tokens == 5
    before = await table_snapshot(storage)

    plan = await manager.prepare_intent(KEY, SessionIntent.RESET_SAME_KEY)

    assert await table_snapshot(storage) == before  # nothing written, nothing archived
    assert plan.action == "reset"
    assert plan.previous_session_id == node.session_id
    assert plan.previous_node == stored
    assert plan.node.session_id != node.session_id
    assert plan.node.epoch == stored.epoch + 1 == plan.expected_epoch
    assert plan.node.label == "kept"
    assert manager.get_cached_epoch(KEY) == stored.epoch

    applied, rotated = await manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY)

    assert rotated is True
    expected = plan.node.model_dump(exclude=RENEWED)
    assert applied.model_dump(exclude=RENEWED) == expected
    assert applied.epoch == plan.node.epoch
    assert (plan.node.total_tokens, plan.node.context_tokens) == (0, None)
    assert plan.node.collaboration_mode == "default"


async def test_prepared_reset_of_a_legacy_fork_is_a_proven_empty_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    child = await manager.create("agent:main:legacy-child")
    child.parent_session_key = child.spawned_by = "agent:main:missing-parent"
    child.forked_from_parent = True
    child.schema_version = CANONICAL_FORK_PROOF_SCHEMA_VERSION - 1
    child.compaction_count = 2
    await storage.upsert_session(child)

    plan = await manager.prepare_intent(child.session_key, SessionIntent.RESET_SAME_KEY)

    assert plan.action == "reset"
    assert plan.node.session_id != child.session_id
    assert plan.node.compaction_count == 0
    assert plan.node.schema_version >= CANONICAL_FORK_PROOF_SCHEMA_VERSION
    assert plan.node.forked_from_parent is True


async def test_prepare_intent_checks_its_arguments_as_apply_intent_does(
    manager: SessionManager,
) -> None:
    await manager.create(KEY)
    with pytest.raises(ValueError, match="SessionIntent"):
        await manager.prepare_intent(KEY, "start_over")
    with pytest.raises(ProtectedFieldError):
        await manager.prepare_intent(KEY, SessionIntent.CONTINUE, epoch=3)


# -- prepare_prefix_branch -----------------------------------------------------------------


async def _parent_with_rows(manager: SessionManager) -> list[str]:
    await manager.create(PARENT, display_name="Parent chat", model="m-1")
    ids = []
    for index, role in enumerate(["user", "assistant", "user"]):
        entry = await manager.append_message(
            PARENT, role, f"message {index}", token_count=3, turn_context={"turn_id": f"t{index}"}
        )
        ids.append(entry.message_id)
    return ids


@pytest.mark.parametrize("parent_complete", [True, False])
async def test_prepared_prefix_branch_keeps_the_parents_coverage(
    manager: SessionManager, storage: SessionStorage, parent_complete: bool
) -> None:
    """Upstream's test: the plan applied by hand gives the child the prefix as live rows; a
    child of an incomplete parent stays incomplete (an unmatched compaction count)."""
    ids = await _parent_with_rows(manager)
    if not parent_complete:
        parent = await manager.get_session(PARENT)
        assert parent is not None
        parent.compaction_count = 1  # a compaction with no summary: incomplete
        await storage.upsert_session(parent)
    before = await table_snapshot(storage)

    plan = await manager.prepare_prefix_branch(PARENT, CHILD, fork_before_message_id=ids[2])

    assert await table_snapshot(storage) == before
    assert plan.action == "fork"
    assert plan.node.status == SessionStatus.DONE
    assert plan.node.forked_from_parent is True
    assert plan.node.schema_version >= CANONICAL_FORK_PROOF_SCHEMA_VERSION
    assert plan.node.compaction_count == (0 if parent_complete else 1)
    await storage.upsert_session(plan.node)
    for entry in plan.initial_transcript_entries:
        await storage.append_transcript_entry(entry)
    page = await manager.get_canonical_transcript_page(CHILD, limit=10)
    assert [entry.content for entry in page.entries] == ["message 0", "message 1"]
    assert page.canonical_complete is parent_complete


async def test_the_plan_is_the_child_branch_writes(
    manager: SessionManager, storage: SessionStorage
) -> None:
    ids = await _parent_with_rows(manager)
    parent = await manager.get_session(PARENT)
    assert parent is not None

    plan = await manager.prepare_prefix_branch(
        PARENT, CHILD, fork_before_message_id=ids[2], status="running"
    )
    branched = await manager.branch(
        PARENT, "agent:main:branched", fork_transcript=True, fork_before_message_id=ids[2]
    )

    assert plan.previous_node == parent and plan.previous_session_id == parent.session_id
    assert plan.expected_epoch == 0 == plan.node.epoch
    lineage = (
        "agent_id",
        "parent_session_key",
        "spawned_by",
        "spawn_depth",
        "status",
        "model",
        "forked_from_parent",
        "schema_version",
        "compaction_count",
    )
    assert [getattr(plan.node, f) for f in lineage] == [getattr(branched, f) for f in lineage]
    assert plan.node.display_name == "Parent chat"  # as upstream's prepared fork
    copied = await manager.get_transcript("agent:main:branched")
    fields = ("role", "content", "created_at", "token_count", "turn_context", "tool_calls")
    assert [[getattr(e, f) for f in fields] for e in plan.initial_transcript_entries] == [
        [getattr(e, f) for f in fields] for e in copied
    ]
    for entry in plan.initial_transcript_entries:
        assert (entry.session_id, entry.session_key, entry.id) == (
            plan.node.session_id,
            CHILD,
            None,
        )
        assert entry.message_id not in ids  # fresh ids, as branch gives its copies


async def test_prepared_prefix_takes_archived_rows_as_live_ones(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(PARENT)
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(
            [
                CompactedTranscriptEntry(
                    session_id=node.session_id,
                    session_key=PARENT,
                    compaction_id="cmp_seeded",
                    compaction_index=0,
                    original_entry_id=index + 1,
                    message_id=f"archived-{index}",
                    role="user",
                    content=f"archived {index}",
                    created_at=1_000 + index,
                    archived_at=2_000,
                )
                for index in range(2)
            ]
        )
    live = await manager.append_message(PARENT, "user", "live")

    plan = await manager.prepare_prefix_branch(
        PARENT, CHILD, fork_before_message_id=live.message_id
    )
    cut = await manager.prepare_prefix_branch(PARENT, CHILD, fork_before_message_id="archived-1")

    assert [e.content for e in plan.initial_transcript_entries] == ["archived 0", "archived 1"]
    assert [e.created_at for e in plan.initial_transcript_entries] == [1_000, 1_001]
    assert [e.content for e in cut.initial_transcript_entries] == ["archived 0"]


async def test_prepare_prefix_branch_refusals_write_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    ids = await _parent_with_rows(manager)
    await manager.create("agent:main:taken")
    before = await table_snapshot(storage)

    with pytest.raises(SessionNotFoundError, match="Parent session not found: agent:main:nope"):
        await manager.prepare_prefix_branch("agent:main:nope", CHILD, fork_before_message_id="x")
    with pytest.raises(MessageNotFoundError, match="Transcript message not found"):
        await manager.prepare_prefix_branch(PARENT, CHILD, fork_before_message_id="unknown")
    with pytest.raises(SessionExistsError):
        await manager.prepare_prefix_branch(
            PARENT, "agent:main:taken", fork_before_message_id=ids[1]
        )
    with pytest.raises(ValueError):
        await manager.prepare_prefix_branch(
            PARENT, CHILD, fork_before_message_id=ids[1], status="x"
        )

    assert await table_snapshot(storage) == before
    assert isinstance(await manager.get_session(PARENT), SessionNode)


async def test_prepare_prefix_branch_refuses_in_branchs_order(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Where several things are wrong at once, the same error as :meth:`branch`: a bad
    status before a bad message id, a missing parent, then a missing message before a taken
    child key."""
    await _parent_with_rows(manager)
    await manager.create("agent:main:taken")
    before = await table_snapshot(storage)
    cases = [
        ("agent:main:nope", "agent:main:taken", "unknown", "done", SessionNotFoundError),
        (PARENT, "agent:main:taken", "unknown", "done", MessageNotFoundError),
        (PARENT, "agent:main:taken", 5, "x", ValueError),
    ]
    for parent, child, message, status, error in cases:
        with pytest.raises(error) as planned:
            await manager.prepare_prefix_branch(
                parent,
                child,
                fork_before_message_id=message,  # type: ignore[arg-type]
                status=status,
            )
        with pytest.raises(error) as branched:
            await manager.branch(
                parent,
                child,
                fork_transcript=True,
                fork_before_message_id=message,  # type: ignore[arg-type]
                status=status,
            )
        assert type(planned.value) is type(branched.value)
    assert await table_snapshot(storage) == before


def test_prepared_action_is_a_declared_export() -> None:
    import opensquilla.session.models as models

    assert {"PreparedAction", "PreparedSessionIntent"} <= set(models.__all__)
