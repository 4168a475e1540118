"""A generation id (``session_id``) belongs to exactly one session.

Delete, prune, cap and reset act on every row carrying a session id, so a second session
holding one would destroy (or take over) the first one's transcript. Every writer that
gives a session, or a row, an id refuses one that another key holds, with one clear error
(``SessionIdInUseError``: a ``SessionExistsError`` and an ``InvalidInputError``, both
``ValueError``) naming the id and the session that owns it, before anything is written.
When a concurrent writer takes the id after the check, the unique index on
``sessions.session_id`` fires; that is reported the same way, never as a constraint error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos.sessions import SessionRepository
from opensquilla.session.errors import (
    IntegrityViolationError,
    InvalidInputError,
    ProtectedFieldError,
    SessionExistsError,
    SessionIdInUseError,
)
from opensquilla.session.keys import CanonicalKey
from opensquilla.session.models import (
    SessionContextState,
    SessionIntent,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from opensquilla.session.models.reports import SessionRows
from opensquilla.session.transfer.store import TransferStore
from opensquilla.session.usecases import branching, reset
from tests.cli.support import cli
from tests.helpers import table_snapshot

OWNER = "agent:main:a"
TAKER = "agent:main:b"


async def _owner_with_history(manager: SessionManager) -> SessionNode:
    node = await manager.create(OWNER)
    await manager.append_message(OWNER, "user", "a's first message")
    await manager.append_message(OWNER, "assistant", "a's answer")
    return node


def _assert_names_the_owner(error: BaseException, node: SessionNode) -> None:
    message = str(error)
    assert node.session_id in message and OWNER in message, message
    assert "uq_sessions_session_id" not in message and "UNIQUE" not in message, message


async def test_the_reported_reproduction_no_longer_empties_the_owners_transcript(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """create a, append, create b with a's session_id, delete b: a's transcript stays."""
    owner = await _owner_with_history(manager)
    before = await table_snapshot(storage)

    with pytest.raises(SessionIdInUseError) as refused:
        await manager.create(TAKER, session_id=owner.session_id)

    assert isinstance(refused.value, SessionExistsError)
    assert isinstance(refused.value, InvalidInputError)
    assert isinstance(refused.value, ValueError)
    _assert_names_the_owner(refused.value, owner)
    assert await table_snapshot(storage) == before
    assert await storage.delete_session(TAKER) is False
    assert [e.content for e in await manager.get_transcript(OWNER)] == [
        "a's first message",
        "a's answer",
    ]


ManagerWriter = Callable[[SessionManager, str], Awaitable[Any]]
MANAGER_WRITERS: dict[str, ManagerWriter] = {
    "create": lambda m, sid: m.create(TAKER, session_id=sid),
    "get_or_create": lambda m, sid: m.get_or_create(TAKER, session_id=sid),
    "apply_intent(NEW_CHAT)": lambda m, sid: m.apply_intent(
        TAKER, SessionIntent.NEW_CHAT, session_id=sid
    ),
    "apply_intent(RESET_SAME_KEY)": lambda m, sid: m.apply_intent(
        TAKER, SessionIntent.RESET_SAME_KEY, session_id=sid
    ),
}


@pytest.mark.parametrize("writer", list(MANAGER_WRITERS))
async def test_every_manager_writer_refuses_a_session_id_another_session_holds(
    writer: str, manager: SessionManager, storage: SessionStorage
) -> None:
    owner = await _owner_with_history(manager)
    before = await table_snapshot(storage)

    with pytest.raises(SessionIdInUseError) as refused:
        await MANAGER_WRITERS[writer](manager, owner.session_id)

    _assert_names_the_owner(refused.value, owner)
    assert await table_snapshot(storage) == before


async def test_a_free_session_id_given_to_create_is_kept(manager: SessionManager) -> None:
    node = await manager.create(TAKER, session_id="generation-chosen-by-the-caller")
    assert node.session_id == "generation-chosen-by-the-caller"
    assert (await manager.get_session(TAKER)).session_id == node.session_id  # type: ignore[union-attr]
    again, created = await manager.get_or_create(TAKER, session_id="ignored-for-an-existing-key")
    assert created is False and again.session_id == node.session_id


@pytest.mark.parametrize(
    "field,value",
    [
        ("epoch", 7),
        ("compaction_count", 3),
        ("updated_at", 1),
        ("created_at", 1),
        ("schema_version", 2),
    ],
)
async def test_create_refuses_the_fields_only_the_store_sets_as_update_does(
    field: str, value: int, manager: SessionManager, storage: SessionStorage
) -> None:
    before = await table_snapshot(storage)
    for create in (
        lambda: manager.create(TAKER, **{field: value}),
        lambda: manager.get_or_create(TAKER, **{field: value}),
        lambda: manager.apply_intent(TAKER, SessionIntent.CONTINUE, **{field: value}),
    ):
        with pytest.raises(ProtectedFieldError, match=field):
            await create()
    await manager.create(TAKER)
    with pytest.raises(ProtectedFieldError, match=field):
        await manager.update(TAKER, **{field: value})
    await storage.delete_session(TAKER)
    assert await table_snapshot(storage) == before


StorageWriter = Callable[[SessionStorage, SessionNode], Awaitable[Any]]


def _import_block(session_id: str, *, in_rows: bool) -> SessionRows:
    """An import block for TAKER carrying ``session_id`` on its session row or its rows."""
    own = "b-own-generation"
    row = SessionNode(session_key=TAKER, session_id=session_id if not in_rows else own)
    entry = TranscriptEntry(session_id=session_id, session_key=TAKER, role="user", content="x")
    values = row.model_dump()
    entry_values = entry.model_dump()
    entry_values["id"] = 10_000
    return SessionRows(values, {"transcript_entries": [entry_values]} if in_rows else {})


# The storage's writers, and the use cases and the transfer store's insert that write past
# it (``branch_session``, ``reset_session`` and ``insert_session_rows`` keep the names they
# had as storage methods).
STORAGE_WRITERS: dict[str, StorageWriter] = {
    "create_session": lambda s, a: s.create_session(
        SessionNode(session_key=TAKER, session_id=a.session_id)
    ),
    "upsert_session (new key)": lambda s, a: s.upsert_session(
        SessionNode(session_key=TAKER, session_id=a.session_id)
    ),
    "upsert_session (a newer epoch of an existing key)": lambda s, a: _upsert_newer(s, a),
    "update_session_fields": lambda s, a: _update_fields(s, a),
    "branch_session": lambda s, a: branching.branch_session(
        s.uow, CanonicalKey(OWNER), CanonicalKey(TAKER), session_id=a.session_id
    ),
    "reset_session (another session's id)": lambda s, a: _reset_to(s, a),
    "reset_session (its own current id)": lambda s, a: reset.start_generation(
        s.uow,
        CanonicalKey(OWNER),
        expected_session_id=a.session_id,
        expected_epoch=0,
        new_session_id=a.session_id,
        now=1,
    ),
    "insert_session_rows (the session row)": lambda s, a: TransferStore(
        s, operation="import"
    ).insert(_import_block(a.session_id, in_rows=False), if_exists="fail"),
    "insert_session_rows (its rows)": lambda s, a: TransferStore(s, operation="import").insert(
        _import_block(a.session_id, in_rows=True), if_exists="fail"
    ),
    "append_transcript_entry": lambda s, a: s.append_transcript_entry(
        TranscriptEntry(session_id=a.session_id, session_key=TAKER, role="user", content="x")
    ),
    "save_summary": lambda s, a: s.save_summary(
        SessionSummary(session_id=a.session_id, session_key=TAKER, summary_text="x")
    ),
    "save_context_state": lambda s, a: s.save_context_state(
        SessionContextState(session_id=a.session_id, session_key=TAKER, state_kind="k")
    ),
}
# Writers that need TAKER to exist first (as its own session, with its own id).
NEEDS_TAKER = {
    "upsert_session (a newer epoch of an existing key)",
    "update_session_fields",
    "append_transcript_entry",
    "save_summary",
    "save_context_state",
    "reset_session (another session's id)",
}


async def _upsert_newer(storage: SessionStorage, owner: SessionNode) -> None:
    taker = await storage.get_session(TAKER)
    assert taker is not None
    await storage.upsert_session(
        taker.model_copy(update={"epoch": taker.epoch + 5, "session_id": owner.session_id})
    )


async def _update_fields(storage: SessionStorage, owner: SessionNode) -> None:
    await storage.update_session_fields(TAKER, {"session_id": owner.session_id})


async def _reset_to(storage: SessionStorage, owner: SessionNode) -> None:
    taker = await storage.get_session(TAKER)
    assert taker is not None
    await reset.start_generation(
        storage.uow,
        CanonicalKey(TAKER),
        expected_session_id=taker.session_id,
        expected_epoch=taker.epoch,
        new_session_id=owner.session_id,
        now=1,
    )


@pytest.mark.parametrize("writer", list(STORAGE_WRITERS))
async def test_every_storage_writer_refuses_a_session_id_another_session_holds(
    writer: str, manager: SessionManager, storage: SessionStorage
) -> None:
    owner = await _owner_with_history(manager)
    if writer in NEEDS_TAKER:
        await manager.create(TAKER)
        await manager.append_message(TAKER, "user", "b's own message")
    before = await table_snapshot(storage)

    with pytest.raises(SessionIdInUseError) as refused:
        await STORAGE_WRITERS[writer](storage, owner)

    assert owner.session_id in str(refused.value)
    assert await table_snapshot(storage) == before
    assert len(await manager.get_transcript(OWNER)) == 2


async def test_an_id_carried_by_rows_under_another_key_is_not_taken_over(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Rows of an older generation (a legacy file, an import) under key a: a new session
    b may not take their id, or a's old rows would show up in b and go when b is deleted."""
    await manager.create(OWNER)
    await storage.append_transcript_entry(
        TranscriptEntry(
            session_id="a-older-generation", session_key=OWNER, role="user", content="old"
        )
    )
    before = await table_snapshot(storage)

    with pytest.raises(SessionIdInUseError, match="rows stored under the key 'agent:main:a'"):
        await manager.create(TAKER, session_id="a-older-generation")

    assert await table_snapshot(storage) == before


