"""Inline compaction against a captured source (HEAD-FEATURES §5.4,
docs/semantics.md#compaction-source): the commit checks that the captured rows are still the
live transcript's prefix, so rows appended meanwhile stay live with their ids and the
compaction still commits. Both backends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from opensquilla.session import (
    CompactionSourceSnapshot,
    InvalidInputError,
    SessionManager,
    SessionStorage,
)
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.fallback import fallback_chunk_summary
from opensquilla.session.usecases.compaction import persist as compaction_persist
from opensquilla.session.usecases.compaction.source import source_preimage
from tests.helpers import table_snapshot

KEY = "agent:main:inline-source"
OTHER = "agent:main:inline-other"
WAIT = 120.0  # a hang guard: every wait below is for an event the other side must set


async def three_messages(manager: SessionManager, key: str = KEY) -> list[int]:
    await manager.create(key)
    ids = []
    for index in range(3):
        entry = await manager.append_message(key, "user", f"msg {index}", token_count=5)
        assert entry.id is not None
        ids.append(entry.id)
    return ids


async def install(
    manager: SessionManager,
    snapshot: CompactionSourceSnapshot,
    removed_count: int = 2,
    key: str = KEY,
    summary: str = "msg 0 and msg 1 condensed",
) -> bool:
    return await manager.persist_compaction_result(
        key,
        summary,
        [{"role": "system", "content": "per-turn scaffolding, ignored"}],
        removed_count=removed_count,
        source_entries=list(snapshot.entries),
        source_preimage=snapshot.preimage,
        source_boundary_message_id=snapshot.boundary_message_id,
        source_boundary_entry_id=snapshot.boundary_entry_id,
    )


# -- capture -------------------------------------------------------------------------------


async def test_capture_compaction_source_uses_supplied_transcript_entries(
    manager: SessionManager,
) -> None:
    await three_messages(manager)
    live = await manager.get_transcript(KEY)
    supplied = live[:2]

    snapshot = await manager.capture_compaction_source(KEY, transcript_entries=supplied)

    assert list(snapshot.entries) == supplied  # the supplied rows, not the live transcript
    assert snapshot.preimage == source_preimage(supplied)
    assert snapshot.boundary_message_id == supplied[-1].message_id
    assert snapshot.boundary_entry_id == supplied[-1].id
    with pytest.raises(Exception, match="frozen"):
        snapshot.preimage = "x"  # type: ignore[misc]

    whole = await manager.capture_compaction_source(KEY)
    assert list(whole.entries) == live
    through = await manager.capture_compaction_source(KEY, boundary_message_id=live[1].message_id)
    assert list(through.entries) == live[:2] and through.preimage == snapshot.preimage


async def test_unknown_boundary_gives_an_empty_snapshot_no_install_accepts(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await three_messages(manager)
    snapshot = await manager.capture_compaction_source(KEY, boundary_message_id="msg_unknown")
    assert snapshot.entries == () and snapshot.boundary_entry_id is None
    assert snapshot.boundary_message_id is None
    before = await table_snapshot(storage)

    assert await install(manager, snapshot, removed_count=0) is False
    assert await table_snapshot(storage) == before
    assert await manager.capture_compaction_source("agent:main:missing") == snapshot


# -- install -------------------------------------------------------------------------------


async def test_inline_compaction_preserves_queued_append_only_suffix(
    manager: SessionManager,
) -> None:
    ids = await three_messages(manager)
    snapshot = await manager.capture_compaction_source(KEY)
    queued = await manager.append_message(KEY, "user", "queued while summarising")

    assert await install(manager, snapshot) is True

    live = await manager.get_transcript(KEY)
    assert [(e.id, e.content) for e in live] == [
        (ids[2], "msg 2"),
        (queued.id, "queued while summarising"),
    ]
    (summary,) = await manager.get_summaries(KEY)
    assert (summary.removed_count, summary.kept_count) == (2, 1)
    assert summary.covered_through_id == ids[1]
    archived = await manager.get_compaction_preimage(summary)
    assert [(e.id, e.content) for e in archived] == [(ids[0], "msg 0"), (ids[1], "msg 1")]
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == [
        "msg 0",
        "msg 1",
        "msg 2",
        "queued while summarising",
    ]


async def test_inline_compaction_preserves_metadata_from_concurrent_suffix_append(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await three_messages(manager)
    await manager.update(KEY, total_tokens=0, total_tokens_fresh=True)
    snapshot = await manager.capture_compaction_source(KEY)
    await manager.append_message(KEY, "assistant", "a concurrent reply", token_count=117)
    appended = await manager.get_session(KEY)
    assert appended is not None and appended.total_tokens == 117
    # The commit's clock reads earlier than the append's touch: updated_at must not go back.
    monkeypatch.setattr(compaction_persist, "now_ms", lambda: appended.updated_at - 1000)

    assert await install(manager, snapshot) is True

    node = await manager.get_session(KEY)
    assert node is not None
    assert node.total_tokens == 117
    assert node.total_tokens_fresh is False
    assert node.updated_at == appended.updated_at
    assert node.compaction_count == 1


async def test_inline_compaction_rejects_stale_source_without_partial_install(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await three_messages(manager)
    snapshot = await manager.capture_compaction_source(KEY)
    changed = snapshot.entries[0].message_id
    assert await manager.update_message_turn_context(KEY, changed, {"turn": 2}) is True
    before = await table_snapshot(storage)

    assert await install(manager, snapshot) is False

    assert await table_snapshot(storage) == before
    assert await manager.get_summaries(KEY) == []


async def test_cross_session_append_cannot_commit_a_failed_compaction(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A source captured from one session never installs on another, whatever was appended
    there; and an append to another session does not unblock a stale source."""
    await three_messages(manager)
    await three_messages(manager, OTHER)
    snapshot = await manager.capture_compaction_source(KEY)
    await manager.append_message(OTHER, "user", "appended to the other session")
    before = await table_snapshot(storage)

    assert await install(manager, snapshot, key=OTHER) is False
    assert await table_snapshot(storage) == before

    # A stale source of KEY (a row of it removed) stays refused after OTHER's append.
    await manager.remove_message(KEY, snapshot.entries[1].message_id)
    await manager.append_message(OTHER, "user", "another append elsewhere")
    before = await table_snapshot(storage)
    assert await install(manager, snapshot) is False
    assert await table_snapshot(storage) == before


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("source_preimage", "0" * 64),
        ("source_boundary_message_id", "msg_other"),
        ("source_boundary_entry_id", 10**9),
        ("removed_count", 4),
        ("removed_count", True),
        ("removed_count", None),
    ],
)
async def test_install_refuses_a_source_that_does_not_match(
    manager: SessionManager, storage: SessionStorage, change: str, value: Any
) -> None:
    await three_messages(manager)
    snapshot = await manager.capture_compaction_source(KEY)
    options: dict[str, Any] = {
        "removed_count": 2,
        "source_entries": list(snapshot.entries),
        "source_preimage": snapshot.preimage,
        "source_boundary_message_id": snapshot.boundary_message_id,
        "source_boundary_entry_id": snapshot.boundary_entry_id,
    }
    options[change] = value
    before = await table_snapshot(storage)

    assert await manager.persist_compaction_result(KEY, "summary", [], **options) is False
    assert await table_snapshot(storage) == before


