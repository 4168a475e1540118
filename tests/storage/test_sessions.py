"""Session rows: upsert, create, read, list, count, delete and the epoch (SEMANTICS §4, §6, §12)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.db.repos.sessions import SessionRepository
from opensquilla.session.errors import (
    InvalidInputError,
    SessionNotFoundError,
    SessionStoreError,
    StaleEpochError,
    StaleGenerationError,
)
from opensquilla.session.keys import canonicalize_session_key
from opensquilla.session.models import SessionNode, SessionStatus, TranscriptEntry
from opensquilla.session.usecases.reset import start_generation
from tests.helpers import table_snapshot

from . import add_entry, add_state, add_summary, archived, count_rows, insert_archive, new_session

if TYPE_CHECKING:
    from conftest import Backend

KEY = "agent:main:main"


async def test_backend_fixture_gives_a_working_store(
    storage: SessionStorage, backend: Backend
) -> None:
    """The store runs on the backend the environment chose, and a write reads back."""
    assert storage.backend == backend.name
    assert storage.engine.dialect.name == backend.name
    node = await new_session(storage, KEY)
    await add_entry(storage, node, "hello")
    assert [e.content for e in await storage.get_transcript(node.session_id)] == ["hello"]


# -- upsert -------------------------------------------------------------------------------


async def test_upsert_inserts_then_updates_the_whole_row(storage: SessionStorage) -> None:
    node = SessionNode(
        session_key=KEY,
        label="first",
        delivery_context={"channel": "tg", "ids": [1, 2]},
        total_tokens=10,
        estimated_cost_usd=0.25,
        fast_mode=True,
        started_at=111,
    )
    await storage.upsert_session(node)
    stored = await storage.get_session(KEY)
    assert stored == node

    node.label = "second"
    node.delivery_context = None
    node.total_tokens = 42
    node.fast_mode = False
    node.status = SessionStatus.DONE
    node.updated_at += 5
    await storage.upsert_session(node)
    again = await storage.get_session(KEY)
    assert again is not None
    assert (again.label, again.delivery_context, again.total_tokens, again.fast_mode) == (
        "second",
        None,
        42,
        False,
    )
    assert again.status == "done"
    assert again == node
    assert await storage.count_sessions() == 1


async def test_upsert_canonicalises_key_and_agent_id_in_place(storage: SessionStorage) -> None:
    node = SessionNode(session_key="  agent:Main:Thread ", agent_id="Ops Team")
    await storage.upsert_session(node)
    assert node.session_key == "agent:main:Thread"
    assert node.agent_id == "ops-team"
    stored = await storage.get_session("agent:main:Thread")
    assert stored is not None and stored.agent_id == "ops-team"


async def test_epoch_never_decreases_through_upsert(storage: SessionStorage) -> None:
    """A node carrying a lower epoch cannot lower the stored one."""
    node = SessionNode(session_key=KEY, epoch=5)
    await storage.upsert_session(node)
    stale = node.model_copy(update={"epoch": 0, "label": "stale"})
    with pytest.raises(StaleGenerationError):
        await storage.upsert_session(stale)
    assert await storage.get_epoch(KEY) == 5
    stored = await storage.get_session(KEY)
    assert stored is not None and stored.label is None

    # The same generation at the same or a higher epoch is an ordinary update.
    node.label = "same"
    await storage.upsert_session(node)
    node.epoch = 6
    await storage.upsert_session(node)
    assert await storage.get_epoch(KEY) == 6


async def test_raw_update_lowering_the_epoch_is_refused(storage: SessionStorage) -> None:
    """The database itself guards the epoch, whatever code writes to it."""
    await storage.upsert_session(SessionNode(session_key=KEY, epoch=3))
    with pytest.raises(sa.exc.DBAPIError, match="epoch can only increase"):
        async with storage.engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE sessions SET epoch = 1 WHERE session_key = :k"), {"k": KEY}
            )
    assert await storage.get_epoch(KEY) == 3


async def test_node_read_before_increment_epoch_is_refused(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    stale = await storage.get_session(KEY)
    assert stale is not None
    assert await storage.increment_epoch(KEY) == 1
    stale.label = "written back late"
    with pytest.raises(StaleGenerationError) as info:
        await storage.upsert_session(stale)
    assert isinstance(info.value, StaleEpochError)
    assert isinstance(info.value, SessionStoreError)
    stored = await storage.get_session(KEY)
    assert stored is not None
    assert (stored.epoch, stored.label, stored.session_id) == (1, None, node.session_id)


async def test_node_read_before_reset_cannot_restore_the_old_generation(
    storage: SessionStorage,
) -> None:
    """The upstream bug (§16.2): a stale whole-row write reverted the reset's session_id."""
    node = await new_session(storage, KEY)
    old = await storage.get_session(KEY)
    assert old is not None
    new_id = str(uuid.uuid4())
    await start_generation(
        storage.uow,
        canonicalize_session_key(KEY),
        expected_session_id=node.session_id,
        expected_epoch=0,
        new_session_id=new_id,
        now=node.updated_at + 1,
    )
    old.total_tokens = 999
    with pytest.raises(StaleGenerationError):
        await storage.upsert_session(old)
    stored = await storage.get_session(KEY)
    assert stored is not None
    assert (stored.session_id, stored.epoch, stored.total_tokens) == (new_id, 1, 0)