# -- the race: the unique index fires after the check passed --------------------------


async def _check_passes(*_: Any, **__: Any) -> None:
    """Stands in for the writer's check, as if a concurrent writer took the id just
    after it ran: only the database's unique index is left to refuse."""


# The writers that put the id on a session row, where the unique index can refuse it
# (a row's id, or a reset to the session's own current id, only the check can refuse).
INDEXED_WRITERS = [
    writer
    for writer in STORAGE_WRITERS
    if "_session" in writer and "its rows" not in writer and "its own current id" not in writer
]


# A partitioned database has no global unique index on session_id (docs/scaling.md).
@pytest.mark.plain_layout
@pytest.mark.parametrize("writer", INDEXED_WRITERS)
async def test_the_unique_index_firing_in_a_race_gives_the_same_clear_error(
    writer: str,
    manager: SessionManager,
    storage: SessionStorage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = await _owner_with_history(manager)
    if writer in NEEDS_TAKER:
        await manager.create(TAKER)
    before = await table_snapshot(storage)
    monkeypatch.setattr(SessionRepository, "claim_generation", _check_passes)

    with pytest.raises(SessionIdInUseError) as refused:
        await STORAGE_WRITERS[writer](storage, owner)

    _assert_names_the_owner(refused.value, owner)
    assert isinstance(refused.value.__cause__, IntegrityViolationError)
    assert await table_snapshot(storage) == before


async def test_two_creators_of_one_key_with_one_id_racing_both_get_the_session(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser of the race sees the key taken (get_or_create returns the winner's row),
    not an error."""
    await manager.create(OWNER, session_id="shared-by-design")
    monkeypatch.setattr(SessionRepository, "claim_generation", _check_passes)

    assert (
        await storage.create_session(SessionNode(session_key=OWNER, session_id="shared-by-design"))
        is False
    )
    node, created = await manager.get_or_create(OWNER, session_id="shared-by-design")
    assert created is False and node.session_id == "shared-by-design"


@pytest.mark.plain_layout  # the race is settled by uq_sessions_session_id
@pytest.mark.postgres_only
async def test_two_concurrent_creators_of_one_id_one_wins_the_other_gets_the_clear_error(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real race on PostgreSQL: both checks pass (held at a barrier), both insert; the
    unique index makes the second wait for the first and then refuse it."""
    real_claim = SessionRepository.claim_generation
    barrier = asyncio.Barrier(2)

    async def claim_then_meet(*args: Any, **kwargs: Any) -> None:
        await real_claim(*args, **kwargs)
        await asyncio.wait_for(barrier.wait(), 30)

    monkeypatch.setattr(SessionRepository, "claim_generation", claim_then_meet)
    async with SessionStorage(database) as first, SessionStorage(database) as second:
        results = await asyncio.gather(
            SessionManager(first).create("agent:main:x", session_id="contested"),
            SessionManager(second).create("agent:main:y", session_id="contested"),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, SessionNode)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], SessionIdInUseError), repr(losers[0])
        assert winners[0].session_key in str(losers[0])
        assert await first.count_sessions() == 1


# -- through the command line ---------------------------------------------------------


def test_importing_a_block_that_carries_another_sessions_id_is_refused_whole(
    database: str, tmp_path: Path
) -> None:
    """A hand-edited export (a's block copied under a new key, ids kept) must not land in
    a's transcript: the import stops with one line naming the id, and writes nothing."""
    from tests.cli.support import dump_tables, opened, run

    async def seed() -> SessionNode:
        async with opened(database) as manager:
            return await _owner_with_history(manager)

    owner = run(seed())
    exported = tmp_path / "a.jsonl"
    assert cli(database, "export", "-o", str(exported)).exit_code == 0
    forged = []
    for line in exported.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["kind"] == "session":
            record["row"]["session_key"] = TAKER
        elif record["kind"] == "row":
            record["row"]["session_key"] = TAKER
            record["row"]["id"] = record["row"]["id"] + 1000
        elif record["kind"] == "end":
            record["session_key"] = TAKER
            record.pop("sha256", None)
        forged.append(json.dumps(record, ensure_ascii=False))
    (tmp_path / "forged.jsonl").write_text("\n".join(forged) + "\n", encoding="utf-8")
    before = run(dump_tables(database))

    result = cli(database, "import", str(tmp_path / "forged.jsonl"))

    assert result.exit_code == 1, result.output
    assert owner.session_id in result.output and OWNER in result.output, result.output
    assert "Traceback" not in result.output
    assert run(dump_tables(database)) == before