async def test_source_options_need_source_entries(manager: SessionManager) -> None:
    await three_messages(manager)
    with pytest.raises(InvalidInputError, match="removed_count"):
        await manager.persist_compaction_result(KEY, "summary", [], removed_count=2)
    with pytest.raises(InvalidInputError, match="source_entries"):
        await manager.persist_compaction_result(
            KEY,
            "summary",
            [],
            source_entries=[{"role": "user"}],  # type: ignore[list-item]
        )


# -- compact_with_result against its captured live transcript ------------------------------


class GatedSummarizer:
    """Fallback text, but every chunk first waits for ``gate`` (set by the test)."""

    source = "fallback"

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate
        self.entered = asyncio.Event()
        self.calls = 0

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        self.entered.set()
        await asyncio.wait_for(self.gate.wait(), WAIT)
        return fallback_chunk_summary(chunk, identifier_policy="strict")


@pytest.fixture
async def two_managers(database: str) -> AsyncIterator[list[SessionStorage]]:
    stores = [SessionStorage(database) for _ in range(2)]
    for store in stores:
        await store.connect()
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize(
    ("switch", "locked"), [(None, False), (True, False), (True, True)], ids=str
)
async def test_appends_during_a_slow_summariser_survive_and_the_compaction_commits(
    two_managers: list[SessionStorage], switch: bool | None, locked: bool
) -> None:
    """Once the summariser has started, a writer appends every few milliseconds (through its
    own storage); the summariser is held until ``enough`` of those appends have committed,
    and the writer keeps appending while the compaction commits: the compaction commits,
    kept rows keep their ids, and the canonical transcript is everything appended, in
    order, once."""
    compactor = SessionManager(
        two_managers[0], inject_time_prefix=False, commit_against_source=switch
    )
    writer = SessionManager(two_managers[1], inject_time_prefix=False)
    await compactor.create(KEY)
    appended: list[str] = []
    for index in range(20):
        entry = await compactor.append_message(
            KEY, "user", f"seed {index} " + "x" * 400, token_count=200
        )
        appended.append(entry.message_id)
    ids_before = {e.message_id: e.id for e in await compactor.get_transcript(KEY)}
    enough = 5
    gate, finished = asyncio.Event(), asyncio.Event()
    summarizer = GatedSummarizer(gate)
    late: list[str] = []

    async def keep_appending() -> None:
        await asyncio.wait_for(summarizer.entered.wait(), WAIT)  # the transcript was read
        index = 0
        while not finished.is_set() or index < enough + 3:
            entry = await writer.append_message(KEY, "user", f"live {index}", token_count=3)
            late.append(entry.message_id)
            index += 1
            if index == enough:
                gate.set()
            await asyncio.sleep(0.002)  # pacing only: the interleaving is forced by `gate`

    @contextlib.asynccontextmanager
    async def lock() -> AsyncIterator[None]:
        yield

    async def compact() -> Any:
        try:
            return await compactor.compact_with_result(
                KEY, 2000, summarizer=summarizer, mutation_context=lock if locked else None
            )
        finally:
            finished.set()

    _, result = await asyncio.gather(keep_appending(), compact())

    assert summarizer.calls > 0
    assert result.skip_reason is None and result.removed_count > 0
    assert len(late) >= enough + 3
    node = await compactor.get_session(KEY)
    assert node is not None and node.compaction_count == 1
    assert len(await compactor.get_summaries(KEY)) == 1
    canonical = [e.message_id for e in await compactor.get_canonical_transcript(KEY)]
    assert canonical == [*appended, *late]
    assert len(set(canonical)) == len(canonical)
    live = await compactor.get_transcript(KEY)
    kept = appended[result.removed_count :]
    assert [e.message_id for e in live] == [*kept, *late]
    assert [e.id for e in live[: len(kept)]] == [ids_before[m] for m in kept]