async def test_other_generation_at_the_same_epoch_is_refused(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY, label="original")
    intruder = SessionNode(session_key=KEY, session_id=str(uuid.uuid4()), label="intruder")
    assert intruder.epoch == node.epoch
    with pytest.raises(StaleGenerationError):
        await storage.upsert_session(intruder)
    stored = await storage.get_session(KEY)
    assert stored is not None
    assert (stored.session_id, stored.label) == (node.session_id, "original")


# -- generation-checked upsert (HEAD-FEATURES §7) -------------------------------------------


async def test_generation_checked_upsert_writes_the_same_generation(
    storage: SessionStorage,
) -> None:
    node = await new_session(storage, KEY)
    node.label = "renamed"
    node.total_tokens = 42
    await storage.upsert_session(node, expected_session_id=node.session_id)
    assert await storage.get_session(KEY) == node


@pytest.mark.parametrize("change", ["reset", "delete", "recreate", "other_node"])
async def test_generation_checked_upsert_refuses_a_changed_generation(
    storage: SessionStorage, change: str
) -> None:
    """A node read before a reset, a delete or a re-create (or a node of another
    generation) is refused as upstream HEAD does: ``KeyError("Session generation changed:
    <key>")``; nothing is written, and a deleted row is not recreated."""
    node = await new_session(storage, KEY)
    expected = node.session_id
    if change == "reset":
        await start_generation(
            storage.uow,
            canonicalize_session_key(KEY),
            expected_session_id=node.session_id,
            expected_epoch=0,
            new_session_id=str(uuid.uuid4()),
            now=node.updated_at + 1,
        )
        node.epoch = 1  # even at the new epoch: the generation is what is checked
    elif change in ("delete", "recreate"):
        await storage.delete_session(KEY)
        if change == "recreate":
            await new_session(storage, KEY)
    else:
        node.session_id = str(uuid.uuid4())
    before = await table_snapshot(storage)
    node.label = "written back late"

    with pytest.raises(KeyError, match=f"Session generation changed: {KEY}") as info:
        await storage.upsert_session(node, expected_session_id=expected)

    assert isinstance(info.value, StaleGenerationError)
    assert await table_snapshot(storage) == before


async def test_generation_checked_upsert_keeps_the_epoch_rule(storage: SessionStorage) -> None:
    """Same generation, lower epoch (read before ``increment_epoch``): the ordinary stale
    refusal, not a generation change."""
    node = await new_session(storage, KEY)
    await storage.increment_epoch(KEY)
    node.label = "late"
    with pytest.raises(StaleGenerationError) as info:
        await storage.upsert_session(node, expected_session_id=node.session_id)
    assert not isinstance(info.value, KeyError)
    stored = await storage.get_session(KEY)
    assert stored is not None and (stored.epoch, stored.label) == (1, None)


@pytest.mark.parametrize("expected", [7, "", "id\x00"])
async def test_generation_checked_upsert_checks_its_argument(
    storage: SessionStorage, expected: object
) -> None:
    """Not a non-empty identifier: ``InvalidInputError`` naming it, before anything is read
    (an empty id is a bad argument, not a changed generation); nothing written."""
    node = await new_session(storage, KEY)
    before = await table_snapshot(storage)
    with pytest.raises(InvalidInputError, match="expected_session_id"):
        await storage.upsert_session(node, expected_session_id=expected)  # type: ignore[arg-type]
    assert await table_snapshot(storage) == before


