"""Deleting a session deletes all of it.

A session owns every row stored under its key, of every generation (a legacy file or an
import can hold rows of an older one), and every row carrying its current session id, in
all four child tables. ``delete_session``, ``prune_stale`` and ``cap_entries`` remove all
of that in one transaction, and nothing another session shows as its own; their
``--dry-run`` previews count exactly those rows. A reset keeps its policy (SEMANTICS §7):
it removes only the current generation's transcript, archive and summaries.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from tests.cli.support import cli, opened, run
from tests.helpers import table_snapshot

DOOMED = "agent:main:doomed"
NEIGHBOUR = "agent:main:neighbour"
OLDER = "doomed-older-generation"
CHILD_TABLES = (
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
)


async def _raw_insert(storage: SessionStorage, *rows: Any) -> None:
    """Rows the writers now refuse (another session's id under this key, and the like),
    as a legacy file or an older import could hold them: straight into the tables."""
    async with storage.engine.begin() as conn:
        transcript = TranscriptRepository(conn)
        for row in rows:
            if isinstance(row, TranscriptEntry):
                await transcript.insert(row)
            elif isinstance(row, CompactedTranscriptEntry):
                await transcript.insert_archive_rows([row])
            else:
                table = "session_summaries" if isinstance(row, SessionSummary) else None
                table = table or "session_context_states"
                values = row.model_dump(exclude={"id"})
                columns = ", ".join(values)
                params = ", ".join(f":{name}" for name in values)
                values = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in values.items()}
                await conn.execute(
                    sa.text(f"INSERT INTO {table} ({columns}) VALUES ({params})"), values
                )


async def _session_with_history(manager: SessionManager, key: str) -> SessionNode:
    """A session with live rows, a compacted archive, a summary and context states."""
    node = await manager.create(key)
    for n in range(10):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(key, role, f"{key} message {n}", token_count=100)
    result = await manager.compact_with_result(key, 1000, compaction_id=f"cmp-{key}")
    assert result.removed_count > 0
    await manager.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=key, state_kind="response_id")
    )
    return node


async def _populate(manager: SessionManager, storage: SessionStorage) -> dict[str, SessionNode]:
    doomed = await _session_with_history(manager, DOOMED)
    neighbour = await _session_with_history(manager, NEIGHBOUR)
    # An older generation of DOOMED, in all four tables (what a legacy file can hold).
    await storage.append_transcript_entry(
        TranscriptEntry(session_id=OLDER, session_key=DOOMED, role="user", content="older")
    )
    await storage.save_summary(
        SessionSummary(session_id=OLDER, session_key=DOOMED, summary_text="older summary")
    )
    await storage.save_context_state(
        SessionContextState(session_id=OLDER, session_key=DOOMED, state_kind="older", valid=False)
    )
    await _raw_insert(
        storage,
        CompactedTranscriptEntry(
            session_id=OLDER, session_key=DOOMED, original_entry_id=1, role="user", content="old"
        ),
        # DOOMED's current generation under a key that is no session (a legacy spelling).
        TranscriptEntry(
            session_id=doomed.session_id, session_key="agent:main:Doomed ", role="user", content="x"
        ),
        # Written before ids were unique: shown by NEIGHBOUR (transcript is read by id,
        # states by key), so deleting DOOMED must leave them.
        TranscriptEntry(
            session_id=neighbour.session_id, session_key=DOOMED, role="user", content="shared"
        ),
        SessionContextState(
            session_id=doomed.session_id, session_key=NEIGHBOUR, state_kind="shared"
        ),
    )
    await storage.update_session_fields(DOOMED, {"updated_at": 1_000})
    return {"doomed": doomed, "neighbour": neighbour}


async def _count(storage: SessionStorage, table: str, where: str, **params: Any) -> int:
    async with storage.engine.connect() as conn:
        result = await conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {where}"), params)
        return int(result.scalar_one())


async def _counts(storage: SessionStorage) -> dict[str, int]:
    return {table: await _count(storage, table, "1 = 1") for table in ("sessions", *CHILD_TABLES)}


async def _neighbours_view(manager: SessionManager) -> dict[str, Any]:
    """Everything NEIGHBOUR shows through the public API."""
    return {
        "canonical": await manager.get_canonical_transcript(NEIGHBOUR),
        "summaries": await manager.get_summaries(NEIGHBOUR),
        "states": await manager.get_context_states(NEIGHBOUR, valid_only=False),
    }


async def _assert_doomed_gone_entirely(storage: SessionStorage, doomed: SessionNode) -> None:
    for table in CHILD_TABLES:
        under_key = await _count(storage, table, "session_key = :k", k=DOOMED)
        # the one row under DOOMED's key that NEIGHBOUR shows as its own stays
        assert under_key == (1 if table == "transcript_entries" else 0), table
        with_id = await _count(storage, table, "session_id = :i", i=doomed.session_id)
        assert with_id == (1 if table == "session_context_states" else 0), table
        older = await _count(storage, table, "session_id = :i", i=OLDER)
        assert older == 0, table
    assert await storage.get_session(DOOMED) is None


Deleting = Callable[[SessionManager, SessionStorage], Awaitable[Any]]
DELETIONS: dict[str, Deleting] = {
    "delete_session": lambda m, s: s.delete_session(DOOMED),
    "prune_stale": lambda m, s: m.prune_stale(60_000),
    "cap_entries": lambda m, s: m.cap_entries(1),
}


@pytest.mark.parametrize("operation", list(DELETIONS))
async def test_deleting_a_session_removes_rows_of_every_generation(
    operation: str, manager: SessionManager, storage: SessionStorage
) -> None:
    nodes = await _populate(manager, storage)
    neighbour_before = await _neighbours_view(manager)

    await DELETIONS[operation](manager, storage)

    await _assert_doomed_gone_entirely(storage, nodes["doomed"])
    assert await _neighbours_view(manager) == neighbour_before
    assert await storage.get_session(NEIGHBOUR) is not None


PREVIEWED: dict[str, tuple[Deleting, Deleting]] = {
    "prune_stale": (lambda m, s: m.preview_prune_stale(60_000), DELETIONS["prune_stale"]),
    "cap_entries": (lambda m, s: m.preview_cap_entries(1), DELETIONS["cap_entries"]),
}


@pytest.mark.parametrize("operation", list(PREVIEWED))
async def test_a_deletion_preview_counts_exactly_the_rows_the_deletion_removes(
    operation: str, manager: SessionManager, storage: SessionStorage
) -> None:
    await _populate(manager, storage)
    preview_of, delete = PREVIEWED[operation]
    before_counts = await _counts(storage)
    snapshot = await table_snapshot(storage)

    preview = await preview_of(manager, storage)
    assert await table_snapshot(storage) == snapshot
    await delete(manager, storage)

    after_counts = await _counts(storage)
    removed = {table: before_counts[table] - after_counts[table] for table in before_counts}
    assert preview.session_keys == [DOOMED]
    assert {"sessions": len(preview.sessions), **preview.rows} == removed
    assert all(removed[table] > 0 for table in CHILD_TABLES), removed


@contextlib.contextmanager
def _failing_at(storage: SessionStorage, statement: int) -> Iterator[list[int]]:
    """Make the ``statement``-th statement from now fail (as a lost connection would)."""
    seen = [0]

    def count(*_: Any) -> None:
        seen[0] += 1
        if seen[0] == statement:
            raise RuntimeError(f"injected failure at statement {statement}")

    target = storage.engine.sync_engine
    event.listen(target, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(target, "before_cursor_execute", count)


@pytest.mark.parametrize("operation", list(DELETIONS))
async def test_deleting_a_session_is_one_transaction(
    operation: str, manager: SessionManager, storage: SessionStorage
) -> None:
    """A failure at any statement of the deletion leaves the session whole (every row
    where it was) or gone entirely, never half (prune and cap commit batch by batch, so
    a failure after DOOMED's batch committed finds it gone)."""
    nodes = await _populate(manager, storage)
    before = await table_snapshot(storage)
    neighbour = await _neighbours_view(manager)

    untouched = []
    for point in range(1, 100):
        with _failing_at(storage, point):
            try:
                await DELETIONS[operation](manager, storage)
            except RuntimeError as exc:
                assert "injected" in str(exc)
                if await table_snapshot(storage) == before:
                    untouched.append(point)
                    continue
                break  # a later batch failed: DOOMED's own transaction had committed
        break
    # the session row and the four child tables: a failure at each left all of it
    assert untouched == list(range(1, len(untouched) + 1)) and len(untouched) >= 5, untouched

    await _assert_doomed_gone_entirely(storage, nodes["doomed"])
    assert await _neighbours_view(manager) == neighbour


async def test_a_reset_keeps_its_policy_and_its_preview_counts_what_it_removes(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """SEMANTICS §7: a reset removes the current generation's transcript, archive and
    summaries and invalidates the key's states; older generations' rows stay."""
    nodes = await _populate(manager, storage)
    before_counts = await _counts(storage)

    preview = await manager.preview_reset(DOOMED)
    await manager.reset(DOOMED)

    after_counts = await _counts(storage)
    removed = {table: before_counts[table] - after_counts[table] for table in CHILD_TABLES}
    assert removed == {**preview.rows, "session_context_states": 0}
    for table in CHILD_TABLES:
        assert await _count(storage, table, "session_id = :i", i=OLDER) == 1, table
    assert await _count(storage, "transcript_entries", "session_key = :k", k=DOOMED) == 2
    # A reset acts on the key's rows (one shard): the old generation's row a legacy database
    # stored under another spelling of the key stays (docs/semantics.md, "One generation").
    legacy = {"k": "agent:main:Doomed", "i": nodes["doomed"].session_id}
    assert (
        await _count(
            storage, "transcript_entries", "session_key = :k AND session_id = :i", **legacy
        )
        == 1
    )
    assert nodes["doomed"].session_id != (await manager.get_session(DOOMED)).session_id  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "command", [("prune", "--older-than", "1m"), ("cap", "--max", "1")], ids=["prune", "cap"]
)
def test_the_command_line_dry_run_counts_what_the_deletion_then_removes(
    command: tuple[str, ...], database: str
) -> None:
    async def seed() -> None:
        async with opened(database) as manager:
            await _populate(manager, manager.storage)

    async def counts() -> dict[str, int]:
        async with SessionStorage(database) as storage:
            return await _counts(storage)

    run(seed())
    before = run(counts())
    dry = cli(database, *command, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    preview = json.loads(dry.output)
    assert run(counts()) == before

    done = cli(database, *command, "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["deleted_sessions"] == 1
    after = run(counts())
    removed = {table: before[table] - after[table] for table in before}
    assert preview["sessions"] == [DOOMED]
    assert {"sessions": 1, **preview["rows"]} == removed