@pytest.mark.parametrize("switch", [None, False, True])
async def test_the_contracts_late_append_under_the_callers_lock(
    storage: SessionStorage, switch: bool | None
) -> None:
    """The contract's scenario (a message appended as the caller's lock is entered for the
    commit): stale by default and with the switch off; with ``commit_against_source=True``
    the message stays live, with its id, and the compaction commits."""
    manager = SessionManager(storage, inject_time_prefix=False, commit_against_source=switch)
    await manager.create(KEY)
    for index in range(20):
        await manager.append_message(KEY, "user", f"msg {index} " + "x" * 500, token_count=200)
    entries = 0
    late: list[Any] = []

    @contextlib.asynccontextmanager
    async def lock() -> AsyncIterator[None]:
        nonlocal entries
        entries += 1
        if entries == 2:
            late.append(await manager.append_message(KEY, "user", "late", token_count=3))
        yield

    result = await manager.compact_with_result(KEY, 1000, mutation_context=lock)

    live = await manager.get_transcript(KEY)
    assert (live[-1].id, live[-1].content) == (late[0].id, "late")
    node = await manager.get_session(KEY)
    assert node is not None
    if switch is True:
        assert result.skip_reason is None and result.removed_count > 0
        assert node.compaction_count == 1 and len(live) == 20 - result.removed_count + 1
    else:
        assert result.skip_reason == "stale_preimage" and result.removed_count == 0
        assert node.compaction_count == 0 and len(live) == 21


async def test_commit_against_source_must_be_a_bool_or_none(storage: SessionStorage) -> None:
    with pytest.raises(InvalidInputError, match="commit_against_source"):
        SessionManager(storage, commit_against_source="yes")  # type: ignore[arg-type]