# -- create / get ------------------------------------------------------------------------


async def test_create_session_refuses_an_existing_key_without_changes(
    storage: SessionStorage,
) -> None:
    first = SessionNode(session_key="agent:Main:main", label="first")
    assert await storage.create_session(first) is True
    assert first.session_key == KEY
    before = await table_snapshot(storage)
    second = SessionNode(session_key=KEY, label="second", epoch=7)
    assert await storage.create_session(second) is False
    assert await table_snapshot(storage) == before
    stored = await storage.get_session(KEY)
    assert stored is not None and stored.session_id == first.session_id


async def test_get_session_canonicalises_the_key(storage: SessionStorage) -> None:
    node = await new_session(storage, "agent:ops:Room")
    for spelling in ("agent:OPS:Room", "  agent:Ops:Room  ", "agent:ops:Room"):
        found = await storage.get_session(spelling)
        assert found is not None and found.session_id == node.session_id
    assert await storage.get_session("agent:ops:room") is None  # the rest keeps its case
    assert await storage.get_session("agent:main:none") is None


async def test_webchat_default_is_the_main_agents_key(storage: SessionStorage) -> None:
    await new_session(storage, "webchat:default")
    assert await storage.get_session("agent:main:webchat:default") is not None


# -- list / count ------------------------------------------------------------------------


async def _listing_fixture(storage: SessionStorage) -> None:
    await new_session(storage, "agent:ops:a", agent_id="ops", updated_at=100)
    await new_session(storage, "agent:ops:b", agent_id="ops", updated_at=300, status="done")
    await new_session(storage, "agent:main:c", updated_at=200)
    await new_session(
        storage,
        "agent:main:child",
        updated_at=50,
        spawned_by="agent:main:c",
        parent_session_key="agent:main:c",
        status="failed",
    )
    await new_session(storage, "agent:main:d", updated_at=200)


def _keys(nodes: list[SessionNode]) -> list[str]:
    return [n.session_key for n in nodes]


async def test_list_sessions_order_is_updated_at_then_key_descending(
    storage: SessionStorage,
) -> None:
    await _listing_fixture(storage)
    assert _keys(await storage.list_sessions()) == [
        "agent:ops:b",
        "agent:main:d",  # ties on updated_at=200 are broken by key, descending
        "agent:main:c",
        "agent:ops:a",
        "agent:main:child",
    ]


async def test_list_sessions_filters(storage: SessionStorage) -> None:
    await _listing_fixture(storage)
    assert _keys(await storage.list_sessions(agent_id="OPS")) == ["agent:ops:b", "agent:ops:a"]
    assert _keys(await storage.list_sessions(agent_id="default")) == [
        "agent:main:d",
        "agent:main:c",
        "agent:main:child",
    ]
    assert _keys(await storage.list_sessions(status=SessionStatus.DONE)) == ["agent:ops:b"]
    assert _keys(await storage.list_sessions(status="failed")) == ["agent:main:child"]
    assert _keys(await storage.list_sessions(spawned_by="agent:Main:c")) == ["agent:main:child"]
    assert _keys(await storage.list_sessions(parent_session_key="agent:MAIN:c")) == [
        "agent:main:child"
    ]
    assert await storage.list_sessions(agent_id="ops", status="failed") == []
    assert await storage.list_sessions(agent_id="nobody") == []


async def test_list_sessions_pages(storage: SessionStorage) -> None:
    await _listing_fixture(storage)
    everything = _keys(await storage.list_sessions())
    assert _keys(await storage.list_sessions(limit=2)) == everything[:2]
    assert _keys(await storage.list_sessions(limit=2, offset=2)) == everything[2:4]
    assert _keys(await storage.list_sessions(limit=2, offset=4)) == everything[4:]
    assert await storage.list_sessions(limit=0) == []
    assert await storage.list_sessions(offset=10) == []
    assert _keys(await storage.list_sessions(limit=None, offset=3)) == everything[3:]


async def test_list_sessions_default_limit_is_100_and_none_is_unlimited(
    storage: SessionStorage,
) -> None:
    async with storage.engine.begin() as conn:  # one transaction: fast on both backends
        repo = SessionRepository(conn)
        for i in range(103):
            node = SessionNode(session_key=f"agent:main:s{i:03d}", updated_at=i)
            assert await repo.insert_new(node)
    assert len(await storage.list_sessions()) == 100
    everything = await storage.list_sessions(limit=None)
    assert len(everything) == 103
    assert everything[0].session_key == "agent:main:s102"


async def test_list_sessions_refuses_negative_pages(storage: SessionStorage) -> None:
    for limit, offset in ((-1, 0), (10, -1), (-5, -5)):
        with pytest.raises(InvalidInputError):
            await storage.list_sessions(limit=limit, offset=offset)


async def test_count_sessions(storage: SessionStorage) -> None:
    assert await storage.count_sessions() == 0
    await _listing_fixture(storage)
    assert await storage.count_sessions() == 5
    await storage.delete_session("agent:ops:a")
    assert await storage.count_sessions() == 4


# -- delete ------------------------------------------------------------------------------


async def _populate(storage: SessionStorage, key: str) -> SessionNode:
    """A session owning rows in every table, including a context state of an older
    generation (a different session_id under the same key)."""
    node = await new_session(storage, key)
    first = await add_entry(storage, node, "live 1")
    await add_entry(storage, node, "live 2")
    assert first.id is not None
    await insert_archive(storage, [archived(node, first.id - 100, "archived")])
    await add_summary(storage, node, "s1")
    await add_summary(storage, node, "s2")
    await add_state(storage, node)
    await add_state(storage, node, session_id=str(uuid.uuid4()), valid=False)
    return node


async def test_delete_session_cascades_to_everything_the_key_owns(
    storage: SessionStorage,
) -> None:
    doomed = await _populate(storage, "agent:main:doomed")
    kept = await _populate(storage, "agent:main:kept")
    kept_before = {
        table: await count_rows(storage, table, session_key=kept.session_key)
        for table in (
            "sessions",
            "transcript_entries",
            "compacted_transcript_entries",
            "session_summaries",
            "session_context_states",
        )
    }
    assert kept_before == {
        "sessions": 1,
        "transcript_entries": 2,
        "compacted_transcript_entries": 1,
        "session_summaries": 2,
        "session_context_states": 2,
    }

    assert await storage.delete_session("agent:MAIN:doomed") is True

    for table in kept_before:
        assert await count_rows(storage, table, session_key=doomed.session_key) == 0, table
        assert await count_rows(storage, table, session_key=kept.session_key) == kept_before[table]
    assert await storage.get_session(doomed.session_key) is None
    assert await storage.get_context_states(doomed.session_key, valid_only=False) == []
    assert await storage.get_canonical_transcript(doomed.session_id) == []


async def test_delete_session_of_a_missing_key_is_false(storage: SessionStorage) -> None:
    await new_session(storage, KEY)
    before = await table_snapshot(storage)
    assert await storage.delete_session("agent:main:absent") is False
    assert await table_snapshot(storage) == before
    assert await storage.delete_session(KEY) is True
    assert await storage.delete_session(KEY) is False


# -- epoch -------------------------------------------------------------------------------


async def test_get_epoch_is_zero_for_a_missing_session(storage: SessionStorage) -> None:
    assert await storage.get_epoch("agent:main:nobody") == 0


async def test_increment_epoch(storage: SessionStorage) -> None:
    await new_session(storage, KEY)
    assert await storage.get_epoch(KEY) == 0
    assert await storage.increment_epoch("agent:Main:main") == 1
    assert await storage.increment_epoch(KEY) == 2
    assert await storage.get_epoch("agent:MAIN:main") == 2


async def test_increment_epoch_of_a_missing_session_is_a_key_error(
    storage: SessionStorage,
) -> None:
    with pytest.raises(KeyError) as info:
        await storage.increment_epoch("agent:Main:ghost")
    assert isinstance(info.value, SessionNotFoundError)
    assert str(info.value) == "Session not found: agent:main:ghost"
    assert await storage.count_sessions() == 0


async def test_epoch_fence_uses_the_incremented_epoch(storage: SessionStorage) -> None:
    """An append fenced on the epoch read before an increment is refused."""
    node = await new_session(storage, KEY)
    await storage.increment_epoch(KEY)
    late = TranscriptEntry(session_id=node.session_id, session_key=KEY, role="user", content="x")
    with pytest.raises(StaleEpochError):
        await storage.append_transcript_entry(late, expected_epoch=0)
    await storage.append_transcript_entry(late, expected_epoch=1)
    assert await storage.count_transcript_entries(node.session_id) == 1
